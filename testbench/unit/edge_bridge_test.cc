// EdgeBridge (tlm/edge_bridge.h): WRITE and READ timing against hand-computed cycles (link-bound,
// channel-bound, a wafer that backs up, one that never drains), payloads and order, every error
// response, bad configurations.
//
// Each simulating TEST builds one top (a Fabric stepped by a Wafer on an sc_clock, the bridge and
// a host thread playing a transaction table) and calls sc_start() once; a TEST that finds the
// kernel already started skips (run under ctest: one process per TEST). The fabric runs at
// 1000 MHz, so one cycle is 1 ns and times below read as cycle numbers: the fabric steps cycle k
// at the clock edge at k ns, and the bridge, acting at k ns, sees k completed cycles.
#include "tlm/edge_bridge.h"

#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <tlm_utils/simple_initiator_socket.h>

#include "app/fabric_cmd.h"
#include "hw/fabric.h"
#include "hw/traffic_agent.h"
#include "hw/traffic_gen.h"
#include "hw/wafer.h"
#include "test_support.h"

namespace wafersim::tlm {
namespace {

using sc_core::SC_NS;
using sc_core::SC_PS;
using sc_core::sc_time;
using sc_core::SC_ZERO_TIME;

#define SKIP_UNLESS_SYSTEMC_FRESH()                        \
  if (sc_core::sc_get_status() != sc_core::SC_ELABORATION) \
  GTEST_SKIP() << "SystemC already ran in this process; run under ctest"

constexpr int kColor = 3;
constexpr const char* kMsgType = "wafersim/edge_bridge";

sc_time ns(double v) { return sc_time(v, SC_NS); }

// 8 x 8 PEs at 1 GHz; io.spacing 4 puts channels 0 and 1 at rows 1 and 5 of both edges.
HwConfig hw_config(double channel_gbps, int queue_depth) {
  HwConfig hw = test::small_config(8, 8);
  hw.fabric.clock_mhz = 1000;
  hw.io.spacing = 4;
  hw.io.channel_gbps = channel_gbps;
  hw.io.queue_depth = queue_depth;
  return hw;
}

EdgeBridgeConfig bridge_config(double link_gbps, double latency_ns,
                               uint64_t stall_limit = 1000000) {
  EdgeBridgeConfig c;
  c.link_gbps = link_gbps;
  c.latency_ns = latency_ns;
  c.stall_limit_cycles = stall_limit;
  return c;
}

// A PE endpoint that takes nothing before cycle `open_at`, then everything at once (no buffer
// limit): the wafer draining a channel late, or never (open_at = max).
class GateSink : public PeAgent {
 public:
  GateSink(const Fabric& f, int color, uint64_t open_at)
      : m_fabric(f), m_color(color), m_open_at(open_at) {}
  uint32_t full_colors() const override { return m_fabric.cycle() < m_open_at ? ~0u : 0u; }
  uint32_t evaluate(uint64_t, uint32_t, Wavelet*) override { return 0; }
  uint64_t deliver(const Wavelet& w, uint64_t) override {
    got.push_back(w.payload);
    return 0;
  }
  uint32_t send_colors() const override { return 0; }
  uint32_t receive_colors() const override { return 1u << m_color; }
  bool has_work() const override { return false; }
  // Its queue opens by itself at m_open_at: its router must look again then.
  uint64_t busy_until() const override { return m_fabric.cycle() < m_open_at ? m_open_at : 0; }
  uint64_t consumed() const override { return got.size(); }
  std::vector<uint32_t> got;  // payloads in arrival order

 private:
  const Fabric& m_fabric;
  int m_color;
  uint64_t m_open_at;
};

// The West channel of `row` feeds color kColor into the edge router, which hands it to a GateSink.
GateSink* sink_at_west(Fabric& f, int row, uint64_t open_at) {
  f.set_route(0, row, kColor, ColorRoute::simple(test::W, test::R));
  auto s = std::make_unique<GateSink>(f, kColor, open_at);
  GateSink* p = s.get();
  f.attach_agent(0, row, std::move(s));
  return p;
}

// One row of a transaction table. `at` is when the host calls (it waits until then if it is
// later than now), `annotate` the delay it passes.
struct Op {
  ::tlm::tlm_command cmd;
  uint64_t addr;
  std::vector<unsigned char> data;  // WRITE payload; READ: the length, filled by the bridge
  sc_time at = SC_ZERO_TIME;
  sc_time annotate = SC_ZERO_TIME;
  unsigned streaming_width = 0;  // 0: the length
  bool byte_enable = false;
  bool null_data = false;
};

struct Result {
  sc_time called;  // kernel time at the call
  sc_time ret;     // kernel time when b_transport returned
  sc_time delay;   // as returned
  ::tlm::tlm_response_status status;
  std::vector<unsigned char> data;
  std::string error;  // the bridge's last_error() right after the call
  sc_time end() const { return ret + delay; }
};

// The host: plays `script` in order, waiting out each returned delay before the next row.
class Host : public sc_core::sc_module {
 public:
  tlm_utils::simple_initiator_socket<Host> socket;
  std::vector<Op> script;
  std::vector<Result> results;
  std::function<std::string()> last_error;  // of the bridge it talks to

