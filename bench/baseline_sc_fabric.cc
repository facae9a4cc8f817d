// baseline_sc_fabric.cc -- naive-but-correct SystemC baseline of the 2D router
// fabric, used ONLY for benchmarking the optimised fabric against it.
//
// Style on purpose: one SC_MODULE per router, each with its own SC_METHOD on
// the shared sc_clock posedge, and sc_signal wiring (wavelets + credit
// returns) between neighbouring routers. sc_signal's evaluate/update split
// provides the two phases: every router reads last cycle's neighbour values
// and writes its own outputs for the next cycle.
//
// Traffic ("neighbour stream"): every PE (x,y) with x+k<W sources an East flow
// of color x%9 delivered k hops east; every PE with y-k>=0 sources a North flow
// of color 9+y%9 delivered k hops north (row 0 = northern edge). Injection rate
// 1.0, sinks always drain. Per output link <= 1 wavelet/cycle, per-output
// round-robin arbitration, credit-based backpressure (a slot freed in cycle t
// is visible upstream at t+1), hop latency 1, ramp (PE->router) latency 2.
//
// Build: g++ -O2 -std=c++17 bench/baseline_sc_fabric.cc -o baseline_sc_fabric
//          $(pkg-config --cflags --libs systemc)
// Run:   baseline_sc_fabric --width 64 --height 64 --hops 8 --cycles 2000 --depth 4
// Output: one JSON line on stdout.
#include <systemc>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>
#include <sys/resource.h>

using namespace sc_core;

