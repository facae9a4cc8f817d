#include "hw/vector_fabric.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>
#include <cstring>
#include <typeinfo>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "hw/fabric.h"
#include "hw/pe_agent.h"
#include "hw/router.h"
#include "hw/traffic_agent.h"
#include "hw/worker_pool.h"

// The 16-lane vectors are passed between inline helpers of this file only.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace wafersim {
namespace {

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

// A traffic endpoint it can run itself: every flow at rate 1, at most two flows, counts that fit
// 32 bits, receive queues of depth 1-7 made in ascending color order (so that TrafficAgent's
// round robin over queue indexes is one over colors).
bool VectorFabric::runs_itself(const TrafficAgent& a, int colors) {
  if (!a.m_unit_rates || a.m_flows.size() > 2 || a.m_opts.queue_depth < 1 || a.m_opts.queue_depth > 7) return false;
  if (colors > 32) return false;
  for (const auto& fl : a.m_flows) {
    if (fl.spec.count > 0xffffffffull || fl.spec.rate <= 0) return false;
  }
  for (size_t i = 1; i < a.m_queue_color.size(); ++i) {
    if (a.m_queue_color[i] <= a.m_queue_color[i - 1]) return false;
  }
  return true;
}

std::string VectorFabric::supported(const Fabric& f) {
  const HwConfig& c = f.config();
  if (c.router.hop_latency != 1) return "router.hop_latency is not 1";
  if (c.router.ramp_latency > 2) return "router.ramp_latency is above 2";
  if (c.router.buffer_depth > 7) return "router.buffer_depth is above 7";
  for (int y = 0; y < f.height(); ++y) {
    for (int x = 0; x < f.width(); ++x) {
      const Router* r = f.router(x, y);
      if (!r) continue;
      const std::string at = Fabric::pe_name(x, y);
      if (const PeAgent* a = r->agent(); a && a->skips_evaluations()) return at + ": its agent skips evaluations";
      for (uint32_t m = r->routed_colors(); m; m &= m - 1) {
        const ColorRoute& route = *r->route(__builtin_ctz(m));
        if (route.npos != 1) return at + ": a route with switch positions";
        const uint8_t rx = route.pos[0].rx;
        if (!rx || (rx & (rx - 1))) return at + ": a route that merges input ports";
        for (int p : {kEast, kWest}) {
          if (((rx | route.pos[0].tx) & port_bit(p)) && !f.contains(x + port_dx(p), y)) return at + ": an edge channel";
        }
      }
    }
  }
  return "";
}

VectorFabric::VectorFabric(Fabric& f)
    : m_cfg(f.config()), m_width(f.width()), m_height(f.height()), m_depth(m_cfg.router.buffer_depth),
      m_colors(m_cfg.router.colors), m_ramp_latency(m_cfg.router.ramp_latency) {
  if (const std::string why = supported(f); !why.empty()) throw ConfigError("vector fabric: " + why);
  if (f.cycle() != 0) throw ConfigError("vector fabric: the fabric has already been stepped");
  m_row = (static_cast<size_t>(m_width) + kLanes - 1) / kLanes * kLanes;
  m_guard = m_row + kLanes;
  m_stride = m_guard * 2 + m_row * static_cast<size_t>(m_height);
  {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t bytes = (m_stride * kArrays * sizeof(uint32_t) + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, bytes);
    if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without huge pages it works as well, slower
#endif
    std::memset(p, 0, bytes);
    m_mem = std::unique_ptr<uint32_t[], FreeHuge>(static_cast<uint32_t*>(p), FreeHuge{bytes});
  }
  m_pay.assign(m_stride * static_cast<size_t>(m_colors) * static_cast<size_t>(m_depth), 0);
  m_agent.assign(m_stride, nullptr);
  m_endpoint.assign(m_stride, nullptr);
  m_drain_below.assign(m_stride, 0);
  m_stall_below.assign(m_stride, 0);
  m_seed.assign(m_stride, 0);
  m_qpay.assign(m_stride * static_cast<size_t>(m_colors) * 8, 0);

  m_fwd64.assign(m_stride * kNumPorts, 0);
  m_stall64.assign(m_stride * kNumPorts, 0);
  m_color_fwd.assign(static_cast<size_t>(m_colors), 0);
  m_color_stall.assign(static_cast<size_t>(m_colors), 0);
  std::vector<bool> busy(m_stride / kLanes + 1, false);
  for (int y = 0; y < m_height; ++y) {
    for (int x = 0; x < m_width; ++x) {
      const Router* r = f.router(x, y);
      if (!r) continue;
      const size_t l = lane(x, y);
      m_agent[l] = f.agent(x, y);
      if (m_agent[l]) arr(kAgentFull)[l] = m_agent[l]->full_colors();
      auto* ta = dynamic_cast<TrafficAgent*>(m_agent[l]);
      if (ta && typeid(*ta) == typeid(TrafficAgent) && runs_itself(*ta, m_colors)) {
        m_endpoint[l] = ta;
        arr(kRecv)[l] = ta->m_receive_colors;
        arr(kNever)[l] = ta->m_opts.never_drain;
        arr(kQDepth)[l] = static_cast<uint32_t>(ta->m_opts.queue_depth);
        arr(kRrq)[l] = 0;
        arr(kFlowN)[l] = static_cast<uint32_t>(ta->m_flows.size());
        for (size_t i = 0; i < ta->m_flows.size(); ++i) {
          const auto& fl = ta->m_flows[i];
          arr(kFc + static_cast<int>(i))[l] = static_cast<uint32_t>(fl.spec.color);
          arr(kFcount + static_cast<int>(i))[l] = static_cast<uint32_t>(fl.spec.count);
          arr(kCtrlEvery + static_cast<int>(i))[l] = fl.spec.ctrl_every;
        }
        arr(kUnfinished)[l] = static_cast<uint32_t>(ta->m_unfinished_flows);
        // hash_uniform(...) < p  <=>  (h >> 11) < ceil(p * 2^53): the draw is (h >> 11) / 2^53.
        auto below = [](double p) {
          if (p >= 1.0) return ~uint64_t{0};
          if (p <= 0.0) return uint64_t{0};
          return static_cast<uint64_t>(std::ceil(p * 9007199254740992.0));
        };
        m_drain_below[l] = below(ta->m_opts.drain_prob);
        m_stall_below[l] = ta->m_opts.stall_prob > 0 ? below(ta->m_opts.stall_prob) : 0;
        m_seed[l] = ta->m_opts.seed;
        arr(kPe)[l] = ta->m_pe;
        if (ta->m_opts.record) m_record = true;
      }
      for (uint32_t m = r->routed_colors(); m; m &= m - 1) {
        const int c = __builtin_ctz(m);
        const SwitchPos& pos = r->route(c)->pos[0];
        for (int p = 0; p < kNumPorts; ++p) {
          if (pos.rx & port_bit(p)) arr(kRx + p)[l] |= 1u << c;
          if (pos.tx & port_bit(p)) {
            arr(kTx + p)[l] |= 1u << c;
            if (p < kNumLinkPorts) {
              for (int i = 0; i < 3; ++i) {
                if ((m_depth >> i) & 1) arr(kK + 3 * p + i)[l] |= 1u << c;
              }
            }
          }
        }
      }
      busy[(l - m_guard) / kLanes] = true;
      ++m_routers;
    }
  }
  for (size_t k = 0; k < busy.size(); ++k) {
    if (!busy[k]) continue;
    const size_t b = m_guard + k * kLanes;
    m_blocks.push_back(b);
    uint32_t agents = 0, endpoints = 0, drains = 0, stalls = 0;
    for (int l = 0; l < kLanes; ++l) {
      const size_t i = b + static_cast<size_t>(l);
      if (m_endpoint[i]) {
        endpoints |= 1u << l;
        if (m_drain_below[i] != ~uint64_t{0}) drains |= 1u << l;
        if (m_stall_below[i]) stalls |= 1u << l;
      } else if (m_agent[i]) {
        agents |= 1u << l;
      }
    }
    m_block_agents.push_back(agents);
    m_block_endpoints.push_back(endpoints);
    m_block_drains.push_back(drains);
    m_block_stalls.push_back(stalls);
    uint8_t multicast = 0;
    for (int l = 0; l < kLanes; ++l) {
      const size_t i = b + static_cast<size_t>(l);
      uint32_t seen = 0, twice = 0;
      for (int p = 0; p < kNumPorts; ++p) {
        twice |= seen & arr(kTx + p)[i];
        seen |= arr(kTx + p)[i];
      }
      if (twice) multicast = 1;
    }
    m_block_multicast.push_back(multicast);
  }
  // Control bits need slots only where a control wavelet can appear: an agent called through
  // PeAgent may send one, an endpoint run here if a flow says so.
  bool may_ctrl = false;
  for (size_t i = 0; i < m_agent.size() && !may_ctrl; ++i) {
    if (m_agent[i] && !m_endpoint[i]) may_ctrl = true;
    if (const TrafficAgent* a = m_endpoint[i]) {
      for (const auto& fl : a->m_flows) may_ctrl |= fl.spec.ctrl_every != 0;
    }
  }
  if (may_ctrl) {
    m_ctrl.assign(m_pay.size(), 0);
    m_qctrl.assign(m_qpay.size(), 0);
  }
  const auto threads = static_cast<size_t>(std::max(1, m_cfg.sim.threads));
  m_moved.assign(threads, Flag{});
  for (size_t t = 0; t <= threads; ++t) m_share.push_back(m_blocks.size() * t / threads);
}

void VectorFabric::FreeHuge::operator()(uint32_t* p) const {
  (void)bytes;
  std::free(p);
}

void VectorFabric::step(WorkerPool* pool) {
  auto share = [this](int t) {
    bool& moved = m_moved[static_cast<size_t>(t)].value;
    moved = false;
    for (size_t i = m_share[static_cast<size_t>(t)]; i < m_share[static_cast<size_t>(t) + 1]; ++i) {
      step_block(i, &moved);
    }
  };
  if (pool && pool->size() > 1 && static_cast<size_t>(pool->size()) + 1 == m_share.size()) {
    pool->run(share);
  } else {
    for (size_t t = 0; t + 1 < m_share.size(); ++t) share(static_cast<int>(t));
  }
  ++m_now;
  if (m_now - m_flushed_at >= kFlushEvery) flush_counters();
}

void VectorFabric::step_block(size_t block, bool* moved) {
  const size_t b = m_blocks[block];
  const uint32_t agents = m_block_agents[block], endpoints = m_block_endpoints[block];
  const bool ctrl_seen = m_ctrl_seen.load(std::memory_order_relaxed);
  static const V kLaneBit = V{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768};
  const V emask = nz(splat(endpoints) & kLaneBit);  // ~0 on the lanes of endpoints run here
  const uint64_t now = m_now;
  const int prev = static_cast<int>((now + 1) & 1), cur = static_cast<int>(now & 1);
  const auto colors = static_cast<size_t>(m_colors), depth = static_cast<size_t>(m_depth);
  const ptrdiff_t offset[kNumLinkPorts] = {-static_cast<ptrdiff_t>(m_row), static_cast<ptrdiff_t>(m_row), 1, -1};
  V cnt[3], head[3];
  for (int i = 0; i < 3; ++i) cnt[i] = ld(arr(kC + i) + b), head[i] = ld(arr(kH + i) + b);
  const V lane_index = V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15} + static_cast<uint32_t>(b);
  auto slot_of = [&](V col, V slot) { return (lane_index * static_cast<uint32_t>(colors) + col) * static_cast<uint32_t>(depth) + slot; };
  auto push = [&](V bit, V col, V payload, V ctrl) {
    V tail = get3(head, col) + get3(cnt, col);
    tail = tail >= static_cast<uint32_t>(m_depth) ? tail - static_cast<uint32_t>(m_depth) : tail;
    const V idx = slot_of(col, tail);
    scatter(m_pay.data(), bit, idx, payload);
    if (ctrl_seen || any(ctrl)) scatter(m_ctrl.data(), bit, idx, ctrl);
    inc3(cnt, bit);
  };
  auto count = [&](int what, V n) {
    uint32_t* p = arr(kCount + what) + b;
    st(p, ld(p) + n);
  };
  // Peaks: the buffers are at their fullest after the arrivals are in (before the pops) or after
  // the agents' injections; both are folded in once, at the end of the cycle.
  auto peaks = [&](const V* mid) {
    for (int k = 1; k <= m_depth; ++k) {
      uint32_t* r = arr(kReach + k - 1) + b;
      st(r, ld(r) | ge3(cnt, k) | ge3(mid, k));
    }
    uint32_t* po = arr(kPeakOcc) + b;
    const V a = popcount(cnt[0]) + 2 * popcount(cnt[1]) + 4 * popcount(cnt[2]);
    const V m = popcount(mid[0]) + 2 * popcount(mid[1]) + 4 * popcount(mid[2]);
    V peak = ld(po);
    peak = a > peak ? a : peak;
    st(po, m > peak ? m : peak);
  };