  SC_HAS_PROCESS(Host);
  explicit Host(sc_core::sc_module_name name) : sc_module(name), socket("socket") {
    SC_THREAD(run);
  }

 private:
  void run() {
    for (Op& op : script) {
      if (op.at > sc_core::sc_time_stamp()) sc_core::wait(op.at - sc_core::sc_time_stamp());
      ::tlm::tlm_generic_payload p;
      unsigned char be[4] = {0xff, 0xff, 0xff, 0xff};
      const auto len = static_cast<unsigned>(op.data.size());
      p.set_command(op.cmd);
      p.set_address(op.addr);
      p.set_data_ptr(op.null_data ? nullptr : op.data.data());
      p.set_data_length(len);
      p.set_streaming_width(op.streaming_width ? op.streaming_width : len);
      p.set_byte_enable_ptr(op.byte_enable ? be : nullptr);
      p.set_byte_enable_length(op.byte_enable ? 4 : 0);
      p.set_response_status(::tlm::TLM_INCOMPLETE_RESPONSE);
      Result r;
      r.called = sc_core::sc_time_stamp();
      sc_time d = op.annotate;
      socket->b_transport(p, d);
      r.ret = sc_core::sc_time_stamp();
      r.delay = d;
      r.status = p.get_response_status();
      r.data = op.data;
      if (last_error) r.error = last_error();
      results.push_back(r);
      if (d != SC_ZERO_TIME) sc_core::wait(d);
    }
  }
};

// The top: a fabric programmed by `setup`, the Wafer stepping it on a 1 ns clock, `hosts`
// bridges with a host each (all on the same fabric).
class Bench : public sc_core::sc_module {
 public:
  Fabric fabric;
  sc_core::sc_clock clk;
  Wafer wafer;
  sc_core::sc_vector<EdgeBridge> bridges;
  sc_core::sc_vector<Host> hosts;

