// The vector engine (hw/vector_fabric.h) against the routers it is to replace: the same
// routes, agents and seed on two fabrics, one stepped by its routers and one by the vector
// engine, must give the same per-router, per-port and per-color counters, peaks, totals and
// every endpoint's arrivals, cycle for cycle.
#include <gtest/gtest.h>

#include <fstream>

#include "hw/fabric.h"
#include "hw/fabric_stats.h"
#include "hw/router.h"
#include "hw/traffic_agent.h"
#include "hw/traffic_gen.h"
#include "hw/vector_fabric.h"
#include "test_support.h"

namespace wafersim {
namespace {

struct Case {
  std::string name;
  std::string pattern;
  int width, height;
  double rate, drain, stall;
  int depth, ramp_latency;
  std::string routes = "";  // a route file's text (pattern "file")
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class VectorFabricMatches : public testing::TestWithParam<Case> {};

TEST_P(VectorFabricMatches, TheRoutersCounterForCounter) {
  const Case& k = GetParam();
  auto build = [&](HwConfig& hw) {
    hw = test::small_config(k.width, k.height);
    hw.sim.seed = 11;
    hw.router.buffer_depth = k.depth;
    hw.router.ramp_latency = k.ramp_latency;
    auto f = std::make_unique<Fabric>(hw);
    TrafficConfig tc;
    tc.pattern = k.pattern;
    tc.rate = k.rate;
    tc.drain_prob = k.drain;
    tc.stall_prob = k.stall;
    tc.hops = 3;
    tc.flows = 40;
    tc.record = true;
    if (!k.routes.empty()) {
      tc.routes = test::tmp_path("vector_fabric_" + k.name + ".routes");
      std::ofstream(tc.routes) << k.routes;
    }
    program_traffic(*f, tc);
    return f;
  };
  HwConfig hw;
  auto ref = build(hw);
  auto vec_fab = build(hw);
  ASSERT_EQ(VectorFabric::supported(*vec_fab), "");
  VectorFabric vec(*vec_fab);
  constexpr uint64_t kCycles = 700;
  // Endpoints whose flows send at rate 1 and whose queues were made in color order the engine runs
  // itself (at rate 1 in the neighbour pattern, all of them); the others it calls through
  // PeAgent. Every case has some of the first kind, most have both.
  EXPECT_GT(vec.endpoints_run(), 0u);
  if (k.pattern == "neighbour" && k.rate == 1.0) {
    EXPECT_EQ(vec.endpoints_run(), test::traffic_agents(*vec_fab).size());
  }
  ref->run(kCycles);
  vec.run(kCycles);
  vec.sync_endpoints();
  uint64_t sends = 0;
  for (const Router* r : ref->routers()) {
    SCOPED_TRACE(Fabric::pe_name(r->x(), r->y()));
    for (int p = 0; p < kNumPorts; ++p) {
      EXPECT_EQ(vec.forwarded(r->x(), r->y(), p), r->s_forwarded[p]) << "port " << p;
      EXPECT_EQ(vec.stall(r->x(), r->y(), p), r->stall_cycles(p, ref->cycle())) << "port " << p;
      sends += r->s_forwarded[p];
    }
    EXPECT_EQ(vec.peak_occupancy(r->x(), r->y()), r->s_peak_occupancy);
    for (int c = 0; c < hw.router.colors; ++c) EXPECT_EQ(vec.peak_of_color(r->x(), r->y(), c), r->peak_of_color(c)) << "color " << c;
  }
  EXPECT_GT(sends, 1000u);
  const std::vector<ColorCounters> cc = ref->color_counters();
  for (int c = 0; c < hw.router.colors; ++c) {
    EXPECT_EQ(vec.color_forwarded(c), cc[static_cast<size_t>(c)].forwarded) << "color " << c;
    EXPECT_EQ(vec.color_stall(c), cc[static_cast<size_t>(c)].stall) << "color " << c;
  }
  const FabricTotals t = ref->totals();
  EXPECT_EQ(vec.injected(), t.injected);
  EXPECT_EQ(vec.delivered(), t.delivered);
  EXPECT_EQ(vec.multicast_copies(), t.multicast_copies);
  const auto a = test::traffic_agents(*ref), b = test::traffic_agents(*vec_fab);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].agent->sent(), b[i].agent->sent()) << "agent " << i;
    const auto &la = a[i].agent->log(), &lb = b[i].agent->log();
    ASSERT_EQ(la.size(), lb.size()) << "agent " << i;
    for (size_t j = 0; j < la.size(); ++j) {
      ASSERT_EQ(la[j].cycle, lb[j].cycle) << "agent " << i << " arrival " << j;
      ASSERT_EQ(la[j].w, lb[j].w) << "agent " << i << " arrival " << j;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Patterns, VectorFabricMatches,
    testing::Values(Case{"neighbour_saturated", "neighbour", 32, 20, 1.0, 1.0, 0.0, 4, 2},
                    Case{"neighbour_draws", "neighbour", 24, 19, 1.0, 0.5, 0.3, 4, 2},
                    Case{"neighbour_draws_ramp1", "neighbour", 17, 21, 1.0, 0.7, 0.2, 5, 1},
                    Case{"neighbour_backpressure", "neighbour", 20, 17, 0.8, 0.4, 0.2, 4, 2},
                    Case{"random_flows", "random", 24, 24, 0.7, 0.5, 0.3, 4, 2},
                    Case{"random_depth3_ramp1", "random", 19, 23, 0.9, 0.6, 0.1, 3, 1},
                    Case{"row_broadcast", "row-broadcast", 18, 9, 0.5, 0.7, 0.0, 4, 2},
                    Case{"column_broadcast", "column-broadcast", 9, 18, 0.5, 0.7, 0.0, 2, 2},
                    Case{"random_depth7", "random", 16, 16, 1.0, 0.8, 0.0, 7, 2},
                    // Control wavelets carried along a multicast tree and a crossing stream.
                    Case{"control_wavelets", "file", 16, 6, 1.0, 0.6, 0.1, 4, 2,
                         "route 0 2 5 R E\nroute 1 2 5 W E+R\nroute 2 2 5 W E+N\nroute 2 1 5 S R\nroute 3 2 5 W R\n"
                         "flow 0 2 5 1.0 0 3\n"
                         "route 2 4 6 R N\nroute 2 3 6 S N\nroute 2 2 6 S N\nroute 2 1 6 S N\nroute 2 0 6 S R\n"
                         "flow 2 4 6 0.7 0 2\n"}),
    [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

// Through Fabric (allow_vector, as `wafersim fabric` runs): the stats a run writes, read in the
// middle and after a warm-up reset, are those of the router engine, byte for byte, with the
// vector engine on 1, 2 and 3 threads.
TEST(VectorEngine, FabricStatsMatchTheRoutersAcrossAWarmupReset) {
  for (const std::string pattern : {"neighbour", "random", "row-broadcast"}) {
    SCOPED_TRACE(pattern);
    auto run = [&](bool vector, int threads) {
      HwConfig hw = test::small_config(21, 14);
      hw.sim.seed = 5;
      hw.sim.threads = threads;
      hw.sim.threaded_visits = 0;  // every cycle threaded (the default runs small cycles on one)
      hw.sim.watchdog_cycles = 50;
      auto f = std::make_unique<Fabric>(hw);
      TrafficConfig tc;
      tc.pattern = pattern;
      tc.rate = 0.9;
      tc.drain_prob = 0.6;
      tc.hops = 4;
      tc.record = true;
      program_traffic(*f, tc);
      if (vector) f->allow_vector();
      f->finalize();
      EXPECT_EQ(f->vector_engine(), vector);
      std::string out;
      f->run(300);
      out += fabric_stats_json(*f).dump() + "\n";
      f->reset_stats();
      f->run(500);
      out += fabric_stats_json(*f).dump() + "\n";
      out += test::router_counters(*f);
      for (const Router* r : f->routers()) out += std::to_string(r->occupancy()) + " ";
      out += "\n";
      const FabricTotals t = f->totals();
      out += std::to_string(t.injected) + " " + std::to_string(t.delivered) + " " + std::to_string(t.in_flight) + " " +
             std::to_string(t.multicast_copies) + " " + std::to_string(t.forwarded) + "\n";
      for (const auto& pa : test::traffic_agents(*f)) out += std::to_string(pa.agent->log().size()) + " ";
      return out;
    };
    const std::string routers = run(false, 1);
    for (int threads : {1, 2, 3}) EXPECT_EQ(run(true, threads), routers) << threads << " threads";
  }
}

// The watchdog stops a vector-engine run where it stops the routers, with the same message.
TEST(VectorEngine, DeadlockIsReportedAsByTheRouters) {
  auto run = [](bool vector) {
    HwConfig hw = test::small_config(10, 3);
    hw.sim.watchdog_cycles = 300;
    Fabric f(hw);
    auto src = std::make_unique<TrafficAgent>(1 * 10 + 1, TrafficAgentOptions{});
    src->add_flow({1, 1.0, 200});
    src->add_flow({2, 1.0, 200});
    f.attach_agent(1, 1, std::move(src));
    TrafficAgentOptions o;
    o.never_drain = 1u << 1;  // color 1 is never taken: its buffers fill and stay full
    auto d = std::make_unique<TrafficAgent>(1 * 10 + 8, o);
    d->add_receive(1);
    d->add_receive(2);
    f.attach_agent(8, 1, std::move(d));
    for (int c : {1, 2}) {
      f.set_route(1, 1, c, ColorRoute::simple(port_bit(kRamp), port_bit(kEast)));
      for (int x = 2; x < 8; ++x) f.set_route(x, 1, c, ColorRoute::simple(port_bit(kWest), port_bit(kEast)));
      f.set_route(8, 1, c, ColorRoute::simple(port_bit(kWest), port_bit(kRamp)));
    }
    if (vector) f.allow_vector();
    f.finalize();
    EXPECT_EQ(f.vector_engine(), vector);
    try {
      f.run(5000);
    } catch (const DeadlockError& e) {
      return std::string(e.what()) + " at " + std::to_string(f.cycle());
    }
    return std::string("no deadlock");
  };
  const std::string routers = run(false);
  EXPECT_NE(routers.find("wafer.pe_8_1"), std::string::npos) << routers;
  EXPECT_EQ(run(true), routers);
}

// A fabric where few PEs route anything stays with the routers' own visits, which skip idle
// routers (the engine would step and keep arrays for every PE of its blocks).
TEST(VectorEngine, SparseFabricStaysWithTheRouters) {
  for (int flows : {1, 400}) {
    HwConfig hw = test::small_config(48, 48);
    Fabric f(hw);
    TrafficConfig tc;
    tc.pattern = "random";
    tc.flows = flows;
    program_traffic(f, tc);
    f.allow_vector();
    f.finalize();
    EXPECT_EQ(f.vector_engine(), flows > 1) << flows << " flows, " << f.routers().size() << " routers";
  }
}

TEST(VectorFabric, SaysWhatItCannotStep) {
  HwConfig hw = test::small_config(8, 8);
  hw.router.hop_latency = 2;
  Fabric f(hw);
  EXPECT_EQ(VectorFabric::supported(f), "router.hop_latency is not 1");
  EXPECT_THROW(VectorFabric v(f), ConfigError);
  HwConfig merge = test::small_config(8, 8);
  Fabric g(merge);
  TrafficConfig tc;
  tc.pattern = "reduce";  // chains whose colors merge two input ports
  program_traffic(g, tc);
  EXPECT_NE(VectorFabric::supported(g).find("merges input ports"), std::string::npos) << VectorFabric::supported(g);
}

}  // namespace
}  // namespace wafersim