  // 1. Credits the neighbours returned in the previous cycle.
  for (int p = 0; p < kNumLinkPorts; ++p) {
    uint32_t* m = arr(mail_index(prev, kMailCred, p)) + b;
    const V back = ld(m);
    if (!any(back)) continue;
    st(m, V{});
    V k[3];
    for (int i = 0; i < 3; ++i) k[i] = ld(arr(kK + 3 * p + i) + b);
    inc3(k, back);
    for (int i = 0; i < 3; ++i) st(arr(kK + 3 * p + i) + b, k[i]);
  }
  const V ramp_full = eq3(cnt, m_depth) & ld(arr(kRx + kRamp) + b);  // start of the cycle
  // 2. What the neighbours sent in the previous cycle.
  bool arrived = false;
  for (int p = 0; p < kNumLinkPorts; ++p) {
    uint32_t* cm = arr(mail_index(prev, kMailCol, p)) + b;
    const V cp1 = ld(cm);
    if (!any(cp1)) continue;
    st(cm, V{});
    const V valid = nz(cp1);
    const V col = (cp1 - 1) & valid;
    push((splat(1) << col) & valid, col, ld(arr(mail_index(prev, kMailPay, p)) + b),
         ctrl_seen ? ld(arr(mail_index(prev, kMailCtrl, p)) + b) : V{});
    arrived = true;
  }
  V mid[3];  // after the arrivals
  for (int i = 0; i < 3; ++i) mid[i] = cnt[i];
  // 3. The arbiters: a head is ready unless it is the only wavelet of a ramp color and came in
  // the cycle before (ramp latency 2).
  const V nonempty = cnt[0] | cnt[1] | cnt[2];
  const V ready = nonempty & ~(ld(arr(kYoung) + b) & eq3(cnt, 1));
  V wanting{}, sent{};
  V served[kNumPorts] = {};  // (stays 0 in a block without multicast: every send ends its head)
  const bool multicast = m_block_multicast[block];
  if (multicast) {
    for (int p = 0; p < kNumPorts; ++p) served[p] = ld(arr(kServed + p) + b);
  }
  for (int p = 0; p < kNumPorts; ++p) {
    const V want = ready & ld(arr(kTx + p) + b) & ~served[p];
    if (!any(want)) continue;
    wanting |= want;
    V el;
    V k[3];
    if (p < kNumLinkPorts) {
      for (int i = 0; i < 3; ++i) k[i] = ld(arr(kK + 3 * p + i) + b);
      el = want & (k[0] | k[1] | k[2]);
    } else {
      el = want & ~ld(arr(kAgentFull) + b);
    }
    const V has = nz(el);
    uint32_t* fwd = arr(kFwd + p) + b;
    st(fwd, ld(fwd) + (has & 1) + ((nz(want) & ~has & 1) << 16));
    if (!any(has)) continue;
    uint32_t* rrp = arr(kRr + p) + b;
    const V rr = ld(rrp);
    const V hi = rr >= 32 ? V{} : el & (splat(~0u) << (rr & 31));
    const V pick = hi ? hi : el;
    const V bit = pick & -pick;
    const V c = bit_index(bit) & has;
    st(rrp, has ? c + 1 : rr);
    *moved = true;
    sent |= bit;
    served[p] |= bit;
    const V idx = slot_of(c, get3(head, c));
    const V payload = gather(m_pay.data(), has, idx);
    const V ctrl = ctrl_seen ? gather(m_ctrl.data(), has, idx) : V{};
    // Per-color sends: a vertical counter, the carry stopping early.
    V carry = bit;
    for (int i = 0; i < 16 && any(carry); ++i) {
      uint32_t* pl = arr(kVFwd + i) + b;
      const V v = ld(pl);
      st(pl, v ^ carry);
      carry &= v;
    }
    count(2, has & 1);
    if (p < kNumLinkPorts) {
      const size_t d = static_cast<size_t>(static_cast<ptrdiff_t>(b) + offset[p]);
      const int q = opposite(p);
      st(arr(mail_index(cur, kMailPay, q)) + d, has ? payload : V{});
      st(arr(mail_index(cur, kMailCol, q)) + d, has ? c + 1 : V{});
      if (ctrl_seen) st(arr(mail_index(cur, kMailCtrl, q)) + d, has ? ctrl : V{});
      dec3(k, bit);
      for (int i = 0; i < 3; ++i) st(arr(kK + 3 * p + i) + b, k[i]);
    } else {
      for (uint32_t m = agents; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        if (!has[l]) continue;
        PeAgent* a = m_agent[b + static_cast<size_t>(l)];
        a->deliver(Wavelet{payload[l], static_cast<uint8_t>(c[l]), ctrl[l] != 0}, now + static_cast<uint64_t>(m_ramp_latency));
        arr(kAgentFull)[b + static_cast<size_t>(l)] = a->full_colors();
      }
      if (endpoints) {  // into the receive queue of the endpoints run here
        V qc[3], qh[3];
        for (int i = 0; i < 3; ++i) qc[i] = ld(arr(kQc + i) + b), qh[i] = ld(arr(kQh + i) + b);
        const V depth = ld(arr(kQDepth) + b);
        const V in = bit & ld(arr(kRecv) + b);  // (only endpoint lanes receive: others have no kRecv)
        V tail = get3(qh, c) + get3(qc, c);
        tail = tail >= depth ? tail - depth : tail;
        const V idx = (lane_index * static_cast<uint32_t>(colors) + c) * 8 + tail;
        scatter(m_qpay.data(), in, idx, payload);
        if (ctrl_seen) scatter(m_qctrl.data(), in, idx, ctrl);
        inc3(qc, in);
        for (int i = 0; i < 3; ++i) st(arr(kQc + i) + b, qc[i]);
        st(arr(kYd0) + b, in);
        uint32_t* buf = arr(kBuffered) + b;
        st(buf, ld(buf) + (nz(in) & 1));
        const V full = ld(arr(kAgentFull) + b);
        st(arr(kAgentFull) + b, emask ? ~ld(arr(kRecv) + b) | eqv(qc, depth) : full);
      }
      count(1, has & 1);
    }
  }
  // Heads that have gone out on all their outputs leave their buffer; its feeder gets a credit.
  V done = sent;
  if (multicast) {
    for (int p = 0; p < kNumPorts; ++p) done &= ~ld(arr(kTx + p) + b) | served[p];
    for (int p = 0; p < kNumPorts; ++p) st(arr(kServed + p) + b, served[p] & ~done);
  }
  if (any(done)) {
    count(3, popcount(done));
    dec3(cnt, done);
    inc3(head, done);
    V wrap = done;
    for (int i = 0; i < 3; ++i) wrap &= (m_depth >> i) & 1 ? head[i] : ~head[i];
    for (int i = 0; i < 3; ++i) head[i] &= ~wrap;
    for (int i = 0; i < kNumLinkPorts; ++i) {
      const V back = done & ld(arr(kRx + i) + b);
      if (!any(back)) continue;
      const size_t d = static_cast<size_t>(static_cast<ptrdiff_t>(b) + offset[i]);
      st(arr(mail_index(cur, kMailCred, opposite(i))) + d, back);
    }
  }
  const V stalled = wanting & ~sent;
  V carry = stalled;
  for (int i = 0; i < 16 && any(carry); ++i) {
    uint32_t* pl = arr(kVStall + i) + b;
    const V v = ld(pl);
    st(pl, v ^ carry);
    carry &= v;
  }
  // 4. The agents: one wavelet each to the ramp, ready after the ramp latency.
  V young{}, inj_bit{}, inj_col{}, inj_pay{}, inj_ctrl{};
  for (uint32_t m = agents; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    PeAgent* a = m_agent[b + static_cast<size_t>(l)];
    Wavelet w;
    const uint32_t r = a->evaluate(now, ramp_full[l], &w);
    arr(kAgentFull)[b + static_cast<size_t>(l)] = a->full_colors();
    if (r) *moved = true;
    if (!(r & PeAgent::kOffered)) continue;
    inj_bit[l] = 1u << w.color;
    inj_col[l] = w.color;
    inj_pay[l] = w.payload;
    inj_ctrl[l] = w.ctrl ? 1 : 0;
    if (w.ctrl) m_ctrl_seen.store(true, std::memory_order_relaxed);  // the push below keeps its bit
  }
  if (endpoints) {
    // The traffic endpoints run here, as TrafficAgent::evaluate: first the receive side takes
    // at most one readable arrival (round-robin over its queues, a draw against drain_prob),
    // then the send side offers at most one wavelet (round-robin over its flows).
    V qc[3], qh[3];
    for (int i = 0; i < 3; ++i) qc[i] = ld(arr(kQc + i) + b), qh[i] = ld(arr(kQh + i) + b);
    const V depth = ld(arr(kQDepth) + b), recv = ld(arr(kRecv) + b);
    const V yd0 = ld(arr(kYd0) + b), yd1 = ld(arr(kYd1) + b);
    const V qne = qc[0] | qc[1] | qc[2];
    if (any(qne)) {
      V drain = nz(qne) & emask;
      for (uint32_t m = m_block_drains[block]; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        const size_t i = b + static_cast<size_t>(l);
        if (!qne[l]) continue;
        const uint64_t h = hash_bits(m_seed[i], arr(kPe)[i], now, 1);
        if (!((h >> 11) < m_drain_below[i])) drain[l] = 0;
      }
      // A queue's first arrival is not readable yet when every arrival it holds is that young.
      const V notready = m_ramp_latency == 2 ? (((yd0 ^ yd1) & eq3(qc, 1)) | ((yd0 & yd1) & eq3(qc, 2))) : (yd0 & eq3(qc, 1));
      const V cand = (qne & ~notready & ~ld(arr(kNever) + b)) & drain;
      if (any(cand)) {
        const V rrq = ld(arr(kRrq) + b);
        const V hi = rrq >= 32 ? V{} : cand & (splat(~0u) << (rrq & 31));
        const V pick = hi ? hi : cand;
        const V bit = pick & -pick;
        const V has = nz(bit);
        const V c = bit_index(bit) & has;
        if (m_record) {
          const V idx = (lane_index * static_cast<uint32_t>(colors) + c) * 8 + get3(qh, c);
          const V pay = gather(m_qpay.data(), has, idx);
          const V ctl = ctrl_seen ? gather(m_qctrl.data(), has, idx) : V{};
          for (int l = 0; l < kLanes; ++l) {
            TrafficAgent* a = has[l] ? m_endpoint[b + static_cast<size_t>(l)] : nullptr;
            if (a && a->m_opts.record) {
              a->m_log.push_back(TrafficAgent::Arrival{now, Wavelet{pay[l], static_cast<uint8_t>(c[l]), ctl[l] != 0}});
            }
          }
        }
        dec3(qc, bit);
        inc3(qh, bit);
        const V wrap = bit & eqv(qh, depth);
        for (int i = 0; i < 3; ++i) qh[i] &= ~wrap;
        const V above = recv & ~((splat(2) << c) - 1);  // (c = 31: 2 << 31 wraps to 0, so none)
        const V next_bit = above & -above;
        st(arr(kRrq) + b, has ? (above ? bit_index(next_bit) : splat(32)) : rrq);
        uint32_t* buf = arr(kBuffered) + b;
        st(buf, ld(buf) - (has & 1));
        uint32_t* con = arr(kConsumed) + b;
        st(con, ld(con) + (has & 1));
        if (any(has)) *moved = true;
        for (int i = 0; i < 3; ++i) st(arr(kQc + i) + b, qc[i]), st(arr(kQh + i) + b, qh[i]);
        const V full = ld(arr(kAgentFull) + b);
        st(arr(kAgentFull) + b, emask ? ~recv | eqv(qc, depth) : full);
      }
    }
    st(arr(kYd1) + b, yd0);
    st(arr(kYd0) + b, V{});
    // Send side.
    const V unfinished = ld(arr(kUnfinished) + b);
    V go = nz(unfinished) & emask;
    const V fc0 = ld(arr(kFc) + b), fc1 = ld(arr(kFc + 1) + b);
    const V nf = ld(arr(kFlowN) + b);
    const V send_colors = (nf > 0 ? splat(1) << fc0 : V{}) | (nf > 1 ? splat(1) << fc1 : V{});
    go &= nz(send_colors & ~ramp_full);
    if (any(go)) {
      for (uint32_t m = m_block_stalls[block]; m; m &= m - 1) {
        const int l = __builtin_ctz(m);
        const size_t i = b + static_cast<size_t>(l);
        if (!go[l]) continue;
        if ((hash_bits(m_seed[i], arr(kPe)[i], now, 2) >> 11) < m_stall_below[i]) go[l] = 0;
      }
      const V rf = ld(arr(kRrFlow) + b);
      const V fa = rf >= nf ? rf - nf : rf;
      const V fb1 = fa + 1, fb = fb1 >= nf ? fb1 - nf : fb1;
      const V s0 = ld(arr(kFsent) + b), s1 = ld(arr(kFsent + 1) + b);
      const V n0 = ld(arr(kFcount) + b), n1 = ld(arr(kFcount + 1) + b);
      const V ok0 = ~(nz(n0) & (V)(s0 >= n0)) & ~nz((ramp_full >> fc0) & 1);
      const V ok1 = ~(nz(n1) & (V)(s1 >= n1)) & ~nz((ramp_full >> fc1) & 1);
      const V oka = (V)(nf > 0) & (fa == 0 ? ok0 : ok1);
      const V okb = (V)(nf > 1) & (fb == 0 ? ok0 : ok1);
      const V send = go & (oka | okb);
      if (any(send)) {
        const V f = oka ? fa : fb;
        const V is0 = send & (V)(f == 0), is1 = send & (V)(f == 1);
        const V q0 = ld(arr(kSeq) + b), q1 = ld(arr(kSeq + 1) + b);
        const V seq = is0 ? q0 : q1;
        const V every = is0 ? ld(arr(kCtrlEvery) + b) : ld(arr(kCtrlEvery + 1) + b);
        V ctl{};
        if (any(every & send)) {
          for (int l = 0; l < kLanes; ++l) ctl[l] = send[l] && every[l] && seq[l] % every[l] == every[l] - 1 ? 1 : 0;
        }
        const V col = (is0 ? fc0 : fc1) & send;
        const V pay = (ld(arr(kPe) + b) << kSeqBits) | (seq & ((1u << kSeqBits) - 1));
        inj_bit |= (splat(1) << col) & send;
        inj_col |= col;
        inj_pay |= pay & send;
        inj_ctrl |= ctl;
        if (any(ctl)) m_ctrl_seen.store(true, std::memory_order_relaxed);
        st(arr(kSeq) + b, q0 + (is0 & 1));
        st(arr(kSeq + 1) + b, q1 + (is1 & 1));
        const V ns0 = s0 + (is0 & 1), ns1 = s1 + (is1 & 1);
        st(arr(kFsent) + b, ns0);
        st(arr(kFsent + 1) + b, ns1);
        const V done = (is0 & nz(n0) & (V)(ns0 == n0)) | (is1 & nz(n1) & (V)(ns1 == n1));
        st(arr(kUnfinished) + b, unfinished - (done & 1));
        st(arr(kRrFlow) + b, send ? f + 1 : rf);
        uint32_t* tot = arr(kSentTotal) + b;
        st(tot, ld(tot) + (send & 1));
        *moved = true;
      }
    }
  }
  if (any(inj_bit)) {
    count(0, nz(inj_bit) & 1);
    push(inj_bit, inj_col, inj_pay, inj_ctrl);
    if (m_ramp_latency == 2) young = inj_bit;
  }
  if (arrived || any(inj_bit)) peaks(mid);
  st(arr(kYoung) + b, young);
  for (int i = 0; i < 3; ++i) st(arr(kC + i) + b, cnt[i]), st(arr(kH + i) + b, head[i]);
}