  Bench(sc_core::sc_module_name name, const HwConfig& hw, const EdgeBridgeConfig& cfg,
        const std::function<void(Fabric&)>& setup, int n = 1)
      : sc_module(name),
        fabric(hw),
        clk("clk", clock_period(hw.fabric.clock_mhz)),
        wafer("wafer", fabric, std::numeric_limits<uint32_t>::max(), nullptr),
        bridges("bridge"),
        hosts("host", static_cast<size_t>(n)) {
    setup(fabric);
    wafer.clk(clk);
    bridges.init(static_cast<size_t>(n), [&](const char* nm, size_t) {
      return new EdgeBridge(nm, fabric, cfg, clk.period());
    });
    for (int i = 0; i < n; ++i) {
      hosts[i].socket.bind(bridges[i].socket);
      hosts[i].last_error = [this, i] { return bridges[i].last_error(); };
    }
  }
  EdgeBridge& bridge() { return bridges[0]; }
  Host& host() { return hosts[0]; }
};

std::vector<unsigned char> words(uint32_t n, uint32_t seed) {
  std::vector<unsigned char> b(4 * n);
  for (size_t i = 0; i < b.size(); ++i) {
    b[i] = static_cast<unsigned char>(seed * 131 + i * 7 + (i >> 8));
  }
  return b;
}

// Payloads a WRITE's bytes stand for: little-endian 32-bit words, written out byte by byte.
std::vector<uint32_t> payloads(const std::vector<unsigned char>& b) {
  std::vector<uint32_t> v;
  for (size_t i = 0; i + 3 < b.size(); i += 4) {
    v.push_back(b[i] | b[i + 1] << 8 | b[i + 2] << 16 | static_cast<uint32_t>(b[i + 3]) << 24);
  }
  return v;
}

std::string hex_payload(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%x", v);
  return buf;
}

Op write(uint64_t addr, std::vector<unsigned char> data, sc_time at = SC_ZERO_TIME) {
  return Op{::tlm::TLM_WRITE_COMMAND, addr, std::move(data), at};
}
Op read(uint64_t addr, uint32_t n_words, sc_time at = SC_ZERO_TIME) {
  return Op{::tlm::TLM_READ_COMMAND, addr, std::vector<unsigned char>(4 * n_words), at};
}

// ---------------------------------------------------------------------------------------------

TEST(EdgeBridge, AddressMap) {
  EXPECT_EQ(EdgeBridge::address(kWest, 0, 0), 0x0u);
  EXPECT_EQ(EdgeBridge::address(kWest, 1, 3), 0x103u);
  EXPECT_EQ(EdgeBridge::address(kEast, 59, 31), 0x13b1fu);
  EXPECT_THROW(EdgeBridge::address(kNorth, 0, 0), ConfigError);
  EXPECT_THROW(EdgeBridge::address(kWest, 256, 0), ConfigError);
  EXPECT_THROW(EdgeBridge::address(kEast, 0, 32), ConfigError);
}

// Link-bound: a 100 Gb/s link (80 ps per byte) behind a channel that takes a
// wavelet every cycle. Each WRITE ends at exactly start + 1000 ns + B * 80 ps; b_transport
// returns when the channel has taken the last word into its 16-deep queue, start + (N - 16)
// cycles for N > 16 words (one word per cycle once the queue is full), and annotates the rest.
TEST(EdgeBridge, WriteEndsAtLinkTimeWhenTheLinkIsTheBottleneck) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  constexpr int kQueue = 16;
  GateSink* sink = nullptr;
  Bench b("link_bound", hw_config(64, kQueue), bridge_config(100, 1000),
          [&](Fabric& f) { sink = sink_at_west(f, 1, 0); });
  const uint64_t addr = EdgeBridge::address(kWest, 0, kColor);
  const uint32_t kWords[] = {1, 2, 15, 16, 17, 250, 1024};
  std::vector<unsigned char> all;
  for (uint32_t i = 0; i < std::size(kWords); ++i) {
    b.host().script.push_back(write(addr, words(kWords[i], i), ns(10)));
    all.insert(all.end(), b.host().script.back().data.begin(), b.host().script.back().data.end());
  }
  // Annotated delays: b_transport waits them out first, so the transfer starts that much later.
  b.host().script[1].annotate = sc_time(250, SC_PS);
  b.host().script[3].annotate = ns(3);
  sc_core::sc_start(ns(12000));
  EXPECT_EQ(b.wafer.error(), "");

  ASSERT_EQ(b.host().results.size(), std::size(kWords));
  uint64_t stall = 0;
  sc_time busy = SC_ZERO_TIME;
  for (size_t i = 0; i < std::size(kWords); ++i) {
    SCOPED_TRACE("row " + std::to_string(i) + ", " + std::to_string(kWords[i]) + " words");
    const Result& r = b.host().results[i];
    const sc_time start = r.called + b.host().script[i].annotate;
    const uint32_t n = kWords[i];
    const sc_time link(1000000.0 + 4.0 * n * 80.0, SC_PS);  // integer picoseconds
    const uint32_t waits = n > kQueue ? n - kQueue : 0;
    EXPECT_EQ(r.status, ::tlm::TLM_OK_RESPONSE);
    EXPECT_EQ(r.end(), start + link);
    EXPECT_EQ(r.ret, start + ns(waits));
    EXPECT_EQ(r.delay, link - ns(waits));
    EXPECT_EQ(b.bridge().link_time(4 * n), link);
    stall += waits;
    busy += link;
  }
  EXPECT_EQ(sink->got, payloads(all)) << "every word, in order, little-endian";
  const EdgeBridgeStats& st = b.bridge().stats();
  EXPECT_EQ(st.bytes_in, all.size());
  EXPECT_EQ(st.bytes_out, 0u);
  EXPECT_EQ(st.transactions, std::size(kWords));
  EXPECT_EQ(st.errors, 0u);
  EXPECT_EQ(st.stall_cycles, stall);
  EXPECT_EQ(st.busy, busy);  // back to back, never overlapping
}

// Channel-bound: 8 Gb/s at 1 GHz is one wavelet per T = 4 cycles, behind a 4-deep host queue;
// the link (1.2 Tb/s, 10 ns) would take 11.7 ns for 256 bytes. The channel takes word 0 at the
// start cycle S and word j >= 1 at S + 4j - 1 (edge_io.cc restarts an idle channel's schedule
// at now + T - 1); each take frees a queue slot the bridge fills at the next cycle. So word
// 4 + j is accepted at S + 4j (j >= 1), the last of N at S + 4(N - 5), and the WRITE ends there.
TEST(EdgeBridge, WriteEndsWhenTheChannelTakesTheLastWord) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  constexpr uint32_t kQueue = 4, kT = 4;
  GateSink* sink = nullptr;
  Bench b("channel_bound", hw_config(8, kQueue), bridge_config(1200, 10),
          [&](Fabric& f) { sink = sink_at_west(f, 1, 0); });
  const uint64_t addr = EdgeBridge::address(kWest, 0, kColor);
  struct Row {
    uint32_t words;
    double at_ns;
  };
  const Row kRows[] = {{64, 100}, {64, 1000.5}, {6, 2000}, {4, 3000}};  // on an edge, between edges
  std::vector<unsigned char> all;
  for (size_t i = 0; i < std::size(kRows); ++i) {
    b.host().script.push_back(write(addr, words(kRows[i].words, 7 + i), ns(kRows[i].at_ns)));
    all.insert(all.end(), b.host().script.back().data.begin(), b.host().script.back().data.end());
  }
  sc_core::sc_start(ns(3100));
  EXPECT_EQ(b.wafer.error(), "");

