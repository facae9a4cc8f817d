// A ceiling for the fabric benchmark (issue 3), only in the benchmark: the neighbour-stream load
// of scripts/bench_fabric on the leanest router I could write with the fabric's semantics for
// it (per-(port, color) buffers of depth 4, credits returned a cycle later, a round-robin arbiter
// per output, one-cycle hops, ramp latency 2, the traffic agent's round-robin over its flows).
// It knows only what that load needs: unicast routes with one input port per color, one switch
// position, no edge channels, no sleeping, no traces, no peaks; it keeps the per-port sent and
// stall counters (32 bits) and the per-color sent and stall counts. Its injected and delivered counts
// must equal bench_fabric's for the same arguments (scripts/bench_fabric checks it): that is
// the evidence that it simulates the same thing. Prints one JSON line.
//
// --tile-rows B --tile-cycles K steps the routers in parallelogram tiles instead of cycle by
// cycle over the whole fabric: K cycles at a time, a band of B rows that moves one row north per
// cycle (rows [a - d, a + B - d) in cycle t0 + d), bands from north to south. A router's visit
// reads what its four neighbours left in the previous cycle and writes what they read in the
// next, so this order gives the same result (the counts must not change) while a band's routers
// stay in the cache for K cycles: it measures what the cache is worth to this router.
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hw/bit_counters.h"