void VectorFabric::flush_counters() {
  for (size_t b : m_blocks) {
    for (int l = 0; l < kLanes; ++l) {
      const size_t i = b + static_cast<size_t>(l);
      uint64_t* totals[4] = {&m_injected, &m_delivered, &m_sends, &m_pops};
      for (int w = 0; w < 4; ++w) {
        *totals[w] += arr(kCount + w)[i];
        arr(kCount + w)[i] = 0;
      }
      for (int p = 0; p < kNumPorts; ++p) {
        m_fwd64[i * kNumPorts + static_cast<size_t>(p)] += arr(kFwd + p)[i] & 0xffffu;
        m_stall64[i * kNumPorts + static_cast<size_t>(p)] += arr(kFwd + p)[i] >> 16;
        arr(kFwd + p)[i] = 0;
      }
      for (int k = 0; k < 16; ++k) {
        uint32_t& f = arr(kVFwd + k)[i];
        uint32_t& s = arr(kVStall + k)[i];
        for (uint32_t m = f; m; m &= m - 1) m_color_fwd[static_cast<size_t>(__builtin_ctz(m))] += uint64_t{1} << k;
        for (uint32_t m = s; m; m &= m - 1) m_color_stall[static_cast<size_t>(__builtin_ctz(m))] += uint64_t{1} << k;
        f = 0;
        s = 0;
      }
    }
  }
  m_flushed_at = m_now;
}