  ASSERT_EQ(b.host().results.size(), std::size(kRows));
  for (size_t i = 0; i < std::size(kRows); ++i) {
    SCOPED_TRACE("row " + std::to_string(i));
    const Result& r = b.host().results[i];
    const uint32_t n = kRows[i].words;
    const sc_time start = ns(kRows[i].at_ns);
    ASSERT_EQ(r.called, start);
    const sc_time link = b.bridge().link_time(4 * n);
    // Words 0..3 fill the queue at once; word 4 waits for the take at S, word 4 + j for S + 4j - 1.
    const sc_time last = n <= kQueue       ? start
                         : n == kQueue + 1 ? start + ns(1)
                                           : start + ns(kT * (n - 1 - kQueue));
    EXPECT_EQ(r.status, ::tlm::TLM_OK_RESPONSE);
    EXPECT_EQ(r.ret, last);
    EXPECT_EQ(r.end(), std::max(start + link, last));
  }
  EXPECT_EQ(b.host().results[0].end(), ns(100 + 236))
      << "channel-bound: 236 cycles >> 11.7 ns of link";
  EXPECT_EQ(b.host().results[1].end(), ns(1000.5 + 236));
  EXPECT_EQ(b.host().results[2].ret, ns(2004))
      << "6 words: 4 at once, the 5th at S + 1, the 6th at S + 4";
  EXPECT_EQ(b.host().results[2].end(), ns(2000) + b.bridge().link_time(24))
      << "then the 10.2 ns link is longer";
  EXPECT_EQ(b.host().results[3].ret, ns(3000)) << "4 words fit the queue at once";
  EXPECT_EQ(b.host().results[3].end(), ns(3000) + b.bridge().link_time(16));
  EXPECT_EQ(sink->got, payloads(all));
  EXPECT_EQ(b.bridge().stats().stall_cycles, 236u + 236u + 4u);
}

// A wafer that backs up: channel W0's endpoint drains from the start, W1's only from D = 100
// cycles after its WRITE starts. One wavelet per cycle, queue depth Q = 4, router buffers of
// bd = 4, N = 32 words, fast link.
//   W0: the channel takes a word every cycle from S: the last word is accepted at S + N - Q.
//   W1: the edge router's buffer takes bd words (cycles S..S+bd-1) and the queue Q, then nothing
//       moves until the endpoint opens at G = S + D; the router forwards its first word at G but
//       sees its buffer as full until the start of G + 1, when the channel takes again; the
//       bridge fills the freed slot at G + 2 and one more per cycle: the last word at
//       G + 2 + (N - 1 - Q - bd) = G + 1 + N - Q - bd. Stretched by D + 1 - bd cycles.
TEST(EdgeBridge, StalledWaferStretchesTheWrite) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  constexpr uint32_t kN = 32, kQueue = 4, kD = 100;
  HwConfig hw = hw_config(32, kQueue);
  const uint32_t bd = static_cast<uint32_t>(hw.router.buffer_depth);
  const double s0 = 10, s1 = 200;
  GateSink *open = nullptr, *late = nullptr;
  Bench b("stretch", hw, bridge_config(1200, 0), [&](Fabric& f) {
    open = sink_at_west(f, 1, 0);
    late = sink_at_west(f, 5, static_cast<uint64_t>(s1) + kD);
  });
  b.host().script = {write(EdgeBridge::address(kWest, 0, kColor), words(kN, 1), ns(s0)),
                     write(EdgeBridge::address(kWest, 1, kColor), words(kN, 2), ns(s1))};
  sc_core::sc_start(ns(500));
  EXPECT_EQ(b.wafer.error(), "");

  ASSERT_EQ(b.host().results.size(), 2u);
  const Result& a = b.host().results[0];
  const Result& s = b.host().results[1];
  EXPECT_EQ(a.status, ::tlm::TLM_OK_RESPONSE);
  EXPECT_EQ(s.status, ::tlm::TLM_OK_RESPONSE);
  EXPECT_EQ(a.end(), ns(s0 + kN - kQueue));
  EXPECT_EQ(s.end(), ns(s1 + kD + 1 + kN - kQueue - bd));
  EXPECT_EQ((s.end() - s.called) - (a.end() - a.called), ns(kD + 1 - bd));
  EXPECT_EQ(a.delay, SC_ZERO_TIME);
  EXPECT_EQ(s.delay, SC_ZERO_TIME);
  EXPECT_EQ(open->got, payloads(b.host().script[0].data));
  EXPECT_EQ(late->got, payloads(b.host().script[1].data));
  EXPECT_EQ(b.bridge().stats().stall_cycles, (kN - kQueue) + (kD + 1 + kN - kQueue - bd));
  EXPECT_EQ(b.bridge().stats().errors, 0u);
}

