// Whole-fabric behaviour: scoreboards under random backpressure, isolation of colors,
// conservation, determinism across threads and visit orders, deadlock detection, and the CLI.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <sys/wait.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "app/fabric_cmd.h"
#include "hw/fabric.h"
#include "hw/fabric_stats.h"
#include "hw/traffic_agent.h"
#include "hw/traffic_gen.h"
#include "test_support.h"

namespace wafersim {
namespace {

using test::pe_id;

using test::E;
using test::N;
using test::R;
using test::S;
using test::W;

// ---------------------------------------------------------------------------------------------
// Random backpressure on every endpoint: receivers take an arrival with probability 0.4 per
// cycle, senders hold back with probability 0.3. With finite counts everything must arrive,
// once, in order per (source, color).

struct BackpressureCase {
  std::string pattern;
  uint64_t count;
};

void PrintTo(const BackpressureCase& c, std::ostream* os) { *os << c.pattern << " count " << c.count; }

class RandomBackpressure : public testing::TestWithParam<BackpressureCase> {};

TEST_P(RandomBackpressure, ScoreboardCleanAfterDraining) {
  const BackpressureCase p = GetParam();
  HwConfig hw = test::small_config(16, 16);
  hw.sim.seed = 11;
  Fabric f(hw);
  TrafficConfig tc;
  tc.pattern = p.pattern;
  tc.count = p.count;
  tc.rate = 0.8;
  tc.flows = 200;
  tc.hops = 3;
  tc.drain_prob = 0.4;
  tc.stall_prob = 0.3;
  tc.record = true;
  const TrafficPlan plan = program_traffic(f, tc);
  ASSERT_GT(plan.flows, 0);

  ASSERT_TRUE(test::run_until_idle(f, 60000)) << "did not drain; totals in flight " << f.totals().in_flight;

  test::Scoreboard sb(f);
  EXPECT_TRUE(sb.in_order(p.count));
  EXPECT_EQ(sb.seqs.size(), static_cast<size_t>(plan.flows)) << "every flow reaches exactly one receiver";
  EXPECT_EQ(sb.arrivals, static_cast<uint64_t>(plan.flows) * p.count);
  uint64_t sent = 0;
  for (const auto& pa : test::traffic_agents(f)) sent += pa.agent->sent();
  EXPECT_EQ(sent, sb.arrivals);
  const FabricTotals t = f.totals();
  EXPECT_EQ(t.injected, sent);
  EXPECT_EQ(t.delivered, sent);
  EXPECT_EQ(t.in_flight, 0u);
  EXPECT_EQ(t.multicast_copies, 0u);
}

INSTANTIATE_TEST_SUITE_P(Patterns, RandomBackpressure,
                         testing::Values(BackpressureCase{"random", 40}, BackpressureCase{"neighbour", 30},
                                         BackpressureCase{"reduce", 20}),
                         [](const testing::TestParamInfo<BackpressureCase>& info) { return info.param.pattern; });

// Multicast under backpressure: each receiver of a row broadcast sees every wavelet once, in order.
TEST(RandomBackpressureMulticast, RowBroadcastScoreboard) {
  HwConfig hw = test::small_config(12, 6);
  Fabric f(hw);
  TrafficConfig tc;
  tc.pattern = "row-broadcast";
  tc.count = 60;
  tc.drain_prob = 0.5;
  tc.stall_prob = 0.3;
  tc.record = true;
  program_traffic(f, tc);
  ASSERT_TRUE(test::run_until_idle(f, 30000));
  test::Scoreboard sb(f);
  EXPECT_TRUE(sb.in_order(tc.count));
  EXPECT_EQ(sb.seqs.size(), 6u * 11u);  // 11 receivers per row
  const FabricTotals t = f.totals();
  EXPECT_EQ(t.injected, 6u * 60u);
  EXPECT_EQ(t.delivered, 6u * 11u * 60u);
  EXPECT_EQ(t.multicast_copies, t.delivered - t.injected);
}

// ---------------------------------------------------------------------------------------------
// A stuck receiver on one color does not stop another color on the same links and endpoints.
// (1,1) sends colors 1 and 2 (200 each) East to (8,1), which never drains color 1.

struct StuckColorFabric {
  std::unique_ptr<Fabric> f;
  TrafficAgent* dst = nullptr;
  static constexpr uint64_t kCount = 200;

  explicit StuckColorFabric(uint64_t watchdog) {
    HwConfig hw = test::small_config(10, 3);
    hw.sim.watchdog_cycles = watchdog;
    f = std::make_unique<Fabric>(hw);
    auto src = std::make_unique<TrafficAgent>(pe_id(*f, 1, 1), TrafficAgentOptions{});
    src->add_flow({1, 1.0, kCount});
    src->add_flow({2, 1.0, kCount});
    f->attach_agent(1, 1, std::move(src));
    TrafficAgentOptions o;
    o.record = true;
    o.never_drain = 1u << 1;
    auto d = std::make_unique<TrafficAgent>(pe_id(*f, 8, 1), o);
    d->add_receive(1);
    d->add_receive(2);
    dst = d.get();
    f->attach_agent(8, 1, std::move(d));
    for (int c : {1, 2}) {
      f->set_route(1, 1, c, ColorRoute::simple(R, E));
      for (int x = 2; x < 8; ++x) f->set_route(x, 1, c, ColorRoute::simple(W, E));
      f->set_route(8, 1, c, ColorRoute::simple(W, R));
    }
  }