namespace {

enum : int { kN = 0, kS = 1, kE = 2, kW = 3, kRampPort = 4 };
constexpr int kColors = 24;
constexpr int kDepth = 4;  // a power of two (the slots' index wraps with a mask)
constexpr int opp(int p) { return p ^ 1; }

struct alignas(64) LeanRouter {
  struct Mail {
    uint32_t pay[4];
    uint8_t col[4];
    uint32_t valid;  // one bit per input link port
    uint32_t cred[4];
  };
  Mail mail[2] = {};
  uint32_t want[5] = {};     // colors with a buffered wavelet, by their output port
  uint32_t blocked[5] = {};  // colors without a credit on their output link
  uint32_t ramp_in = 0;      // colors fed by the ramp (their heads have a ready cycle)
  uint32_t ramp_full = 0;    // of those, the full buffers
  uint8_t rr[5] = {};
  uint8_t nflows = 0, rr_flow = 0;
  uint8_t flow_color[2] = {};
  uint32_t seq[2] = {};
  uint8_t head[kColors] = {}, count[kColors] = {}, credit[kColors] = {};
  uint8_t in[kColors] = {}, out[kColors] = {};
  LeanRouter* nbr[4] = {};
  uint32_t pe = 0;
  uint32_t fwd[5] = {}, stall[5] = {};
  uint32_t pay[kColors][kDepth] = {};
  uint32_t ready[2][kDepth] = {};  // ramp colors only, by flow
  uint8_t rslot[kColors] = {};
};

struct Totals {
  uint64_t injected = 0, delivered = 0;
  std::array<uint64_t, kColors> color_fwd{};
  wafersim::BitCounters32 color_stall;  // router-cycles each color had a head that went nowhere
};

inline int rr_pick(uint32_t mask, int start) {
  const uint32_t hi = start >= 32 ? 0 : mask & (~0u << start);
  return __builtin_ctz(hi ? hi : mask);
}

inline void push(LeanRouter& r, int c, uint32_t payload, uint32_t ready) {
  const int tail = (r.head[c] + r.count[c]) & (kDepth - 1);
  r.pay[c][tail] = payload;
  if (r.in[c] == kRampPort) r.ready[r.rslot[c]][tail] = ready;
  r.want[r.out[c]] |= 1u << c;
  if (++r.count[c] == kDepth && r.in[c] == kRampPort) r.ramp_full |= 1u << c;
}

inline void step(LeanRouter& r, uint32_t now, Totals& t) {
  LeanRouter::Mail& m = r.mail[(now + 1) & 1];
  const int cur = now & 1;
  for (int p = 0; p < 4; ++p) {
    if (const uint32_t b = m.cred[p]) {
      m.cred[p] = 0;
      r.blocked[p] &= ~b;
      for (uint32_t k = b; k; k &= k - 1) ++r.credit[__builtin_ctz(k)];
    }
  }
  const uint32_t ramp_full = r.ramp_full;
  for (uint32_t v = m.valid; v; v &= v - 1) {
    const int p = __builtin_ctz(v);
    push(r, m.col[p], m.pay[p], now);
  }
  m.valid = 0;
  uint32_t stalled = 0;
  for (int p = 0; p < 5; ++p) {
    uint32_t w = r.want[p];
    if (!w) continue;
    for (uint32_t k = w & r.ramp_in; k; k &= k - 1) {  // a head from the ramp waits for its latency
      const int c = __builtin_ctz(k);
      if (r.ready[r.rslot[c]][r.head[c]] > now) w &= ~(1u << c);
    }
    const uint32_t el = w & ~r.blocked[p];
    if (!el) {
      if (w) {
        ++r.stall[p];
        stalled |= w;
      }
      continue;
    }
    const int c = rr_pick(el, r.rr[p]);
    const uint32_t bit = 1u << c;
    r.rr[p] = static_cast<uint8_t>(c + 1);
    stalled |= w & ~bit;
    const uint32_t payload = r.pay[c][r.head[c]];
    r.head[c] = (r.head[c] + 1) & (kDepth - 1);
    if (--r.count[c] == 0) r.want[p] &= ~bit;
    ++r.fwd[p];
    ++t.color_fwd[c];
    if (p < 4) {
      LeanRouter::Mail& nm = r.nbr[p]->mail[cur];
      nm.pay[opp(p)] = payload;
      nm.col[opp(p)] = static_cast<uint8_t>(c);
      nm.valid |= 1u << opp(p);
      if (--r.credit[c] == 0) r.blocked[p] |= bit;
    } else {
      ++t.delivered;  // the agent's receive queues never fill under this load
    }
    const int i = r.in[c];
    if (i < 4) r.nbr[i]->mail[cur].cred[opp(i)] |= bit;
    else r.ramp_full &= ~bit;
  }
  if (stalled) t.color_stall.add(stalled);
  // The traffic agent: one wavelet a cycle to the ramp, round-robin over its flows whose ramp
  // buffer had room at the start of the cycle.
  for (int k = 0; k < r.nflows; ++k) {
    int f = r.rr_flow + k;
    if (f >= r.nflows) f -= r.nflows;
    const int c = r.flow_color[f];
    if ((ramp_full >> c) & 1) continue;
    push(r, c, (r.pe << 12) | (r.seq[f]++ & 0xfff), now + 2);
    ++t.injected;
    r.rr_flow = static_cast<uint8_t>(f + 1);
    break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  int width = 64, height = 64, hops = 8, tile_rows = 0, tile_cycles = 0;
  uint32_t cycles = 2000;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) {
      std::cerr << "lean_router_ceiling: " << a << " needs a value\n";
      return 2;
    }
    const std::string v = argv[++i];
    if (a == "--width") width = std::stoi(v);
    else if (a == "--height") height = std::stoi(v);
    else if (a == "--hops") hops = std::stoi(v);
    else if (a == "--cycles") cycles = static_cast<uint32_t>(std::stoul(v));
    else if (a == "--tile-rows") tile_rows = std::stoi(v);
    else if (a == "--tile-cycles") tile_cycles = std::stoi(v);
    else {
      std::cerr << "lean_router_ceiling: unknown argument " << a << "\n";
      return 2;
    }
  }
  if (tile_rows < 0 || tile_cycles < 0 || (tile_rows > 0) != (tile_cycles > 0)) {
    std::cerr << "lean_router_ceiling: --tile-rows and --tile-cycles go together, both positive\n";
    return 2;
  }
  if (width < 1 || height < 1 || hops < 1 || 2 * (hops + 1) > kColors) {
    std::cerr << "lean_router_ceiling: needs a fabric of at least 1 x 1 and 2 * (hops + 1) <= 24 colors\n";
    return 2;
  }
  const auto e0 = std::chrono::steady_clock::now();
  std::vector<LeanRouter> routers(static_cast<size_t>(width) * height);
  auto at = [&](int x, int y) -> LeanRouter& { return routers[static_cast<size_t>(y) * width + x]; };
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      LeanRouter& r = at(x, y);
      r.pe = static_cast<uint32_t>(y * width + x);
      if (y > 0) r.nbr[kN] = &at(x, y - 1);
      if (y + 1 < height) r.nbr[kS] = &at(x, y + 1);
      if (x + 1 < width) r.nbr[kE] = &at(x + 1, y);
      if (x > 0) r.nbr[kW] = &at(x - 1, y);
      for (int c = 0; c < kColors; ++c) r.credit[c] = kDepth;
    }
  }
  // The neighbour pattern of hw/traffic_gen.cc: k hops East on color x % (k + 1), k hops North
  // on color k + 1 + y % (k + 1); the source takes it from its ramp, the destination to its ramp.
  auto path = [&](int x, int y, int dx, int dy, int dir, int color) {
    int in = kRampPort;
    for (int i = 0; i <= hops; ++i) {
      LeanRouter& r = at(x + i * dx, y + i * dy);
      const int out = i < hops ? dir : kRampPort;
      r.in[color] = static_cast<uint8_t>(in);
      r.out[color] = static_cast<uint8_t>(out);
      if (in == kRampPort) r.ramp_in |= 1u << color;
      in = opp(out);
    }
    LeanRouter& src = at(x, y);
    src.rslot[color] = src.nflows;
    src.flow_color[src.nflows++] = static_cast<uint8_t>(color);
  };
  uint64_t flows = 0;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      if (x + hops < width) path(x, y, 1, 0, kE, x % (hops + 1)), ++flows;
      if (y - hops >= 0) path(x, y, 0, -1, kN, hops + 1 + y % (hops + 1)), ++flows;
    }
  }
  Totals t;
  const auto t0 = std::chrono::steady_clock::now();
  if (tile_rows > 0) {
    for (uint32_t t0 = 0; t0 < cycles; t0 += static_cast<uint32_t>(tile_cycles)) {
      const int k = static_cast<int>(std::min<uint32_t>(static_cast<uint32_t>(tile_cycles), cycles - t0));
      for (int a = 0; a < height + k; a += tile_rows) {
        for (int d = 0; d < k; ++d) {
          const int lo = std::max(0, a - d), hi = std::min(height, a + tile_rows - d);
          for (int y = lo; y < hi; ++y) {
            for (int x = 0; x < width; ++x) step(at(x, y), t0 + static_cast<uint32_t>(d), t);
          }
        }
      }
    }
  } else {
    for (uint32_t now = 0; now < cycles; ++now) {
      for (LeanRouter& r : routers) step(r, now, t);
    }
  }
  const auto t1 = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(t1 - t0).count();
  uint64_t fwd = 0;
  for (const LeanRouter& r : routers)
    for (uint64_t f : r.fwd) fwd += f;
  std::vector<uint64_t> color_stall(kColors);
  for (int c = 0; c < kColors; ++c) color_stall[static_cast<size_t>(c)] = t.color_stall.total(c);
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  nlohmann::json j = {{"impl", "lean_ceiling"},
                      {"width", width},
                      {"height", height},
                      {"hops", hops},
                      {"cycles", cycles},
                      {"tile_rows", tile_rows},
                      {"tile_cycles", tile_cycles},
                      {"flows", flows},
                      {"sim_seconds", s},
                      {"elab_seconds", std::chrono::duration<double>(t0 - e0).count()},
                      {"pe_cycles_per_s", static_cast<double>(cycles) * width * height / s},
                      {"injected", t.injected},
                      {"delivered", t.delivered},
                      {"forwarded", fwd},
                      {"color_stall", color_stall},
                      {"peak_rss_kb", ru.ru_maxrss}};
  std::cout << j.dump() << std::endl;
  return 0;
}
