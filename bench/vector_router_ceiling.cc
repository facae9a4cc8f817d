// A second ceiling for the fabric benchmark (issue 3), only in the benchmark: the load and the
// router semantics of lean_router_ceiling.cc (per-(port, color) buffers of depth 4, credits
// returned a cycle later, a round-robin arbiter per output, one-cycle hops, ramp latency 2, the
// traffic agent's round-robin over its flows), simulated 16 routers at a time. Everything a
// router keeps per color is a bit of a 24-bit mask: the buffer counts (three bit planes), the
// head indexes (two) and the credits (three), so that taking a credit, pushing, popping and
// choosing a head are a few whole-mask operations, and 16 routers' masks are one vector (GCC
// vector extensions; AVX-512 where the host has it). Only the payloads need per-router
// addressing (gathers and scatters). Routers only read what their neighbours wrote in the
// previous cycle (mailboxes by cycle parity, each slot with one writer), so visiting 16 at once
// gives the same result as one by one. Its injected, delivered and forwarded counts must equal
// lean_router_ceiling's and bench_fabric's (scripts/bench_fabric checks it). Prints one JSON line.
//
// This is a measurement of what a vectorised router could reach, not a simulator: it knows
// only this load (unicast routes, one input port per color, one switch position, a fabric
// whose width is a multiple of 16, no channels, sleeping, traces or peaks).
#include <sys/resource.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#ifdef __AVX512F__
#include <immintrin.h>
#endif