uint64_t VectorFabric::injected() {
  if (m_flushed_at != m_now) flush_counters();
  return m_injected;
}
uint64_t VectorFabric::delivered() {
  if (m_flushed_at != m_now) flush_counters();
  return m_delivered;
}
uint64_t VectorFabric::multicast_copies() {
  if (m_flushed_at != m_now) flush_counters();
  return m_sends - m_pops;
}
uint64_t VectorFabric::forwarded(int x, int y, int port) {
  if (m_flushed_at != m_now) flush_counters();
  return m_fwd64[lane(x, y) * kNumPorts + static_cast<size_t>(port)];
}
uint64_t VectorFabric::stall(int x, int y, int port) {
  if (m_flushed_at != m_now) flush_counters();
  return m_stall64[lane(x, y) * kNumPorts + static_cast<size_t>(port)];
}
uint64_t VectorFabric::in_flight() const {
  uint64_t n = 0;
  const int parity = static_cast<int>((m_now + 1) & 1);  // what the last cycle sent
  for (size_t b : m_blocks) {
    for (int l = 0; l < kLanes; ++l) {
      const size_t i = b + static_cast<size_t>(l);
      n += static_cast<uint64_t>(__builtin_popcount(arr(kC)[i]) + 2 * __builtin_popcount(arr(kC + 1)[i]) +
                                 4 * __builtin_popcount(arr(kC + 2)[i]));
    }
  }
  for (int p = 0; p < kNumLinkPorts; ++p) {
    const uint32_t* col = arr(mail_index(parity, kMailCol, p));
    for (size_t i = 0; i < m_stride; ++i) n += col[i] ? 1 : 0;
  }
  return n;
}

