// The vector engine's lane operations and array layout, shared by its two translation units
// (vector_fabric.cc, built for any x86-64, and vector_fabric_step.cc, built for this host's
// processor). Everything here has internal linkage, so each unit keeps its own copy: no function
// compiled for AVX-512 can stand in for one of the generic unit. Include only from those two.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

// The 16-lane vectors are passed between inline helpers of one translation unit only.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace wafersim {
namespace {  // NOLINT(google-build-namespaces): internal linkage on purpose

constexpr int kLanes = 16;
typedef uint32_t V __attribute__((vector_size(4 * kLanes)));
typedef float VF __attribute__((vector_size(4 * kLanes)));

inline V ld(const uint32_t* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void st(uint32_t* p, V v) { std::memcpy(p, &v, sizeof v); }
inline V splat(uint32_t x) { return V{} + x; }
inline V nz(V v) { return (V)(v != 0); }
inline bool any(V v) {
#ifdef __AVX512F__
  return _mm512_test_epi32_mask((__m512i)v, (__m512i)v) != 0;
#else
  uint64_t x[kLanes / 2];
  std::memcpy(x, &v, sizeof x);
  uint64_t o = 0;
  for (uint64_t w : x) o |= w;
  return o != 0;
#endif
}
// The index of the one set bit of each lane (lanes without one: garbage).
inline V bit_index(V bit) {
  const VF f = __builtin_convertvector(bit, VF);  // a power of two converts exactly
  V e;
  std::memcpy(&e, &f, sizeof e);
  return (e >> 23) - 127;
}
// Set bits per lane.
inline V popcount(V v) {
  v = v - ((v >> 1) & 0x55555555u);
  v = (v & 0x33333333u) + ((v >> 2) & 0x33333333u);
  v = (v + (v >> 4)) & 0x0f0f0f0fu;
  return (v * 0x01010101u) >> 24;
}
// base[idx] where `where` is set, else 0; and base[idx] = val where `where` is set.
inline V gather(const uint32_t* base, V where, V idx) {
#ifdef __AVX512F__
  return (V)_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), _mm512_test_epi32_mask((__m512i)where, (__m512i)where),
                                        (__m512i)idx, base, 4);
#else
  V v{};
  for (int l = 0; l < kLanes; ++l) {
    if (where[l]) v[l] = base[idx[l]];
  }
  return v;
#endif
}
inline void scatter(uint32_t* base, V where, V idx, V val) {
#ifdef __AVX512F__
  _mm512_mask_i32scatter_epi32(base, _mm512_test_epi32_mask((__m512i)where, (__m512i)where), (__m512i)idx, (__m512i)val, 4);
#else
  for (int l = 0; l < kLanes; ++l) {
    if (where[l]) base[idx[l]] = val[l];
  }
#endif
}
// Plane arithmetic on 3-bit per-color values (planes p[0..2]): + bit, - bit.
inline void inc3(V* p, V bit) {
  const V c1 = p[0] & bit, c2 = p[1] & c1;
  p[0] ^= bit;
  p[1] ^= c1;
  p[2] ^= c2;
}
inline void dec3(V* p, V bit) {
  const V b1 = ~p[0] & bit, b2 = ~p[1] & b1;
  p[0] ^= bit;
  p[1] ^= b1;
  p[2] ^= b2;
}
inline V get3(const V* p, V c) { return ((p[0] >> c) & 1) | (((p[1] >> c) & 1) << 1) | (((p[2] >> c) & 1) << 2); }
// Colors whose value equals k (0..7).
inline V eq3(const V* p, int k) {
  V m = splat(~0u);
  for (int i = 0; i < 3; ++i) m &= (k >> i) & 1 ? p[i] : ~p[i];
  return m;
}
// Colors whose value equals each lane's own k (0..7).
inline V eqv(const V* p, V k) {
  V m = splat(~0u);
  for (int i = 0; i < 3; ++i) m &= ((k >> i) & 1) ? p[i] : ~p[i];
  return m;
}
// Colors whose value is at least k (1..7).
inline V ge3(const V* p, int k) {
  V m{};
  for (int v = k; v < 8; ++v) m |= eq3(p, v);
  return m;
}

// Per-lane arrays, each m_stride long.
enum : int {
  kC = 0,                 // buffer count planes (3)
  kH = kC + 3,            // head index planes (3)
  kK = kH + 3,            // credit planes per output link: kK + 3 * port + plane (12)
  kServed = kK + 12,      // + port: colors whose head has gone out on that port (5)
  kRx = kServed + 5,      // + port: colors whose input port it is (5)
  kTx = kRx + 5,          // + port: colors routed to that output (5)
  kRr = kTx + 5,          // + port: round-robin position of its arbiter (5)
  kYoung = kRr + 5,       // the color the agent injected in the previous cycle (ramp latency 2)
  kAgentFull,             // the agent's full_colors()
  kFwd = kAgentFull + 1,  // + port: sends (low 16 bits) and stalled cycles (high 16) since the last flush (5)
  kReach = kFwd + 5,      // + k - 1: colors whose buffer has held k wavelets (7)
  kPeakOcc = kReach + 7,  // peak of all buffers together
  kMail = kPeakOcc + 1,   // + parity * 16 + what * 4 + input port; what: payload, color + 1, ctrl, credits
  kVFwd = kMail + 32,     // vertical counters of sends per color (16 planes)
  kVStall = kVFwd + 16,   // vertical counters of stalled cycles per color (16 planes)
  kCount = kVStall + 16,  // + what: injections, deliveries, sends, pops since the last flush (4)
  // Traffic endpoints run here (TrafficAgent's state, lane by lane):
  kRecv = kCount + 4,     // colors with a receive queue
  kNever,                 // colors never drained
  kQc,                    // receive queue counts, bit planes (3)
  kQh = kQc + 3,          // receive queue heads (3)
  kQDepth = kQh + 3,      // queue depth
  kYd0, kYd1,             // the color delivered in this cycle, in the previous one
  kRrq,                   // round-robin: the first color of the next turn (32: from the lowest)
  kFlowN, kRrFlow,        // flows (0-2), round-robin position
  kFc,                    // + flow: color (2)
  kSeq = kFc + 2,         // + flow: next sequence number (2)
  kFsent = kSeq + 2,      // + flow: sent (2)
  kFcount = kFsent + 2,   // + flow: wavelets to send, 0 = unbounded (2)
  kCtrlEvery = kFcount + 2,  // + flow (2)
  kUnfinished = kCtrlEvery + 2,
  kBuffered, kConsumed, kSentTotal,
  kPe,                    // the endpoint's PE id (its payloads, its draws)
  kArrays
};
enum : int { kMailPay = 0, kMailCol = 1, kMailCtrl = 2, kMailCred = 3 };
constexpr uint64_t kFlushEvery = 30000;  // below 2^16 (vertical counters) and 2^32

int mail_index(int parity, int what, int port) { return kMail + parity * 16 + what * 4 + port; }

}  // namespace

}  // namespace wafersim