namespace {

constexpr int kLanes = 16;
typedef uint32_t V __attribute__((vector_size(4 * kLanes)));
typedef int32_t VI __attribute__((vector_size(4 * kLanes)));
typedef float VF __attribute__((vector_size(4 * kLanes)));

enum : int { kN = 0, kS = 1, kE = 2, kW = 3, kRamp = 4 };
constexpr int kColors = 24;
constexpr int opp(int p) { return p ^ 1; }

inline V ld(const uint32_t* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void st(uint32_t* p, V v) { std::memcpy(p, &v, sizeof v); }
inline V splat(uint32_t x) { return V{} + x; }
inline bool any(V v) {
  uint64_t x[kLanes / 2];
  std::memcpy(x, &v, sizeof x);
  uint64_t o = 0;
  for (uint64_t w : x) o |= w;
  return o != 0;
}
// 0 / ~0 per lane.
inline V nz(V v) { return (V)(v != 0); }
// log2 of a lane holding one set bit below 2^24 (exact in a float).
inline V log2_bit(V bit) {
  const VF f = __builtin_convertvector((VI)bit, VF);
  VI e;
  std::memcpy(&e, &f, sizeof e);
  return (V)((e >> 23) - 127);
}

// Per-lane vertical counters of 16 bits: plane i holds bit i of every color's count.
struct Vertical {
  std::vector<uint32_t> planes;  // [plane][router]
  size_t n;
  explicit Vertical(size_t routers) : planes(16 * routers, 0), n(routers) {}
  void add(size_t b, V m) {
    V carry = m;
    for (int i = 0; i < 16 && any(carry); ++i) {  // plane i takes a carry one add in 2^i
      uint32_t* p = &planes[i * n + b];
      const V v = ld(p);
      st(p, v ^ carry);
      carry &= v;
    }
  }
  // Adds the counts into totals[color] and clears them.
  void flush(std::vector<uint64_t>& totals) {
    for (int i = 0; i < 16; ++i) {
      for (size_t r = 0; r < n; ++r) {
        uint32_t& w = planes[i * n + r];
        for (uint32_t m = w; m; m &= m - 1) totals[static_cast<size_t>(__builtin_ctz(m))] += uint64_t{1} << i;
        w = 0;
      }
    }
  }
};

struct Fabric {
  int width, height;
  size_t n, pad;  // routers; guard lanes on either side of every per-router array
  std::vector<uint32_t> mem;
  size_t stride;
  // Per-router arrays (views into mem, each stride long, router r at index pad + r).
  uint32_t* a(int k) { return &mem[static_cast<size_t>(k) * stride + pad]; }
  enum : int {
    kC0, kC1, kC2,     // buffer counts, bit planes
    kH0, kH1,          // head indexes
    kK0, kK1, kK2,     // credits on the color's output link (4 at reset: kK2)
    kOut0,             // + port: colors routed to each output port (5)
    kIn0 = kOut0 + 5,  // + port: colors coming in on each input port (5)
    kRr0 = kIn0 + 5,   // + port: round-robin position of each output's arbiter (5)
    kYoung = kRr0 + 5, // the color injected in the previous cycle (its head not ready yet)
    kNflows, kRrFlow, kFlow0, kFlow1, kSeq0, kSeq1, kPe,
    kFwd0,             // + port: wavelets sent (5)
    kStall0 = kFwd0 + 5,  // + port: cycles with candidates and no credit (5)
    kMail = kStall0 + 5,  // + parity * 12 + {pay, col, cred} * 4 + in port
    kArrays = kMail + 24
  };
  uint32_t* mail(int parity, int what, int port) { return a(kMail + parity * 12 + what * 4 + port); }
  std::vector<uint32_t> pay;  // (router * 24 + color) * 4 + slot
  uint64_t injected = 0, delivered = 0;
  Vertical color_fwd, color_stall;
  std::vector<uint64_t> color_fwd_total, color_stall_total;
  int offset[4];

  Fabric(int w, int h)
      : width(w), height(h), n(static_cast<size_t>(w) * h), pad(static_cast<size_t>(w) + kLanes),
        stride(n + 2 * pad), pay(n * kColors * 4, 0), color_fwd(n), color_stall(n),
        color_fwd_total(kColors, 0), color_stall_total(kColors, 0) {
    mem.assign(stride * kArrays, 0);
    offset[kN] = -w;
    offset[kS] = w;
    offset[kE] = 1;
    offset[kW] = -1;
  }

  // A block's bit planes, held in registers while it is stepped.
  struct Planes {
    V c[3], h[2], k[3];
  };
  static void inc3(V* p, V bit) {
    const V c1 = p[0] & bit, c2 = p[1] & c1;
    p[0] ^= bit;
    p[1] ^= c1;
    p[2] ^= c2;
  }
  static void dec3(V* p, V bit) {
    const V b1 = ~p[0] & bit, b2 = ~p[1] & b1;
    p[0] ^= bit;
    p[1] ^= b1;
    p[2] ^= b2;
  }
  static V get2(const V* p, V c) { return ((p[0] >> c) & 1) | (((p[1] >> c) & 1) << 1); }
  static V get3(const V* p, V c) { return get2(p, c) | (((p[2] >> c) & 1) << 2); }

  // The payload slots (router b + lane, color col, slot) of a block.
  static V slot_index(size_t b, V col, V slot) {
    const V lane = V{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    return ((splat(static_cast<uint32_t>(b)) + lane) * kColors + col) * 4 + slot;
  }
  void scatter(V where, V idx, V val) {
#ifdef __AVX512F__
    _mm512_mask_i32scatter_epi32(pay.data(), _mm512_test_epi32_mask((__m512i)where, (__m512i)where), (__m512i)idx,
                                 (__m512i)val, 4);
#else
    for (int l = 0; l < kLanes; ++l) {
      if (where[l]) pay[idx[l]] = val[l];
    }
#endif
  }
  V gather(V where, V idx) {
#ifdef __AVX512F__
    return (V)_mm512_mask_i32gather_epi32(_mm512_setzero_si512(), _mm512_test_epi32_mask((__m512i)where, (__m512i)where),
                                          (__m512i)idx, pay.data(), 4);
#else
    V v{};
    for (int l = 0; l < kLanes; ++l) {
      if (where[l]) v[l] = pay[idx[l]];
    }
    return v;
#endif
  }
  // Pushes payload `val` of color `col` where `bit` (1 << col, or 0: no push) is set.
  void push(Planes& q, size_t b, V bit, V col, V val) {
    const V tail = (get2(q.h, col) + get3(q.c, col)) & 3;
    scatter(bit, slot_index(b, col, tail), val);
    inc3(q.c, bit);
  }
  V delivered_lanes{}, injected_lanes{};

  void step_block(size_t b, uint32_t now) {
    const int prev = static_cast<int>((now + 1) & 1), cur = static_cast<int>(now & 1);
    Planes q;
    for (int i = 0; i < 3; ++i) q.c[i] = ld(a(kC0 + i) + b), q.k[i] = ld(a(kK0 + i) + b);
    for (int i = 0; i < 2; ++i) q.h[i] = ld(a(kH0 + i) + b);
    // 1. Credits the neighbours returned in the previous cycle (at most one per color).
    for (int p = 0; p < 4; ++p) {
      uint32_t* m = mail(prev, 2, p) + b;
      const V cr = ld(m);
      st(m, V{});
      inc3(q.k, cr);
    }
    const V ramp_full = q.c[2] & ld(a(kIn0 + kRamp) + b);  // count 4 = 100b, start of cycle
    // 2. What the neighbours sent in the previous cycle (colors 1..24 stored +1; 0 = none).
    for (int p = 0; p < 4; ++p) {
      uint32_t* cm = mail(prev, 1, p) + b;
      const V cp1 = ld(cm);
      const V valid = nz(cp1);
      if (!any(valid)) continue;
      st(cm, V{});
      const V col = (cp1 - 1) & valid;
      push(q, b, (splat(1) << col) & valid, col, ld(mail(prev, 0, p) + b));
    }
    // 3. Arbiters.
    const V nonempty = q.c[0] | q.c[1] | q.c[2];
    const V notready = ld(a(kYoung) + b) & q.c[0] & ~q.c[1] & ~q.c[2];  // its only wavelet came in last cycle
    V stalled{}, sent_colors{}, popped{};
    for (int p = 0; p < 5; ++p) {
      const V w = nonempty & ld(a(kOut0 + p) + b) & ~notready;
      if (!any(w)) continue;
      const V el = p < 4 ? w & (q.k[0] | q.k[1] | q.k[2]) : w;
      const V has = nz(el);
      uint32_t* stall = a(kStall0 + p) + b;
      st(stall, ld(stall) + (nz(w) & ~has & 1));
      uint32_t* rrp = a(kRr0 + p) + b;
      const V rr = ld(rrp);
      const V hi = el & (splat(~0u) << rr);
      const V pick = hi ? hi : el;
      const V bit = pick & -pick;  // 0 where nothing is sent
      stalled |= w & ~bit;
      if (!any(has)) continue;
      const V c = log2_bit(bit) & has;
      st(rrp, has ? c + 1 : rr);
      const V val = gather(has, slot_index(b, c, get2(q.h, c)));
      // head += 1 (mod 4), count -= 1
      q.h[1] ^= q.h[0] & bit;
      q.h[0] ^= bit;
      dec3(q.c, bit);  // (only this port's colors change: each color has one output)
      uint32_t* fwd = a(kFwd0 + p) + b;
      st(fwd, ld(fwd) + (has & 1));
      sent_colors |= bit;
      popped |= bit;
      if (p < 4) {
        const size_t d = b + static_cast<size_t>(offset[p]);
        st(mail(cur, 0, opp(p)) + d, has ? val : V{});
        st(mail(cur, 1, opp(p)) + d, has ? c + 1 : V{});
        dec3(q.k, bit);
      } else {
        delivered_lanes += has & 1;
      }
    }
    // Credits back to where the popped wavelets came from (one writer per slot).
    for (int i = 0; i < 4; ++i) {
      const V back = popped & ld(a(kIn0 + i) + b);
      st(mail(cur, 2, opp(i)) + b + static_cast<size_t>(offset[i]), back);
    }
    if (any(stalled)) color_stall.add(b, stalled);
    color_fwd.add(b, sent_colors);
    // 4. The traffic agent: one wavelet to the ramp, round-robin over its flows whose buffer
    // had room at the start of the cycle.
    const V nf = ld(a(kNflows) + b), rf = ld(a(kRrFlow) + b);
    const V fa = rf >= nf ? rf - nf : rf;              // first flow tried
    const V fb1 = fa + 1, fb = fb1 >= nf ? fb1 - nf : fb1;  // second
    const V fl0 = ld(a(kFlow0) + b), fl1 = ld(a(kFlow1) + b);
    const V ca = fa == 0 ? fl0 : fl1, cb = fb == 0 ? fl0 : fl1;
    const V oka = (V)(nf > 0) & ~nz((ramp_full >> ca) & 1);
    const V okb = (V)(nf > 1) & ~nz((ramp_full >> cb) & 1);
    const V go = oka | okb;
    const V f = oka ? fa : fb;
    const V col = (oka ? ca : cb) & go;
    const V s0 = ld(a(kSeq0) + b), s1 = ld(a(kSeq1) + b);
    const V seq = f == 0 ? s0 : s1;
    const V val = (ld(a(kPe) + b) << 12) | (seq & 0xfff);
    const V bit = (splat(1) << col) & go;
    push(q, b, bit, col, val);
    for (int i = 0; i < 3; ++i) st(a(kC0 + i) + b, q.c[i]), st(a(kK0 + i) + b, q.k[i]);
    for (int i = 0; i < 2; ++i) st(a(kH0 + i) + b, q.h[i]);
    st(a(kSeq0) + b, s0 + ((go & (V)(f == 0)) & 1));
    st(a(kSeq1) + b, s1 + ((go & (V)(f == 1)) & 1));
    st(a(kRrFlow) + b, go ? f + 1 : rf);
    st(a(kYoung) + b, bit);
    injected_lanes += go & 1;
  }
};

}  // namespace

int main(int argc, char** argv) {
  int width = 64, height = 64, hops = 8;
  uint32_t cycles = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "vector_router_ceiling: " << arg << " needs a value\n";
      return 2;
    }
    const std::string v = argv[++i];
    if (arg == "--width") width = std::stoi(v);
    else if (arg == "--height") height = std::stoi(v);
    else if (arg == "--hops") hops = std::stoi(v);
    else if (arg == "--cycles") cycles = static_cast<uint32_t>(std::stoul(v));
    else {
      std::cerr << "vector_router_ceiling: unknown argument " << arg << "\n";
      return 2;
    }
  }
  if (width < kLanes || width % kLanes || height < 1 || hops < 1 || 2 * (hops + 1) > kColors) {
    std::cerr << "vector_router_ceiling: needs a width that is a multiple of " << kLanes
              << ", a height of at least 1 and 2 * (hops + 1) <= 24 colors\n";
    return 2;
  }
  const auto e0 = std::chrono::steady_clock::now();
  Fabric fab(width, height);
  auto idx = [&](int x, int y) { return static_cast<size_t>(y) * width + x; };
  for (size_t r = 0; r < fab.n; ++r) fab.a(Fabric::kPe)[r] = static_cast<uint32_t>(r);
  // The neighbour pattern of hw/traffic_gen.cc, as in lean_router_ceiling.cc.
  uint64_t flows = 0;
  auto path = [&](int x, int y, int dx, int dy, int dir, int color) {
    int in = kRamp;
    const uint32_t bit = 1u << color;
    for (int i = 0; i <= hops; ++i) {
      const size_t r = idx(x + i * dx, y + i * dy);
      const int out = i < hops ? dir : kRamp;
      fab.a(Fabric::kIn0 + in)[r] |= bit;
      fab.a(Fabric::kOut0 + out)[r] |= bit;
      if (out != kRamp) fab.a(Fabric::kK2)[r] |= bit;  // 4 credits
      in = opp(out);
    }
    const size_t s = idx(x, y);
    uint32_t& nf = fab.a(Fabric::kNflows)[s];
    fab.a(nf == 0 ? Fabric::kFlow0 : Fabric::kFlow1)[s] = static_cast<uint32_t>(color);
    ++nf;
    ++flows;
  };
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      if (x + hops < width) path(x, y, 1, 0, kE, x % (hops + 1));
      if (y - hops >= 0) path(x, y, 0, -1, kN, hops + 1 + y % (hops + 1));
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t now = 0; now < cycles; ++now) {
    for (size_t b = 0; b < fab.n; b += kLanes) fab.step_block(b, now);
    if ((now & 0x7fff) == 0x7fff) {
      fab.color_fwd.flush(fab.color_fwd_total);
      fab.color_stall.flush(fab.color_stall_total);
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  fab.color_fwd.flush(fab.color_fwd_total);
  fab.color_stall.flush(fab.color_stall_total);
  for (int l = 0; l < kLanes; ++l) {
    fab.delivered += fab.delivered_lanes[l];
    fab.injected += fab.injected_lanes[l];
  }
  const double s = std::chrono::duration<double>(t1 - t0).count();
  uint64_t fwd = 0, color_fwd = 0;
  for (int p = 0; p < 5; ++p) {
    for (size_t r = 0; r < fab.n; ++r) fwd += fab.a(Fabric::kFwd0 + p)[r];
  }
  for (uint64_t c : fab.color_fwd_total) color_fwd += c;
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  nlohmann::json j = {{"impl", "vector_ceiling"},
                      {"width", width},
                      {"height", height},
                      {"hops", hops},
                      {"cycles", cycles},
                      {"flows", flows},
                      {"sim_seconds", s},
                      {"elab_seconds", std::chrono::duration<double>(t0 - e0).count()},
                      {"pe_cycles_per_s", static_cast<double>(cycles) * width * height / s},
                      {"injected", fab.injected},
                      {"delivered", fab.delivered},
                      {"forwarded", fwd},
                      {"color_forwarded", color_fwd},
                      {"color_stall", fab.color_stall_total},
                      {"peak_rss_kb", ru.ru_maxrss}};
  std::cout << j.dump() << std::endl;
  return fwd == color_fwd ? 0 : 1;
}