uint64_t VectorFabric::active() const {
  if (moved() || in_flight()) return m_routers;  // (moved() first: in_flight() walks the fabric)
  for (size_t i = 0; i < m_agent.size(); ++i) {
    if (m_endpoint[i] ? arr(kUnfinished)[i] || arr(kBuffered)[i] : m_agent[i] && m_agent[i]->has_work()) return m_routers;
  }
  return 0;
}

uint32_t VectorFabric::occupancy(int x, int y) const {
  const size_t i = lane(x, y);
  return static_cast<uint32_t>(__builtin_popcount(arr(kC)[i]) + 2 * __builtin_popcount(arr(kC + 1)[i]) +
                               4 * __builtin_popcount(arr(kC + 2)[i]));
}

uint32_t VectorFabric::buffered(int x, int y, int color) const {
  const size_t i = lane(x, y);
  uint32_t n = 0;
  for (int k = 0; k < 3; ++k) n |= ((arr(kC + k)[i] >> color) & 1u) << k;
  return n;
}

int VectorFabric::input_port(int x, int y, int color) const {
  for (int p = 0; p < kNumPorts; ++p) {
    if ((arr(kRx + p)[lane(x, y)] >> color) & 1) return p;
  }
  return -1;
}

void VectorFabric::reset_stats() {
  flush_counters();
  std::fill(m_fwd64.begin(), m_fwd64.end(), 0);
  std::fill(m_stall64.begin(), m_stall64.end(), 0);
  std::fill(m_color_fwd.begin(), m_color_fwd.end(), 0);
  std::fill(m_color_stall.begin(), m_color_stall.end(), 0);
  for (size_t b : m_blocks) {
    V cnt[3];
    for (int i = 0; i < 3; ++i) cnt[i] = ld(arr(kC + i) + b);
    for (int k = 1; k <= 7; ++k) st(arr(kReach + k - 1) + b, k <= m_depth ? ge3(cnt, k) : V{});
    st(arr(kPeakOcc) + b, popcount(cnt[0]) + 2 * popcount(cnt[1]) + 4 * popcount(cnt[2]));
  }
}