// A wafer that never drains: the WRITE moves Q + bd words, then the channel refuses; after the
// stall limit of 50 cycles without progress it ends with an error response (no hang). A READ
// from a channel nothing is sent to does the same.
TEST(EdgeBridge, StallLimitEndsATransferTheWaferNeverTakes) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  sc_core::sc_report_handler::set_actions(kMsgType, sc_core::SC_WARNING, sc_core::SC_DO_NOTHING);
  constexpr uint32_t kN = 32, kQueue = 4, kLimit = 50;
  HwConfig hw = hw_config(32, kQueue);
  hw.sim.watchdog_cycles = 0;  // the fabric's own deadlock stop would end the run for everyone
  const uint32_t bd = static_cast<uint32_t>(hw.router.buffer_depth);
  GateSink* never = nullptr;
  Bench b("never", hw, bridge_config(1200, 0, kLimit), [&](Fabric& f) {
    never = sink_at_west(f, 1, std::numeric_limits<uint64_t>::max());
    f.set_route(0, 5, kColor, ColorRoute::simple(test::E, test::W));  // out to W1; nobody sends
  });
  b.host().script = {write(EdgeBridge::address(kWest, 0, kColor), words(kN, 3), ns(10)),
                     read(EdgeBridge::address(kWest, 1, kColor), 4, ns(100))};
  b.host().script[1].annotate = ns(2);
  sc_core::sc_start(ns(400));
  EXPECT_EQ(b.wafer.error(), "");

  ASSERT_EQ(b.host().results.size(), 2u) << "b_transport must return";
  const Result& w = b.host().results[0];
  EXPECT_EQ(w.status, ::tlm::TLM_GENERIC_ERROR_RESPONSE);
  // The last word taken at 10 + bd (the take at cycle 13 freed its slot); 50 cycles later, still
  // refused.
  EXPECT_EQ(w.ret, ns(10 + bd + kLimit));
  EXPECT_EQ(w.delay, SC_ZERO_TIME);
  EXPECT_EQ(w.error,
            "never.bridge_0: WRITE to channel W0 (row 1) color 3: the channel took nothing for 50 "
            "cycles (edge_bridge.stall_limit_cycles); 8 of 32 words were taken");
  const Result& r = b.host().results[1];
  EXPECT_EQ(r.status, ::tlm::TLM_GENERIC_ERROR_RESPONSE);
  EXPECT_EQ(r.ret, ns(102 + kLimit));
  EXPECT_EQ(b.bridge().last_error(),
            "never.bridge_0: READ from channel W1 (row 5) color 3: nothing arrived for 50 cycles "
            "(edge_bridge.stall_limit_cycles); 0 of 4 words were taken");
  const EdgeBridgeStats& st = b.bridge().stats();
  EXPECT_EQ(st.errors, 2u);
  EXPECT_EQ(st.transactions, 0u);
  EXPECT_EQ(st.bytes_in, 4u * (kQueue + bd)) << "words taken stay taken";
  EXPECT_EQ(st.stall_cycles, bd + kLimit);
  EXPECT_EQ(st.starve_cycles, kLimit);
  EXPECT_EQ(st.busy, ns(bd + kLimit) + ns(kLimit));
  EXPECT_EQ(sc_core::sc_report_handler::get_count(kMsgType), 2);
  EXPECT_TRUE(never->got.empty());
}