namespace {

enum : uint8_t { P_N = 0, P_S = 1, P_E = 2, P_W = 3, P_RAMP = 4, kPorts = 5, kNoPort = 255 };
constexpr int kColors = 24;
constexpr uint64_t kValid = 1ull << 63;

inline int opposite(int p) { return p ^ 1; }  // N<->S, E<->W

struct Cfg {
  int width = 64, height = 64, hops = 8, depth = 4;
  long cycles = 2000;
};

inline uint32_t make_payload(uint32_t flow, uint32_t seq) {
  return ((flow & 0xffffu) << 16) | (seq & 0xffffu);
}

SC_MODULE(Router) {
  sc_in<bool> clk;
  sc_in<uint64_t> wl_in[4];     // wavelet arriving from neighbour on port p
  sc_in<uint32_t> cred_in[4];   // colors whose slot the neighbour on port p freed
  sc_out<uint64_t> wl_out[4];   // wavelet sent towards port p
  sc_out<uint32_t> cred_out[4]; // colors popped from our input FIFOs of port p
  sc_signal<uint64_t> wl_sig[4];   // owned signals driven by this router
  sc_signal<uint32_t> cred_sig[4];

  uint64_t injected = 0, delivered = 0, order_errors = 0, proto_errors = 0;
  uint32_t cycle = 0;

  SC_HAS_PROCESS(Router);
  Router(sc_module_name nm, int x, int y, const Cfg& c) : sc_module(nm), depth_(c.depth) {
    for (int p = 0; p < 4; ++p) {
      wl_out[p](wl_sig[p]);
      cred_out[p](cred_sig[p]);
      for (int col = 0; col < kColors; ++col) credit_[p][col] = static_cast<int16_t>(c.depth);
    }
    std::memset(rx_, kNoPort, sizeof rx_);
    std::memset(tx_, kNoPort, sizeof tx_);
    std::memset(head_, 0, sizeof head_);
    std::memset(cnt_, 0, sizeof cnt_);
    std::memset(fidx_, 0, sizeof fidx_);
    build_routes(x, y, c);
    fifo_.assign(static_cast<size_t>(nfifo_) * depth_, Slot{0, 0});
    SC_METHOD(step);
    sensitive << clk.pos();
    dont_initialize();
  }

 private:
  struct Source { int color; uint32_t flow; uint32_t seq; };
  struct Slot { uint32_t pay, ready; };

  int depth_;
  uint8_t rx_[kColors], tx_[kColors];   // static route table per color
  uint16_t fidx_[kColors];              // FIFO slot base index per routed color
  uint16_t head_[kColors], cnt_[kColors];
  int nfifo_ = 0;
  std::vector<Slot> fifo_;              // FIFO storage, depth_ slots per routed color
  int16_t credit_[4][kColors];          // free downstream slots per (out port, color)
  uint8_t out_colors_[kPorts][kColors]; // colors routed to each output port
  unsigned n_out_[kPorts] = {0, 0, 0, 0, 0};
  unsigned rr_[kPorts] = {0, 0, 0, 0, 0};
  Source src_[2];                       // at most one East and one North flow
  unsigned n_src_ = 0, inj_rr_ = 0;
  uint32_t exp_flow_[kColors] = {}, exp_seq_[kColors] = {};

  void add_route(int color, int rx, int tx) {
    if (rx_[color] != kNoPort) { ++proto_errors; return; }  // (router,color) clash
    rx_[color] = static_cast<uint8_t>(rx);
    tx_[color] = static_cast<uint8_t>(tx);
    fidx_[color] = static_cast<uint16_t>(nfifo_++);
    out_colors_[tx][n_out_[tx]++] = static_cast<uint8_t>(color);
  }

  void build_routes(int x, int y, const Cfg& c) {
    const int W = c.width, H = c.height, k = c.hops;
    for (int j = 0; j <= k; ++j) {  // East flows from (x-j, y)
      const int x0 = x - j;
      if (x0 < 0 || x0 + k >= W) continue;
      const int color = x0 % 9;
      const uint32_t flow = 2u * static_cast<uint32_t>(y * W + x0);
      if (j == 0) { add_route(color, P_RAMP, P_E); src_[n_src_++] = {color, flow, 0}; }
      else if (j == k) { add_route(color, P_W, P_RAMP); exp_flow_[color] = flow; }
      else add_route(color, P_W, P_E);
    }
    for (int j = 0; j <= k; ++j) {  // North flows from (x, y+j)
      const int y0 = y + j;
      if (y0 >= H || y0 - k < 0) continue;
      const int color = 9 + y0 % 9;
      const uint32_t flow = 2u * static_cast<uint32_t>(y0 * W + x) + 1u;
      if (j == 0) { add_route(color, P_RAMP, P_N); src_[n_src_++] = {color, flow, 0}; }
      else if (j == k) { add_route(color, P_S, P_RAMP); exp_flow_[color] = flow; }
      else add_route(color, P_S, P_N);
    }
  }

  void push(int c, uint32_t pay, uint32_t ready) {
    if (cnt_[c] >= depth_) { ++proto_errors; return; }  // overrun: credit bug
    unsigned slot = head_[c] + cnt_[c];
    if (slot >= static_cast<unsigned>(depth_)) slot -= depth_;
    fifo_[static_cast<size_t>(fidx_[c]) * depth_ + slot] = Slot{pay, ready};
    ++cnt_[c];
  }

  void deliver(int c, uint32_t pay) {
    ++delivered;
    if ((pay >> 16) != (exp_flow_[c] & 0xffffu) || (pay & 0xffffu) != (exp_seq_[c] & 0xffffu)) {
      ++order_errors;
      exp_seq_[c] = pay & 0xffffu;  // resync to avoid cascades
    }
    ++exp_seq_[c];
  }

  void step() {
    const uint32_t now = ++cycle;
    // Phase "read": credit returns and wavelets written by neighbours last cycle.
    for (int p = 0; p < 4; ++p) {
      uint32_t m = cred_in[p].read();
      while (m) {
        const int c = __builtin_ctz(m);
        m &= m - 1;
        ++credit_[p][c];
      }
    }
    for (int p = 0; p < 4; ++p) {
      const uint64_t w = wl_in[p].read();
      if (!(w & kValid)) continue;
      const int c = static_cast<int>((w >> 32) & 31);
      if (c >= kColors || rx_[c] != p) { ++proto_errors; continue; }
      push(c, static_cast<uint32_t>(w), now);  // hop latency 1: forwardable now
    }
    // PE injection over the ramp: one wavelet/cycle, round-robin over the
    // source colors whose RAMP FIFO has space (start-of-cycle occupancy).
    const unsigned ns = n_src_;
    for (unsigned i = 0; i < ns; ++i) {
      unsigned s = inj_rr_ + 1 + i;
      if (s >= ns) s -= ns;
      Source& src = src_[s];
      if (cnt_[src.color] < depth_) {
        push(src.color, make_payload(src.flow, src.seq++), now + 2);  // ramp latency 2
        ++injected;
        inj_rr_ = s;
        break;
      }
    }
    // Per-output-port round-robin arbitration; one wavelet per output link.
    uint32_t cred_mask[4] = {0, 0, 0, 0};
    for (int p = 0; p < kPorts; ++p) {
      uint64_t out = 0;
      const uint8_t* cols = out_colors_[p];
      const unsigned n = n_out_[p];
      for (unsigned i = 0; i < n; ++i) {
        unsigned s = rr_[p] + 1 + i;
        if (s >= n) s -= n;
        const int c = cols[s];
        if (!cnt_[c]) continue;
        const Slot& h = fifo_[static_cast<size_t>(fidx_[c]) * depth_ + head_[c]];
        if (h.ready > now) continue;
        if (p != P_RAMP && credit_[p][c] <= 0) continue;
        const uint32_t pay = h.pay;
        if (++head_[c] == depth_) head_[c] = 0;
        --cnt_[c];
        rr_[p] = s;
        if (rx_[c] != P_RAMP) cred_mask[rx_[c]] |= 1u << c;  // slot freed -> credit
        if (p == P_RAMP) {
          deliver(c, pay);  // sink always drains
        } else {
          --credit_[p][c];
          out = kValid | (static_cast<uint64_t>(c) << 32) | pay;
        }
        break;
      }
      if (p != P_RAMP) wl_out[p].write(out);
    }
    for (int p = 0; p < 4; ++p) cred_out[p].write(cred_mask[p]);
  }
};

SC_MODULE(Wafer) {
  sc_clock clk;
  sc_signal<uint64_t> idle_wl;   // never written: tie-off for edge inputs
  sc_signal<uint32_t> idle_cred;
  std::vector<std::unique_ptr<Router>> routers;

  Wafer(sc_module_name nm, const Cfg& c)
      : sc_module(nm),
        // First posedge at 0.5 ns so sc_start(SC_ZERO_TIME) runs no cycle and
        // sc_start(N ns) runs exactly N posedges.
        clk("clk", sc_time(1, SC_NS), 0.5, sc_time(0.5, SC_NS), true) {
    const int W = c.width, H = c.height;
    routers.reserve(static_cast<size_t>(W) * H);
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        const std::string name = "pe_" + std::to_string(x) + "_" + std::to_string(y);
        routers.emplace_back(new Router(name.c_str(), x, y, c));
      }
    for (int y = 0; y < H; ++y)
      for (int x = 0; x < W; ++x) {
        Router& r = *routers[static_cast<size_t>(y) * W + x];
        r.clk(clk);
        for (int p = 0; p < 4; ++p) {
          int nx = x, ny = y;
          if (p == P_N) --ny;
          else if (p == P_S) ++ny;
          else if (p == P_E) ++nx;
          else --nx;
          if (nx < 0 || nx >= W || ny < 0 || ny >= H) {
            r.wl_in[p](idle_wl);
            r.cred_in[p](idle_cred);
          } else {
            Router& nb = *routers[static_cast<size_t>(ny) * W + nx];
            r.wl_in[p](nb.wl_sig[opposite(p)]);
            r.cred_in[p](nb.cred_sig[opposite(p)]);
          }
        }
      }
  }
};