  std::vector<uint32_t> seqs(int color) const {
    std::vector<uint32_t> v;
    for (const auto& a : dst->log()) {
      if (a.w.color == color) v.push_back(payload_seq(a.w.payload));
    }
    return v;
  }
};

TEST(StuckReceiver, OtherColorCompletesWithWatchdogOff) {
  StuckColorFabric s(/*watchdog=*/0);
  s.f->run(3000);
  const auto got = s.seqs(2);
  ASSERT_EQ(got.size(), StuckColorFabric::kCount);
  for (uint32_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], i);
  EXPECT_TRUE(s.seqs(1).empty());
  EXPECT_EQ(s.dst->consumed(), StuckColorFabric::kCount);
  // Color 1 fills one buffer in each of the 8 routers (4 deep) and the receiver's queue (4 deep).
  const FabricTotals t = s.f->totals();
  const int depth = s.f->config().router.buffer_depth;
  EXPECT_EQ(t.in_flight, 8u * depth);
  EXPECT_EQ(t.delivered, StuckColorFabric::kCount + TrafficAgentOptions{}.queue_depth);
  for (int x = 1; x <= 8; ++x) {
    EXPECT_EQ(s.f->router(x, 1)->buffered(x == 1 ? kRamp : kWest, 1), depth) << "router " << x;
    EXPECT_EQ(s.f->router(x, 1)->buffered(x == 1 ? kRamp : kWest, 2), 0) << "router " << x;
  }
}

// With the watchdog on, the other color still finishes first; then the stuck color is reported.
TEST(StuckReceiver, WatchdogReportsOnlyTheStuckColorAfterOthersFinish) {
  StuckColorFabric s(/*watchdog=*/300);
  std::string msg;
  try {
    s.f->run(5000);
  } catch (const DeadlockError& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty()) << "no DeadlockError";
  EXPECT_EQ(s.seqs(2).size(), StuckColorFabric::kCount);
  EXPECT_NE(msg.find("wafer.pe_8_1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("color 1 "), std::string::npos) << msg;
  EXPECT_EQ(msg.find("color 2 "), std::string::npos) << msg;
}

// ---------------------------------------------------------------------------------------------
// Conservation: injected + multicast_copies == delivered + in_flight after every cycle.

::testing::AssertionResult conserved(const Fabric& f) {
  const FabricTotals t = f.totals();
  if (t.injected + t.multicast_copies == t.delivered + t.in_flight) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "cycle " << t.cycles << ": injected " << t.injected << " + copies "
                                       << t.multicast_copies << " != delivered " << t.delivered << " + in flight "
                                       << t.in_flight;
}

TEST(Conservation, NeighbourSaturatedEveryCycle) {
  Fabric f(test::small_config(16, 16));
  TrafficConfig tc;
  tc.pattern = "neighbour";
  tc.rate = 1.0;
  program_traffic(f, tc);
  for (int i = 0; i < 300; ++i) {
    f.step();
    ASSERT_TRUE(conserved(f));
  }
  const FabricTotals t = f.totals();
  EXPECT_GT(t.delivered, 0u);
  EXPECT_GT(t.in_flight, 0u);
}

TEST(Conservation, MixedPatternWithMulticastEveryCycle) {
  HwConfig hw = test::small_config(16, 16);
  hw.sim.seed = 5;
  Fabric f(hw);
  TrafficConfig tc;
  tc.pattern = "mixed";
  tc.rate = 1.0;
  tc.flows = 150;
  tc.drain_prob = 0.7;
  tc.stall_prob = 0.1;
  program_traffic(f, tc);
  for (int i = 0; i < 400; ++i) {
    f.step();
    ASSERT_TRUE(conserved(f));
  }
  const FabricTotals t = f.totals();
  EXPECT_GT(t.multicast_copies, 0u);
  EXPECT_GT(t.delivered, t.injected);  // broadcasts deliver more than they inject
}

// ---------------------------------------------------------------------------------------------
// Determinism: threads and visit order never change results.

struct Snapshot {
  std::string stats;
  std::string routers;  // every router's port counters and peaks
  FabricTotals totals;
  std::vector<std::vector<TrafficAgent::Arrival>> logs;
  std::vector<uint64_t> sent;
};

Snapshot run_snapshot(int threads, VisitOrder order, const std::string& pattern = "random", bool straight = true,
                      uint64_t seed = 42) {
  HwConfig hw = test::small_config(24, 24);
  hw.sim.seed = seed;
  hw.sim.threads = threads;
  hw.sim.threaded_visits = 0;  // every cycle threaded (the default runs small cycles on one)
  hw.sim.visit_order = order;
  hw.router.straight_path = straight;
  Fabric f(hw);
  TrafficConfig tc;
  tc.pattern = pattern;
  tc.rate = 0.7;
  tc.drain_prob = 0.5;
  tc.stall_prob = 0.3;
  tc.record = true;
  program_traffic(f, tc);
  f.run(1500);
  Snapshot s;
  s.stats = fabric_stats_json(f).dump();
  s.routers = test::router_counters(f);
  s.totals = f.totals();
  for (const auto& pa : test::traffic_agents(f)) {
    s.logs.push_back(pa.agent->log());
    s.sent.push_back(pa.agent->sent());
  }
  return s;
}

// Every endpoint took the same wavelets in the same cycles.
void expect_same_arrivals(const std::vector<std::vector<TrafficAgent::Arrival>>& got,
                          const std::vector<std::vector<TrafficAgent::Arrival>>& ref) {
  ASSERT_EQ(got.size(), ref.size());
  for (size_t i = 0; i < ref.size(); ++i) {
    ASSERT_EQ(got[i].size(), ref[i].size()) << "agent " << i;
    for (size_t j = 0; j < ref[i].size(); ++j) {
      ASSERT_EQ(got[i][j].cycle, ref[i][j].cycle) << "agent " << i << " arrival " << j;
      ASSERT_EQ(got[i][j].w, ref[i][j].w) << "agent " << i << " arrival " << j;
    }
  }
}

void expect_same(const Snapshot& got, const Snapshot& ref, uint64_t min_delivered = 1000) {
  ASSERT_GT(ref.totals.delivered, min_delivered);
  EXPECT_EQ(got.stats, ref.stats);
  EXPECT_EQ(got.routers, ref.routers);
  EXPECT_EQ(got.totals.cycles, ref.totals.cycles);
  EXPECT_EQ(got.totals.injected, ref.totals.injected);
  EXPECT_EQ(got.totals.delivered, ref.totals.delivered);
  EXPECT_EQ(got.totals.in_flight, ref.totals.in_flight);
  EXPECT_EQ(got.totals.multicast_copies, ref.totals.multicast_copies);
  EXPECT_EQ(got.totals.forwarded, ref.totals.forwarded);
  EXPECT_EQ(got.sent, ref.sent);
  expect_same_arrivals(got.logs, ref.logs);
}

class Determinism : public testing::TestWithParam<std::tuple<int, VisitOrder>> {};

// Every other thread count and visit order against one thread visiting forward (the reference
// itself is not among them: compared with itself it could not fail).
TEST_P(Determinism, SameResultsAsOneThreadForward) {
  const auto [threads, order] = GetParam();
  expect_same(run_snapshot(threads, order), run_snapshot(1, VisitOrder::kForward));
}

INSTANTIATE_TEST_SUITE_P(
    ThreadsAndOrders, Determinism,
    testing::Values(std::make_tuple(1, VisitOrder::kReverse),
                    std::make_tuple(1, VisitOrder::kShuffle), std::make_tuple(2, VisitOrder::kForward),
                    std::make_tuple(2, VisitOrder::kReverse), std::make_tuple(2, VisitOrder::kShuffle),
                    std::make_tuple(3, VisitOrder::kForward), std::make_tuple(3, VisitOrder::kReverse),
                    std::make_tuple(3, VisitOrder::kShuffle)),
    [](const testing::TestParamInfo<Determinism::ParamType>& info) {
      return "threads" + std::to_string(std::get<0>(info.param)) + "_" + visit_order_name(std::get<1>(info.param));
    });

// What the determinism cases compare tells runs apart: the same fabric and traffic with another
// seed (other random flows, drains and stalls) differs in each part of the snapshot, so a
// thread count or visit order that changed the run would be caught.
TEST(DeterminismSnapshot, AnotherSeedGivesAnotherSnapshot) {
  const Snapshot a = run_snapshot(1, VisitOrder::kForward), b = run_snapshot(1, VisitOrder::kForward, "random", true, 43);
  ASSERT_GT(a.totals.delivered, 1000u);
  EXPECT_NE(a.stats, b.stats);
  EXPECT_NE(a.routers, b.routers);
  EXPECT_NE(a.sent, b.sent);
  EXPECT_NE(a.totals.delivered, b.totals.delivered);
  bool same_arrivals = a.logs.size() == b.logs.size();
  for (size_t i = 0; same_arrivals && i < a.logs.size(); ++i) {
    same_arrivals = a.logs[i].size() == b.logs[i].size();
    for (size_t j = 0; same_arrivals && j < a.logs[i].size(); ++j) {
      same_arrivals = a.logs[i][j].cycle == b.logs[i][j].cycle && a.logs[i][j].w == b.logs[i][j].w;
    }
  }
  EXPECT_FALSE(same_arrivals);
}

// Threads share the rows where the work is: on a tall fabric whose traffic uses only its top
// rows, every thread's stripe but the last starts inside them (an even split of the rows would
// leave one thread all of it), and results are still those of one thread.
TEST(Threads, StripesFollowTheRoutedRowsAndChangeNoResult) {
  auto run = [](int threads, std::vector<int>* stripes) {
    HwConfig hw = test::small_config(16, 96);
    hw.sim.seed = 7;
    hw.sim.threads = threads;
    hw.sim.threaded_visits = 0;  // every cycle threaded (the default runs small cycles on one)
    Fabric f(hw);
    TrafficConfig tc;
    tc.pattern = "random";
    tc.flows = 24;
    tc.rate = 0.6;
    tc.drain_prob = 0.7;
    tc.region = "0:15,0:11";
    tc.record = true;
    program_traffic(f, tc);
    f.run(800);
    *stripes = f.stripes();
    Snapshot s;
    s.stats = fabric_stats_json(f).dump();
    s.totals = f.totals();
    for (const auto& pa : test::traffic_agents(f)) {
      s.logs.push_back(pa.agent->log());
      s.sent.push_back(pa.agent->sent());
    }
    return s;
  };
  std::vector<int> one, two, three;
  const Snapshot ref = run(1, &one);
  EXPECT_EQ(one, (std::vector<int>{0, 96}));
  for (auto [threads, stripes] : {std::pair<int, std::vector<int>*>{2, &two}, {3, &three}}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    const Snapshot got = run(threads, stripes);
    ASSERT_EQ(stripes->size(), static_cast<size_t>(threads) + 1);
    EXPECT_EQ(stripes->front(), 0);
    EXPECT_EQ(stripes->back(), 96);
    for (int t = 1; t < threads; ++t) {
      EXPECT_GT((*stripes)[static_cast<size_t>(t)], (*stripes)[static_cast<size_t>(t) - 1]);
      EXPECT_LE((*stripes)[static_cast<size_t>(t)], 12);  // inside the rows the flows use
    }
    expect_same(got, ref, 500);
  }
}

// The straight-on path of routers without a core (Router::step) changes nothing against the
// general path alone, under random backpressure: traffic, every counter and every peak.
class StraightPath : public testing::TestWithParam<std::string> {};

TEST_P(StraightPath, SameResultsAsTheGeneralPathAlone) {
  expect_same(run_snapshot(1, VisitOrder::kForward, GetParam(), true),
              run_snapshot(1, VisitOrder::kForward, GetParam(), false), 300);  // the hotspot's channel: 386
}

INSTANTIATE_TEST_SUITE_P(Patterns, StraightPath,
                         testing::Values("random", "mixed", "reduce", "column-broadcast", "hotspot"),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// ---------------------------------------------------------------------------------------------
// Deadlock: color 5 runs around a ring (1,1) -E-> (2,1) -S-> (2,2) -W-> (1,2) -N-> (1,1) with no
// exit, and (1,1) also takes new wavelets from its ramp. Each wavelet stays in the ring forever,
// so the source fills every ring buffer; then each head waits for the full buffer ahead of it, a
// cyclic dependency, and nothing can move again.

TEST(Deadlock, RouteLoopIsReportedWithPesAndColor) {
  HwConfig hw = test::small_config(6, 6);
  hw.sim.watchdog_cycles = 64;
  Fabric f(hw);
  const int c = 5;
  auto src = std::make_unique<TrafficAgent>(pe_id(f, 1, 1), TrafficAgentOptions{});
  src->add_flow({c, 1.0, 0});
  f.attach_agent(1, 1, std::move(src));
  f.set_route(1, 1, c, ColorRoute::simple(R | S, E));
  f.set_route(2, 1, c, ColorRoute::simple(W, S));
  f.set_route(2, 2, c, ColorRoute::simple(N, W));
  f.set_route(1, 2, c, ColorRoute::simple(E, N));
  std::string msg;
  try {
    f.run(2000);
  } catch (const DeadlockError& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty()) << "the ring did not deadlock within 2000 cycles";
  EXPECT_LT(f.cycle(), 2000u);
  for (const char* pe : {"wafer.pe_1_1", "wafer.pe_2_1", "wafer.pe_2_2", "wafer.pe_1_2"}) {
    EXPECT_NE(msg.find(pe), std::string::npos) << pe << " missing from:\n" << msg;
  }
  EXPECT_NE(msg.find("color 5"), std::string::npos) << msg;
  const int depth = hw.router.buffer_depth;
  // Four ring buffers and the source's ramp buffer, all full.
  EXPECT_EQ(f.totals().in_flight, 5u * depth);
  EXPECT_EQ(f.router(2, 1)->buffered(kWest, c), depth);
  EXPECT_EQ(f.router(1, 1)->buffered(kRamp, c), depth);
}

TEST(Deadlock, WatchdogOffNeverThrows) {
  HwConfig hw = test::small_config(6, 6);
  hw.sim.watchdog_cycles = 0;
  Fabric f(hw);
  auto src = std::make_unique<TrafficAgent>(pe_id(f, 1, 1), TrafficAgentOptions{});
  src->add_flow({0, 1.0, 0});
  f.attach_agent(1, 1, std::move(src));
  f.set_route(1, 1, 0, ColorRoute::simple(R | S, E));
  f.set_route(2, 1, 0, ColorRoute::simple(W, S));
  f.set_route(2, 2, 0, ColorRoute::simple(N, W));
  f.set_route(1, 2, 0, ColorRoute::simple(E, N));
  EXPECT_NO_THROW(f.run(500));
  EXPECT_EQ(f.totals().in_flight, 5u * hw.router.buffer_depth);
}

// ---------------------------------------------------------------------------------------------
// The CLI. run_fabric_command elaborates and runs a SystemC model, which can happen once per
// process: ctest runs every test in its own process; a direct run of several of these tests in
// one process skips the later ones.

bool claim_systemc() {
  static bool used = false;
  const bool first = !used;
  used = true;
  return first;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream is(text);
  for (std::string line; std::getline(is, line);) lines.push_back(line);
  return lines;
}

// Two streams that pass each other along a column of routers between PEs: where both arrive in
// the same cycle the routers' straight-on path sends both (a peak of two wavelets, as the
// general path counts it), with the same arrivals, counters and peaks as the general path alone,
// with a receiver that keeps up and with one that backs its stream up.
TEST(Stats, StreamsPassingEachOtherMatchTheGeneralPath) {
  for (double drain : {1.0, 0.3}) {
    auto run = [drain](bool straight) {
      const int len = 12;
      HwConfig hw = test::small_config(1, len);
      hw.router.straight_path = straight;
      Fabric f(hw);
      TrafficAgentOptions o = test::recording();
      o.drain_prob = drain;
      TrafficAgent* top = test::add_agent(f, 0, 0, o);
      TrafficAgent* bottom = test::add_agent(f, 0, len - 1, o);
      top->add_flow({3, 1.0, 60});
      top->add_receive(4);
      bottom->add_flow({4, 1.0, 60});
      bottom->add_receive(3);
      f.set_route(0, 0, 3, ColorRoute::simple(R, S));
      f.set_route(0, 0, 4, ColorRoute::simple(S, R));
      f.set_route(0, len - 1, 4, ColorRoute::simple(R, N));
      f.set_route(0, len - 1, 3, ColorRoute::simple(N, R));
      for (int y = 1; y < len - 1; ++y) {
        f.set_route(0, y, 3, ColorRoute::simple(N, S));
        f.set_route(0, y, 4, ColorRoute::simple(S, N));
      }
      EXPECT_TRUE(test::run_until_idle(f, 20000));
      std::ostringstream os;
      for (const Router* r : f.routers()) {
        os << r->y() << ":";
        for (int p = 0; p < kNumPorts; ++p) os << " " << r->s_forwarded[p] << "/" << r->stall_cycles(p, f.cycle());
        os << " peak " << r->s_peak_occupancy << " " << r->peak_of_color(3) << " " << r->peak_of_color(4) << "\n";
      }
      os << "cycles " << f.cycle() << " delivered " << f.totals().delivered;
      for (const auto& pa : test::traffic_agents(f)) {
        for (const auto& a : pa.agent->log()) os << " " << a.cycle << ":" << a.w.payload;
      }
      return os.str();
    };
    const std::string fast = run(true);
    EXPECT_EQ(fast, run(false)) << "drain " << drain;
    if (drain == 1.0) {
      EXPECT_NE(fast.find(" peak 2 1 1"), std::string::npos) << fast;  // where they met
    }
  }
}

// A chain of routers that only forward: each wavelet is forwarded once per hop, in order; with
// a receiver that keeps up nothing waits (peaks of one wavelet, no stalls, one arrival per
// cycle); with a slow one the chain backs up to its buffers' depth and stalls, and still loses
// nothing. (Routers between PEs take a shortcut for a wavelet that comes into an empty router
// and goes straight on; these counts are what the general path gives.)
TEST(Stats, ForwardingChainCountsEveryHopOnce) {
  for (double drain : {1.0, 0.25}) {
    const int len = 10, color = 3;
    const uint64_t count = 50;
    HwConfig hw = test::small_config(len, 1);
    Fabric f(hw);
    test::add_agent(f, 0, 0)->add_flow({color, 1.0, count});
    f.set_route(0, 0, color, ColorRoute::simple(R, E));
    for (int x = 1; x < len - 1; ++x) f.set_route(x, 0, color, ColorRoute::simple(W, E));
    TrafficAgentOptions o = test::recording();
    o.drain_prob = drain;
    TrafficAgent* sink = test::add_agent(f, len - 1, 0, o);
    sink->add_receive(color);
    f.set_route(len - 1, 0, color, ColorRoute::simple(W, R));
    ASSERT_TRUE(test::run_until_idle(f, 10000));
    ASSERT_EQ(sink->log().size(), count);
    for (uint64_t i = 0; i < count; ++i) EXPECT_EQ(payload_seq(sink->log()[i].w.payload), i);
    for (int x = 1; x < len - 1; ++x) {
      const Router* r = f.router(x, 0);
      EXPECT_EQ(r->s_forwarded[kEast], count) << "x " << x;
      EXPECT_EQ(r->occupancy(), 0u);
      if (drain == 1.0) {
        EXPECT_EQ(r->stall_cycles(kEast, f.cycle()), 0u) << "x " << x;
        EXPECT_EQ(r->peak_of_color(color), 1u) << "x " << x;
        EXPECT_EQ(r->s_peak_occupancy, 1u) << "x " << x;
      }
    }
    if (drain == 1.0) {
      for (uint64_t i = 1; i < count; ++i) EXPECT_EQ(sink->log()[i].cycle, sink->log()[i - 1].cycle + 1) << i;
    } else {
      const Router* r = f.router(len - 2, 0);
      EXPECT_GT(r->stall_cycles(kEast, f.cycle()), 0u);
      EXPECT_EQ(r->peak_of_color(color), static_cast<uint32_t>(hw.router.buffer_depth));
    }
    EXPECT_EQ(f.color_counters()[color].forwarded, count * len);  // len - 1 links and the ramp
    EXPECT_EQ(f.totals().in_flight, 0u);
  }
}

// A router whose head waits on another PE sleeps until a credit comes; the cycles it sleeps are
// still stall cycles of its port and color (what a visit every cycle would count), also when the
// stats are read while it sleeps. A stuck receiver: the link into it stalls every cycle once its
// buffers are full, whatever the router's sleep.
TEST(Stats, StallCyclesCountSleptCycles) {
  // A sender at full rate at x = 0, forwarders at x = 1, 2 and a receiver at x = 3.
  const int color = 1;
  auto chain = [&](Fabric& f, const TrafficAgentOptions& receiver) {
    test::add_agent(f, 0, 0)->add_flow({color, 1.0, 0});
    f.set_route(0, 0, color, ColorRoute::simple(R, E));
    for (int x = 1; x < 3; ++x) f.set_route(x, 0, color, ColorRoute::simple(W, E));
    test::add_agent(f, 3, 0, receiver)->add_receive(color);
    f.set_route(3, 0, color, ColorRoute::simple(W, R));
  };
  for (uint64_t cycles : {100u, 1000u}) {
    HwConfig hw = test::small_config(4, 1);
    hw.sim.watchdog_cycles = 0;  // the stuck receiver is the point
    Fabric f(hw);
    TrafficAgentOptions o;
    o.never_drain = 1u << color;
    chain(f, o);
    f.run(cycles);
    // Every router's head stalls from the cycle its downstream filled up to the end. The sender
    // offers wavelet k in cycle k; it is ready at router x from k + r + x h (ramp_latency r = 2,
    // hop_latency h = 1). The receiver's queue takes the first q = 4 (queue_depth), so router 3's
    // ramp stalls from s_3 = q + r + 3h = 9 on. Router x's East port stalls d - h cycles after
    // router x + 1 started to (buffer_depth d = 4: the stalled head, sent one hop earlier, and
    // the d - 1 it still takes): s_2 = 12, s_1 = 15, s_0 = 18; then in every cycle to the end.
    const RouterConfig& rc = hw.router;
    const uint64_t r = static_cast<uint64_t>(rc.ramp_latency), h = static_cast<uint64_t>(rc.hop_latency),
                   d = static_cast<uint64_t>(rc.buffer_depth), q = static_cast<uint64_t>(o.queue_depth);
    uint64_t start = q + r + 3 * h;
    const uint64_t ramp = f.router(3, 0)->stall_cycles(kRamp, f.cycle());
    EXPECT_EQ(ramp, cycles - start) << cycles << " cycles";
    uint64_t sum = 0;
    for (int x = 2; x >= 0; --x) {
      start += d - h;
      const uint64_t stall = f.router(x, 0)->stall_cycles(kEast, f.cycle());
      EXPECT_EQ(stall, cycles - start) << "x " << x << ", " << cycles << " cycles";
      sum += stall;
    }
    const nlohmann::json j = fabric_stats_json(f);
    EXPECT_EQ(j["ports"]["E"]["stall_cycles"].get<uint64_t>(), sum);
    // The color's stall cycles are those of the ports it stalled on: the three East ports and the ramp.
    EXPECT_EQ(f.color_counters()[color].stall, sum + ramp);
  }
  // A slow receiver: the routers sleep and wake again and again. From the cycle its first head is
  // ready, r + x h (the sender offers one in every cycle from cycle 0), router x has a head for
  // its East port (router 3 for its ramp) in every cycle, which either leaves or stalls:
  // forwarded + stall cycles is every cycle from then on.
  HwConfig hw = test::small_config(4, 1);
  Fabric f(hw);
  TrafficAgentOptions o;
  o.drain_prob = 0.3;
  chain(f, o);
  const uint64_t cycles = 2000;
  f.run(cycles);
  for (int x = 0; x < 4; ++x) {
    const Router* r = f.router(x, 0);
    const int p = x < 3 ? kEast : kRamp;
    const uint64_t n = r->s_forwarded[p] + r->stall_cycles(p, f.cycle());
    const uint64_t first = static_cast<uint64_t>(hw.router.ramp_latency + x * hw.router.hop_latency);
    EXPECT_EQ(n, cycles - first) << "x " << x << ": forwarded " << r->s_forwarded[p];
    EXPECT_GT(r->s_forwarded[p], cycles / 4) << "x " << x;  // the receiver takes 0.3 per cycle
  }
}

// Warm-up: after reset_stats() the port and color counters count only what follows, so a run of
// 100 + 100 cycles with a reset in between counts exactly the difference of the 200- and 100-cycle
// runs; totals keep counting from cycle 0 and the JSON says where the counters start.
TEST(Stats, WarmupResetCountsOnlyWhatFollows) {
  auto run = [](uint64_t cycles, bool reset_at_100) {
    HwConfig cfg = test::small_config(16, 16);
    auto f = std::make_unique<Fabric>(cfg);
    TrafficConfig tc;
    tc.pattern = "neighbour";
    tc.hops = 3;
    program_traffic(*f, tc);
    f->run(reset_at_100 ? 100 : cycles);
    if (reset_at_100) {
      f->reset_stats();
      f->run(cycles - 100);
    }
    return f;
  };
  const auto full = run(200, false), half = run(100, false), warm = run(200, true);
  const nlohmann::json jf = fabric_stats_json(*full), jh = fabric_stats_json(*half), jw = fabric_stats_json(*warm);
  for (const char* port : {"N", "S", "E", "W", "R"}) {
    EXPECT_EQ(jw["ports"][port]["forwarded"].get<uint64_t>(),
              jf["ports"][port]["forwarded"].get<uint64_t>() - jh["ports"][port]["forwarded"].get<uint64_t>())
        << port;
    EXPECT_EQ(jw["ports"][port]["stall_cycles"].get<uint64_t>(),
              jf["ports"][port]["stall_cycles"].get<uint64_t>() - jh["ports"][port]["stall_cycles"].get<uint64_t>())
        << port;
  }
  const auto cf = full->color_counters(), ch = half->color_counters(), cw = warm->color_counters();
  for (size_t c = 0; c < cf.size(); ++c) {
    EXPECT_EQ(cw[c].forwarded, cf[c].forwarded - ch[c].forwarded) << "color " << c;
    EXPECT_EQ(cw[c].stall, cf[c].stall - ch[c].stall) << "color " << c;
  }
  EXPECT_EQ(jw["counters_since_cycle"].get<uint64_t>(), 100u);
  EXPECT_EQ(jf["counters_since_cycle"].get<uint64_t>(), 0u);
  EXPECT_EQ(jw["totals"]["injected"], jf["totals"]["injected"]);
  EXPECT_EQ(jw["totals"]["delivered"], jf["totals"]["delivered"]);
}

TEST(Cli, SmallRunWritesStatsCsvAndConfig) {
  if (!claim_systemc()) GTEST_SKIP() << "SystemC already ran in this process; run under ctest";
  const std::string dir = test::test_tmp_dir() + "/out";
  std::ostringstream out, err;
  const int rc = run_fabric_command({"--fabric.width", "20", "--fabric.height", "12", "--sim.cycles", "300",
                                     "--traffic.flows", "40", "--stats.out", dir},
                                    out, err);
  ASSERT_EQ(rc, kExitOk) << err.str();
  EXPECT_NE(out.str().find("wrote"), std::string::npos) << out.str();

  const nlohmann::json j = nlohmann::json::parse(test::read_text(dir + "/stats.json"));
  EXPECT_EQ(j["cycles"], 300);
  EXPECT_EQ(j["fabric"]["width"], 20);
  EXPECT_EQ(j["fabric"]["height"], 12);
  EXPECT_GT(j["totals"]["delivered"].get<uint64_t>(), 0u);
  EXPECT_EQ(j["totals"]["injected"].get<uint64_t>() + j["totals"]["multicast_copies"].get<uint64_t>(),
            j["totals"]["delivered"].get<uint64_t>() + j["totals"]["in_flight"].get<uint64_t>());

  const auto rows = split_lines(test::read_text(dir + "/pe_forwarded.csv"));
  ASSERT_EQ(rows.size(), 12u) << "one row per y";
  uint64_t sum = 0;
  for (const auto& row : rows) {
    std::istringstream is(row);
    int cols = 0;
    for (std::string cell; std::getline(is, cell, ',');) {
      ++cols;
      sum += std::stoull(cell);
    }
    EXPECT_EQ(cols, 20) << "one column per x: " << row;
  }
  EXPECT_EQ(sum, j["totals"]["forwarded"].get<uint64_t>());

  const std::string ini = test::read_text(dir + "/config.ini");
  EXPECT_NE(ini.find("[fabric]"), std::string::npos) << ini;
  EXPECT_NE(ini.find("width = 20"), std::string::npos) << ini;
  EXPECT_NE(ini.find("cycles = 300"), std::string::npos) << ini;
  EXPECT_TRUE(std::filesystem::exists(dir + "/summary.txt"));
}

// Bad routes from the command line: a route file whose route leaves the fabric is a usage error
// (exit 2) naming the PE; a ring that fills up is a deadlock (exit 3) naming the stuck PEs.
TEST(Cli, RouteLeavingTheFabricExitsWithUsageError) {
  const std::string dir = test::test_tmp_dir();
  test::write_text(dir + "/edge.routes", "route 1 0 4 R N\nflow 1 0 4\n");
  std::ostringstream out, err;
  const int rc = run_fabric_command({"--fabric.width", "4", "--fabric.height", "4", "--traffic.pattern", "file",
                                     "--traffic.routes", dir + "/edge.routes", "--stats.out", dir + "/out"},
                                    out, err);
  EXPECT_EQ(rc, kExitUsage);
  EXPECT_NE(err.str().find("route leaves the fabric edge: wafer.pe_1_0 color 4 port N"), std::string::npos)
      << err.str();
}

TEST(Cli, RouteLoopExitsWithDeadlock) {
  if (!claim_systemc()) GTEST_SKIP() << "SystemC already ran in this process; run under ctest";
  const std::string dir = test::test_tmp_dir();
  test::write_text(dir + "/ring.routes",
                   "route 0 0 2 S+R E\nroute 1 0 2 W S\nroute 1 1 2 N W\nroute 0 1 2 E N\nflow 0 0 2 1.0\n");
  std::ostringstream out, err;
  const int rc = run_fabric_command({"--fabric.width", "2", "--fabric.height", "2", "--traffic.pattern", "file",
                                     "--traffic.routes", dir + "/ring.routes", "--sim.watchdog_cycles", "100",
                                     "--stats.out", dir + "/out"},
                                    out, err);
  EXPECT_EQ(rc, kExitDeadlock);
  for (const char* pe : {"wafer.pe_0_0", "wafer.pe_1_0", "wafer.pe_1_1", "wafer.pe_0_1"}) {
    EXPECT_NE(err.str().find(pe), std::string::npos) << pe << " not named:\n" << err.str();
  }
  EXPECT_NE(err.str().find("color 2"), std::string::npos) << err.str();
  EXPECT_TRUE(std::filesystem::exists(dir + "/out/stats.json")) << "stats of a stopped run are still written";
}

// SIGINT stops a run after the cycle in progress: the stats of the cycles run are written and
// the exit code is 130. (The binary, interrupted after 2 s of a run far longer than that.
// `--foreground`: without it timeout signals the binary and then its own process group, and
// under load the binary can take the two as an interrupt and a second one that quits at once.)
TEST(Cli, InterruptedRunWritesItsStats) {
  const std::string dir = test::test_tmp_dir() + "/interrupted";
  std::filesystem::remove_all(dir);
  const std::string line = "SYSTEMC_DISABLE_COPYRIGHT_MESSAGE=1 timeout --foreground --preserve-status -s INT 2 " +
                           std::string(WAFERSIM_BIN) +
                           " fabric --fabric.width 32 --fabric.height 32 --traffic.pattern neighbour --sim.cycles 1000000000 -o " +
                           dir + " > " + dir + ".out 2> " + dir + ".err";
  const int status = std::system(line.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal: the handler was not there";
  EXPECT_EQ(WEXITSTATUS(status), 130) << test::slurp(dir + ".err");
  EXPECT_NE(test::slurp(dir + ".err").find("interrupted at cycle"), std::string::npos) << test::slurp(dir + ".err");
  const nlohmann::json stats = nlohmann::json::parse(test::slurp(dir + "/stats.json"));
  EXPECT_GT(stats.at("cycles").get<uint64_t>(), 0u);
  EXPECT_LT(stats.at("cycles").get<uint64_t>(), 1000000000u);
  EXPECT_TRUE(std::filesystem::exists(dir + "/summary.txt"));
}

TEST(Cli, VcdTraceOfARegion) {
  if (!claim_systemc()) GTEST_SKIP() << "SystemC already ran in this process; run under ctest";
  const std::string dir = test::test_tmp_dir();
  std::ostringstream out, err;
  const int rc = run_fabric_command({"--fabric.width", "8", "--fabric.height", "8", "--sim.cycles", "60",
                                     "--traffic.pattern", "neighbour", "--traffic.hops", "1", "--stats.out",
                                     dir + "/out", "--trace.vcd", dir + "/t.vcd", "--trace.region", "0:1,0:1"},
                                    out, err);
  ASSERT_EQ(rc, kExitOk) << err.str();
  ASSERT_TRUE(std::filesystem::exists(dir + "/t.vcd")) << out.str();
  const std::string vcd = test::read_text(dir + "/t.vcd");
  EXPECT_NE(vcd.find("pe_1_1"), std::string::npos);
  EXPECT_NE(vcd.find("out_E"), std::string::npos);
  EXPECT_EQ(vcd.find("pe_2_2"), std::string::npos) << "only the region is traced";
  EXPECT_NE(vcd.find("#"), std::string::npos) << "no time steps in the trace";
  // The last simulated cycle (59, at 59 x 1176 ps) is in the trace, with its cycle number.
  const size_t last = vcd.find("#69384\n");
  ASSERT_NE(last, std::string::npos) << "last cycle missing from the trace";
  EXPECT_NE(vcd.find("b111011 ", last), std::string::npos) << "cycle 59 not recorded at its time";
}


// ---------------------------------------------------------------------------------------------
// Express lines (hw/router.h, ExpressRun): wavelets that cross a line of routers that only pass
// them straight on arrive where and when they do router by router, with the same credits,
// stalls (per router and port, and per color) and totals, under backpressure at the exits,
// with streams both ways, lines longer than kExpressSlots, lines cut by a crossing and by the
// thread stripes, and a direction with two colors (not an express line) beside one with one.
// Slow receivers back the lines up from their exits, some all the way to the first router,
// which then holds the wavelets behind until the line has room (its credit, worked out from
// the exits).

struct ExpressResult {
  std::vector<std::vector<TrafficAgent::Arrival>> logs;
  std::vector<uint64_t> sent;
  FabricTotals totals;
  std::string counters;  // per color forwarded/stall; per router and port stall cycles
  size_t lines = 0;
  uint64_t entry_stalls = 0;  // stall cycles of the first routers of the column's lower line and the row's eastbound one
};

ExpressResult run_express(bool express, int depth, int threads, double drain, uint64_t seed, uint64_t reset_at = 0,
                          VisitOrder order = VisitOrder::kForward) {
  const int w = 40, h = 90, mid = 20, row = 60;
  HwConfig hw = test::small_config(w, h);
  hw.router.buffer_depth = depth;
  hw.router.express = express;
  hw.sim.threads = threads;
  hw.sim.threaded_visits = 0;  // every cycle threaded (the default runs small cycles on one)
  hw.sim.visit_order = order;
  Fabric f(hw);
  f.allow_express();
  TrafficAgentOptions fast = test::recording(), slow = test::recording();
  slow.drain_prob = drain;
  slow.stall_prob = 0.2;
  slow.seed = seed;
  TrafficAgent* top = test::add_agent(f, 1, 0, fast);
  TrafficAgent* middle = test::add_agent(f, 1, mid, slow);
  TrafficAgent* bottom = test::add_agent(f, 1, h - 1, slow);
  TrafficAgent* west = test::add_agent(f, 0, row, fast);
  TrafficAgent* east = test::add_agent(f, w - 1, row, slow);
  top->add_flow({3, 1.0, 400});
  top->add_flow({8, 0.3, 100});
  top->add_receive(4);
  middle->add_receive(3);
  middle->add_receive(8);
  middle->add_flow({5, 0.9, 400});
  bottom->add_receive(5);
  bottom->add_flow({4, 0.8, 500, 7});
  west->add_flow({6, 1.0, 300});
  west->add_receive(7);
  east->add_flow({7, 0.6, 300});
  east->add_receive(6);
  f.set_route(1, 0, 3, ColorRoute::simple(R, S));
  f.set_route(1, 0, 8, ColorRoute::simple(R, S));
  f.set_route(1, 0, 4, ColorRoute::simple(S, R));
  for (int y = 1; y < mid; ++y) {
    f.set_route(1, y, 3, ColorRoute::simple(N, S));
    f.set_route(1, y, 8, ColorRoute::simple(N, S));
    f.set_route(1, y, 4, ColorRoute::simple(S, N));
  }
  f.set_route(1, mid, 3, ColorRoute::simple(N, R));
  f.set_route(1, mid, 8, ColorRoute::simple(N, R));
  f.set_route(1, mid, 5, ColorRoute::simple(R, S));
  f.set_route(1, mid, 4, ColorRoute::simple(S, N));
  for (int y = mid + 1; y < h - 1; ++y) {
    f.set_route(1, y, 5, ColorRoute::simple(N, S));
    f.set_route(1, y, 4, ColorRoute::simple(S, N));
  }
  f.set_route(1, h - 1, 5, ColorRoute::simple(N, R));
  f.set_route(1, h - 1, 4, ColorRoute::simple(R, N));
  f.set_route(0, row, 6, ColorRoute::simple(R, E));
  f.set_route(0, row, 7, ColorRoute::simple(E, R));
  for (int x = 1; x < w - 1; ++x) {
    f.set_route(x, row, 6, ColorRoute::simple(W, E));
    f.set_route(x, row, 7, ColorRoute::simple(E, W));
  }
  f.set_route(w - 1, row, 6, ColorRoute::simple(W, R));
  f.set_route(w - 1, row, 7, ColorRoute::simple(R, W));
  if (reset_at) {
    f.run(reset_at);  // the lines are backed up by now: stalls before this cycle do not count
    f.reset_stats();
  }
  EXPECT_TRUE(test::run_until_idle(f, 50000));
  ExpressResult r;
  for (const auto& pa : test::traffic_agents(f)) {
    r.logs.push_back(pa.agent->log());
    r.sent.push_back(pa.agent->sent());
  }
  r.totals = f.totals();
  std::ostringstream os;
  for (const ColorCounters& c : f.color_counters()) os << c.forwarded << "/" << c.stall << " ";
  for (const Router* rt : f.routers()) {
    os << "\n" << rt->x() << "," << rt->y() << ":";
    for (int p = 0; p < kNumPorts; ++p) os << " " << rt->stall_cycles(p, f.cycle());
  }
  r.counters = os.str();
  r.lines = f.express_lines();
  r.entry_stalls = f.router(1, mid + 1)->stall_cycles(kSouth, f.cycle()) + f.router(2, row)->stall_cycles(kEast, f.cycle());
  return r;
}

TEST(Express, LinesMatchRouterByRouter) {
  for (int depth : {2, 3, 4}) {
    for (int threads : {1, 2}) {
      for (auto [drain, seed] : {std::pair{1.0, 7}, {0.25, 7}, {0.04, 7}, {0.1, 11}, {0.04, 12}}) {
        SCOPED_TRACE("depth " + std::to_string(depth) + ", threads " + std::to_string(threads) + ", drain " +
                     std::to_string(drain) + ", seed " + std::to_string(seed));
        const ExpressResult hop = run_express(false, depth, threads, drain, seed);
        const ExpressResult x = run_express(true, depth, threads, drain, seed);
        EXPECT_EQ(hop.lines, 0u);
        // Column x = 1: rows 1..19 (between the agents of rows 0 and 20) carry colors 3 and 8
        // south (two colors: no line) and 4 north: one line; rows 21..88 carry 5 south and 4
        // north, cut by the crossing router (1, 60), which routes both axes: rows 21..59 and
        // 61..88, two lines each. Row 60: x = 2..38 carry 6 east and 7 west: two lines. 7 in
        // all; none is near 64 routers (the longest has 39). With two threads the second stripe
        // starts at row 61 (Fabric::stripe_rows: 8 per agent's router, 1 per other, 164 in all;
        // rows 0..59 hold 74, rows 0..60 128, the first to reach half), beside the crossing, so
        // the stripes cut no line.
        EXPECT_EQ(x.lines, 7u);
        EXPECT_EQ(hop.totals.cycles, x.totals.cycles);
        EXPECT_EQ(hop.totals.delivered, x.totals.delivered);
        EXPECT_EQ(hop.totals.injected, x.totals.injected);
        EXPECT_EQ(hop.totals.forwarded, x.totals.forwarded);
        EXPECT_EQ(hop.sent, x.sent);
        EXPECT_EQ(hop.counters, x.counters);
        expect_same_arrivals(x.logs, hop.logs);
        // The slowest receivers back the lines up to their first routers.
        if (drain < 0.05) {
          EXPECT_GT(hop.entry_stalls, 0u);
        }
      }
    }
  }
  // Statistics reset while the lines are backed up count the stall cycles after it only.
  const ExpressResult hop = run_express(false, 4, 1, 0.04, 7, 1500);
  const ExpressResult x = run_express(true, 4, 1, 0.04, 7, 1500);
  EXPECT_EQ(hop.totals.forwarded, x.totals.forwarded);
  EXPECT_EQ(hop.counters, x.counters);
  expect_same_arrivals(x.logs, hop.logs);
  // Whatever order the routers are visited in (the lines' ends and their neighbours included).
  for (VisitOrder order : {VisitOrder::kReverse, VisitOrder::kShuffle}) {
    for (int threads : {1, 2}) {
      const ExpressResult o = run_express(true, 2, threads, 0.04, 12, 0, order);
      const ExpressResult ref = run_express(false, 2, threads, 0.04, 12);
      EXPECT_EQ(ref.totals.cycles, o.totals.cycles);
      EXPECT_EQ(ref.counters, o.counters);
      expect_same_arrivals(o.logs, ref.logs);
    }
  }
}

}  // namespace
}  // namespace wafersim