// READ: a PE at (3, 1) sends 16 wavelets on kColor West to channel W0, one per cycle from cycle
// 0: ramp (2 cycles) + 3 hops + the link to the channel (1 cycle each) makes wavelet i ready
// for the host at cycle 6 + i. A slower PE at (3, 5) sends 6 at a quarter rate to W1, read by a
// second bridge at the same time. Link: 5 ns + 32 bytes * 8 / 128 Gb/s = 7 ns per 8-word READ.
TEST(EdgeBridge, ReadReturnsWaferWaveletsInOrderAndOnTime) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  Bench b(
      "read", hw_config(32, 16), bridge_config(128, 5),
      [&](Fabric& f) {
        TrafficBuilder tb(f, TrafficAgentOptions{});
        tb.path(xy_path(3, 1, 0, 1), kColor, kWest);
        tb.agent(3, 1).add_flow({kColor, 1.0, 16});
        tb.path(xy_path(3, 5, 0, 5), kColor, kWest);
        tb.agent(3, 5).add_flow({kColor, 0.25, 6});
        tb.apply();
        f.channel(kWest, 0)->set_record(true);
        f.channel(kWest, 1)->set_record(true);
      },
      2);
  const uint64_t w0 = EdgeBridge::address(kWest, 0, kColor),
                 w1 = EdgeBridge::address(kWest, 1, kColor);
  b.hosts[0].script = {read(w0, 8), read(w0, 8, ns(200))};
  b.hosts[1].script = {read(w1, 6)};
  sc_core::sc_start(ns(400));
  EXPECT_EQ(b.wafer.error(), "");

  // The fabric delivered as computed (the setup, not the bridge, is checked here).
  const auto& log0 = b.fabric.channel(kWest, 0)->log();
  ASSERT_EQ(log0.size(), 16u);
  for (uint32_t i = 0; i < 16; ++i) EXPECT_EQ(log0[i].first, 6u + i) << "wavelet " << i;

  ASSERT_EQ(b.hosts[0].results.size(), 2u);
  const Result& a = b.hosts[0].results[0];
  EXPECT_EQ(a.status, ::tlm::TLM_OK_RESPONSE);
  EXPECT_EQ(a.ret, ns(13)) << "the 8th wavelet is there at cycle 13";
  EXPECT_EQ(a.delay, SC_ZERO_TIME) << "13 ns > 7 ns of link";
  const Result& c = b.hosts[0].results[1];
  EXPECT_EQ(c.status, ::tlm::TLM_OK_RESPONSE);
  EXPECT_EQ(c.ret, ns(200)) << "all 8 were waiting in the channel's queue";
  EXPECT_EQ(c.delay, ns(7)) << "link-bound";
  std::vector<uint32_t> expected;
  for (uint32_t i = 0; i < 16; ++i) {
    expected.push_back(make_payload(test::pe_id(b.fabric, 3, 1), i));
  }
  std::vector<unsigned char> got = a.data;
  got.insert(got.end(), c.data.begin(), c.data.end());
  EXPECT_EQ(payloads(got), expected);
  EXPECT_EQ(a.data[0], expected[0] & 0xff) << "little-endian";

  const auto& log1 = b.fabric.channel(kWest, 1)->log();
  ASSERT_EQ(log1.size(), 6u);
  ASSERT_EQ(b.hosts[1].results.size(), 1u);
  const Result& s = b.hosts[1].results[0];
  EXPECT_EQ(s.status, ::tlm::TLM_OK_RESPONSE);
  EXPECT_EQ(s.ret, ns(static_cast<double>(log1.back().first))) << "when the last one was there";
  EXPECT_EQ(s.end(),
            std::max(b.bridges[1].link_time(24), ns(static_cast<double>(log1.back().first))));
  EXPECT_GT(log1.back().first, 6u + 5u * 3u) << "the slow flow is spread out";
  std::vector<uint32_t> slow;
  for (uint32_t i = 0; i < 6; ++i) slow.push_back(make_payload(test::pe_id(b.fabric, 3, 5), i));
  EXPECT_EQ(payloads(s.data), slow);

  const EdgeBridgeStats& st = b.bridges[0].stats();
  EXPECT_EQ(st.bytes_out, 64u);
  EXPECT_EQ(st.bytes_in, 0u);
  EXPECT_EQ(st.transactions, 2u);
  EXPECT_EQ(st.starve_cycles, 13u) << "polls at cycles 0..12 found nothing new";
  EXPECT_EQ(st.busy, ns(13) + ns(7));
}