[[noreturn]] void usage_error(const char* msg, const char* arg) {
  std::fprintf(stderr, "baseline_sc_fabric: %s%s%s\n"
               "usage: baseline_sc_fabric [--width N] [--height N] [--hops 1..8] "
               "[--cycles N] [--depth N]\n", msg, arg ? ": " : "", arg ? arg : "");
  std::exit(2);
}

long parse_num(const char* flag, const char* s, long lo, long hi) {
  char* end = nullptr;
  const long v = std::strtol(s, &end, 10);
  if (!*s || *end || v < lo || v > hi) usage_error("bad value for", flag);
  return v;
}

}  // namespace

// libsystemc prints its banner (stderr) before sc_main runs, so silence it here.
int main(int argc, char** argv) {
  setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 1);
  return sc_core::sc_elab_and_sim(argc, argv);
}

int sc_main(int argc, char** argv) {
  Cfg cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage_error("missing value or unknown argument", argv[i]);
    const char* v = argv[++i];
    if (a == "--width") cfg.width = static_cast<int>(parse_num("--width", v, 1, 4096));
    else if (a == "--height") cfg.height = static_cast<int>(parse_num("--height", v, 1, 4096));
    else if (a == "--hops") cfg.hops = static_cast<int>(parse_num("--hops", v, 1, 8));
    else if (a == "--cycles") cfg.cycles = parse_num("--cycles", v, 1, 2000000000L);
    else if (a == "--depth") cfg.depth = static_cast<int>(parse_num("--depth", v, 1, 1024));
    else usage_error("unknown argument", argv[i - 1]);
  }

  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  // Deliberately leaked: SystemC 2.3's port/channel registry removal is
  // quadratic, so destroying a 64x64 wafer would take longer than running it.
  Wafer& wafer = *new Wafer("wafer", cfg);
  sc_start(SC_ZERO_TIME);  // finish elaboration + initialization, no clock edge yet
  const auto t1 = clock::now();
  sc_start(sc_time(static_cast<double>(cfg.cycles), SC_NS));
  const auto t2 = clock::now();

  uint64_t injected = 0, delivered = 0, order_errors = 0, proto_errors = 0;
  for (const auto& r : wafer.routers) {
    injected += r->injected;
    delivered += r->delivered;
    order_errors += r->order_errors;
    proto_errors += r->proto_errors;
  }
  const long ran = static_cast<long>(wafer.routers.front()->cycle);
  const double elab_s = std::chrono::duration<double>(t1 - t0).count();
  const double sim_s = std::chrono::duration<double>(t2 - t1).count();
  const double pe_cycles = static_cast<double>(cfg.width) * cfg.height * static_cast<double>(ran);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);

  std::printf("{\"impl\":\"sc_baseline\",\"width\":%d,\"height\":%d,\"hops\":%d,\"cycles\":%ld,"
              "\"depth\":%d,\"pe_cycles_per_s\":%.6g,\"sim_seconds\":%.6f,\"elab_seconds\":%.6f,"
              "\"injected\":%llu,\"delivered\":%llu,\"order_errors\":%llu,\"peak_rss_kb\":%ld}\n",
              cfg.width, cfg.height, cfg.hops, ran, cfg.depth, sim_s > 0 ? pe_cycles / sim_s : 0.0,
              sim_s, elab_s, static_cast<unsigned long long>(injected),
              static_cast<unsigned long long>(delivered),
              static_cast<unsigned long long>(order_errors), static_cast<long>(ru.ru_maxrss));
  std::fflush(stdout);
  if (ran != cfg.cycles || proto_errors != 0) {
    std::fprintf(stderr, "baseline_sc_fabric: ran %ld of %ld cycles, %llu protocol errors\n",
                 ran, cfg.cycles, static_cast<unsigned long long>(proto_errors));
    return 1;
  }
  return 0;
}