uint32_t VectorFabric::peak_occupancy(int x, int y) const { return arr(kPeakOcc)[lane(x, y)]; }
uint32_t VectorFabric::peak_of_color(int x, int y, int color) const {
  uint32_t peak = 0;
  for (int k = 1; k <= m_depth; ++k) {
    if ((arr(kReach + k - 1)[lane(x, y)] >> color) & 1) peak = static_cast<uint32_t>(k);
  }
  return peak;
}
uint64_t VectorFabric::color_forwarded(int color) {
  if (m_flushed_at != m_now) flush_counters();
  return m_color_fwd[static_cast<size_t>(color)];
}
uint64_t VectorFabric::color_stall(int color) {
  if (m_flushed_at != m_now) flush_counters();
  return m_color_stall[static_cast<size_t>(color)];
}

void VectorFabric::sync_endpoints() {
  for (size_t i = 0; i < m_endpoint.size(); ++i) {
    TrafficAgent* a = m_endpoint[i];
    if (!a) continue;
    a->m_sent = arr(kSentTotal)[i];
    a->m_consumed = arr(kConsumed)[i];
    a->m_buffered = arr(kBuffered)[i];
    a->m_full = arr(kAgentFull)[i];
    a->m_unfinished_flows = static_cast<int>(arr(kUnfinished)[i]);
    a->m_rr_flow = arr(kRrFlow)[i];
    for (size_t f = 0; f < a->m_flows.size(); ++f) {
      a->m_flows[f].sent = arr(kFsent + static_cast<int>(f))[i];
      a->m_flows[f].seq = arr(kSeq + static_cast<int>(f))[i];
    }
  }
}

}  // namespace wafersim