// Every bad transaction gets its error response at once (no time, delay unchanged), a message
// and a warning; good transactions around them still work.
TEST(EdgeBridge, BadTransactionsGetErrorResponses) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  sc_core::sc_report_handler::set_actions(kMsgType, sc_core::SC_WARNING, sc_core::SC_DO_NOTHING);
  constexpr int kOther = 5;
  GateSink* sink = nullptr;
  Bench b("bad", hw_config(32, 16), bridge_config(1200, 10), [&](Fabric& f) {
    sink = sink_at_west(f, 1, 0);
    TrafficBuilder tb(f, TrafficAgentOptions{});  // kColor and kOther, interleaved, to W1
    tb.path(xy_path(3, 5, 0, 5), kColor, kWest);
    tb.path(xy_path(3, 5, 0, 5), kOther, kWest);
    tb.agent(3, 5).add_flow({kColor, 1.0, 2});
    tb.agent(3, 5).add_flow({kOther, 1.0, 2});
    tb.apply();
  });
  const uint64_t w0 = EdgeBridge::address(kWest, 0, kColor);
  struct Row {
    Op op;
    ::tlm::tlm_response_status status;
    std::string message;  // after "bad.bridge_0: "
  };
  auto op = [](Op o, auto&& change) {
    change(o);
    return o;
  };
  std::vector<Row> rows = {
      {op(write(w0, words(2, 1)), [](Op& o) { o.cmd = ::tlm::TLM_IGNORE_COMMAND; }),
       ::tlm::TLM_COMMAND_ERROR_RESPONSE, "only READ and WRITE are supported"},
      {op(write(w0, words(1, 1)), [](Op& o) { o.byte_enable = true; }),
       ::tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, "byte enables are not supported"},
      {write(w0, std::vector<unsigned char>(6)), ::tlm::TLM_BURST_ERROR_RESPONSE,
       "length 6 is not a whole number of 32-bit words (a positive multiple of 4)"},
      {write(w0, {}), ::tlm::TLM_BURST_ERROR_RESPONSE,
       "length 0 is not a whole number of 32-bit words (a positive multiple of 4)"},
      {op(write(w0, words(2, 1)), [](Op& o) { o.streaming_width = 2; }),
       ::tlm::TLM_BURST_ERROR_RESPONSE, "streaming width 2 splits a 32-bit word"},
      {op(write(w0, words(2, 1)), [](Op& o) { o.null_data = true; }),
       ::tlm::TLM_GENERIC_ERROR_RESPONSE, "no data pointer"},
      {write(w0 | 0x20, words(1, 1)), ::tlm::TLM_ADDRESS_ERROR_RESPONSE,
       "address 0x23 sets bits outside the map (color [4:0], channel [15:8], edge bit 16)"},
      {write(w0 | 0x20000, words(1, 1)), ::tlm::TLM_ADDRESS_ERROR_RESPONSE,
       "address 0x20003 sets bits outside the map (color [4:0], channel [15:8], edge bit 16)"},
      {write(EdgeBridge::address(kWest, 2, kColor), words(1, 1)), ::tlm::TLM_ADDRESS_ERROR_RESPONSE,
       "address 0x203: no channel W2 (the fabric has 2 per edge)"},
      {write(EdgeBridge::address(kEast, 0, kColor), words(1, 1)), ::tlm::TLM_ADDRESS_ERROR_RESPONSE,
       "WRITE to channel E0 (row 1) color 3: wafer.pe_7_1 does not route that color in from the "
       "channel"},
      {write(EdgeBridge::address(kWest, 0, 7), words(1, 1)), ::tlm::TLM_ADDRESS_ERROR_RESPONSE,
       "WRITE to channel W0 (row 1) color 7: wafer.pe_0_1 does not route that color in from the "
       "channel"},
      {read(w0, 1), ::tlm::TLM_ADDRESS_ERROR_RESPONSE,
       "READ from channel W0 (row 1) color 3: wafer.pe_0_1 does not route that color out to the "
       "channel"},
      {write(EdgeBridge::address(kWest, 1, kColor), words(1, 1)), ::tlm::TLM_ADDRESS_ERROR_RESPONSE,
       "WRITE to channel W1 (row 5) color 3: wafer.pe_0_5 does not route that color in from the "
       "channel"},
  };
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].op.at = ns(10 + 2 * i);
    rows[i].op.annotate = sc_time(static_cast<double>(50 * i), SC_PS);  // handed back unchanged
  }
  for (const Row& r : rows) b.host().script.push_back(r.op);
  // Then a good WRITE whose streaming width is one word (every word goes to the one stream), and
  // a READ of W1 at 100 ns, when both colors have arrived: kColor, kOther, kColor, kOther.
  b.host().script.push_back(op(write(w0, words(2, 9)), [](Op& o) {
    o.streaming_width = 4;
    o.at = ns(50);
  }));
  b.host().script.push_back(read(EdgeBridge::address(kWest, 1, kColor), 4, ns(100)));
  sc_core::sc_start(ns(300));
  EXPECT_EQ(b.wafer.error(), "");

  ASSERT_EQ(b.host().results.size(), rows.size() + 2);
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE("row " + std::to_string(i));
    const Result& r = b.host().results[i];
    EXPECT_EQ(r.status, rows[i].status);
    EXPECT_EQ(r.error, "bad.bridge_0: " + rows[i].message);
    EXPECT_EQ(r.ret, r.called) << "no time taken";
    EXPECT_EQ(r.delay, rows[i].op.annotate) << "delay unchanged";
  }
  const Result& g = b.host().results[rows.size()];
  EXPECT_EQ(g.status, ::tlm::TLM_OK_RESPONSE);
  EXPECT_EQ(g.ret, ns(50));
  EXPECT_EQ(g.end(), ns(50) + b.bridge().link_time(8));
  EXPECT_EQ(sink->got, payloads(b.host().script[rows.size()].data));
  const Result& m = b.host().results[rows.size() + 1];
  EXPECT_EQ(m.status, ::tlm::TLM_GENERIC_ERROR_RESPONSE);
  EXPECT_EQ(m.ret, ns(100));
  EXPECT_EQ(m.error,
            "bad.bridge_0: READ from channel W1 (row 5) color 3: a wavelet of color 5 (payload 0x" +
                hex_payload(make_payload(test::pe_id(b.fabric, 3, 5), 0)) +
                ") arrived after 1 of 4 words; dropped (one address is one stream of one color)");
  EXPECT_EQ(payloads(m.data)[0], make_payload(test::pe_id(b.fabric, 3, 5), 0))
      << "the word before it";
  const EdgeBridgeStats& st = b.bridge().stats();
  EXPECT_EQ(st.errors, rows.size() + 1);
  EXPECT_EQ(st.transactions, 1u);
  EXPECT_EQ(st.bytes_in, 8u);
  EXPECT_EQ(st.bytes_out, 4u);
  EXPECT_EQ(sc_core::sc_report_handler::get_count(kMsgType), static_cast<int>(rows.size() + 1));
}

std::string config_error(const EdgeBridgeConfig& c) {
  try {
    c.validate();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(EdgeBridge, BadConfig) {
  EdgeBridgeConfig c;
  EXPECT_EQ(config_error(c), "");
  EXPECT_EQ(c.link_gbps, 1200);
  EXPECT_EQ(c.latency_ns, 1000);
  c.link_gbps = 0;
  EXPECT_EQ(config_error(c), "edge_bridge.link_gbps must be a positive number, got 0");
  c.link_gbps = -5;
  EXPECT_EQ(config_error(c), "edge_bridge.link_gbps must be a positive number, got -5");
  c.link_gbps = std::numeric_limits<double>::infinity();
  EXPECT_EQ(config_error(c), "edge_bridge.link_gbps must be a positive number, got inf");
  c = EdgeBridgeConfig();
  c.latency_ns = -1;
  EXPECT_EQ(config_error(c), "edge_bridge.latency_ns must be at least 0, got -1");
  c.latency_ns = std::nan("");
  EXPECT_EQ(config_error(c), "edge_bridge.latency_ns must be at least 0, got nan");
  c.latency_ns = 0;
  EXPECT_EQ(config_error(c), "");
  c.stall_limit_cycles = 0;
  EXPECT_EQ(config_error(c), "edge_bridge.stall_limit_cycles must be at least 1, got 0");
}

TEST(EdgeBridge, ConstructorValidatesItsConfig) {
  SKIP_UNLESS_SYSTEMC_FRESH();
  Fabric f(hw_config(32, 16));
  EdgeBridgeConfig bad;
  bad.link_gbps = 0;
  EXPECT_THROW(EdgeBridge("bad_cfg", f, bad, ns(1)), ConfigError);
  try {
    EdgeBridge br("no_clock", f, EdgeBridgeConfig(), SC_ZERO_TIME);
    ADD_FAILURE() << "a zero clock period was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "no_clock: the clock period must be positive");
  }
}

}  // namespace
}  // namespace wafersim::tlm
