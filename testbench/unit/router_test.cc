// Router-level behaviour on small hand-built fabrics: route validation, multicast, switch
// positions and merges (edge channels and the full WSE-2 size: edge_io_test.cc).
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hw/fabric.h"
#include "hw/traffic_agent.h"
#include "hw/traffic_gen.h"
#include "test_support.h"

namespace wafersim {
namespace {

using namespace test;  // NOLINT: the shared helpers read as plain words here

// ---------------------------------------------------------------------------------------------
// Route validation. An 8 x 8 fabric has one I/O channel per edge, on row (8-1)/2 = 3.

TEST(RouteValidation, SmallFabricHasOneChannelRow) {
  Fabric f(small_config(8, 8));
  ASSERT_EQ(f.channels_per_edge(), 1);
  EXPECT_EQ(f.channel_rows(), std::vector<int>{3});
  EXPECT_NE(f.channel_at_row(kEast, 3), nullptr);
  EXPECT_EQ(f.channel_at_row(kEast, 0), nullptr);
}

TEST(RouteValidation, LeavingTheEdgeOnARowWithoutChannelThrows) {
  Fabric f(small_config(8, 8));
  add_agent(f, 7, 0)->add_flow({2, 1.0, 1});
  f.set_route(7, 0, 2, ColorRoute::simple(R, E));
  const std::string msg = finalize_error(f);
  EXPECT_TRUE(contains(msg, "leaves the fabric edge")) << msg;
  EXPECT_TRUE(contains(msg, "wafer.pe_7_0")) << msg;
  EXPECT_TRUE(contains(msg, "color 2")) << msg;
  EXPECT_TRUE(contains(msg, "port E")) << msg;
  EXPECT_TRUE(contains(msg, "row 0")) << msg;
}

TEST(RouteValidation, LeavingNorthOrSouthEdgeAlwaysThrows) {
  Fabric f(small_config(8, 8));
  add_agent(f, 3, 0);
  f.set_route(3, 0, 1, ColorRoute::simple(R, N));
  EXPECT_TRUE(contains(finalize_error(f), "wafer.pe_3_0")) << finalize_error(f);
  Fabric g(small_config(8, 8));
  add_agent(g, 0, 7);
  g.set_route(0, 7, 1, ColorRoute::simple(R, S | W));
  EXPECT_TRUE(contains(finalize_error(g), "leaves the fabric edge"));
}

TEST(RouteValidation, LeavingTheEdgeOnAChannelRowIsAccepted) {
  Fabric f(small_config(8, 8));
  add_agent(f, 7, 3);
  f.set_route(7, 3, 2, ColorRoute::simple(R, E));
  add_agent(f, 0, 3, recording())->add_receive(2);
  f.set_route(0, 3, 2, ColorRoute::simple(W, R));
  EXPECT_EQ(finalize_error(f), "");
}

TEST(RouteValidation, NeighbourNotAcceptingFromThatSideThrows) {
  Fabric f(small_config(8, 8));
  add_agent(f, 2, 2)->add_flow({1, 1.0, 1});
  f.set_route(2, 2, 1, ColorRoute::simple(R, E));
  add_agent(f, 3, 2)->add_receive(1);
  f.set_route(3, 2, 1, ColorRoute::simple(N, R));  // takes color 1 from the North, not the West
  f.set_route(3, 1, 1, ColorRoute::simple(R, S));
  add_agent(f, 3, 1);
  const std::string msg = finalize_error(f);
  EXPECT_TRUE(contains(msg, "wafer.pe_2_2")) << msg;
  EXPECT_TRUE(contains(msg, "wafer.pe_3_2")) << msg;
  EXPECT_TRUE(contains(msg, "color 1")) << msg;
  EXPECT_TRUE(contains(msg, "does not accept from W")) << msg;
}

TEST(RouteValidation, NeighbourWithoutRouteForColorThrows) {
  Fabric f(small_config(8, 8));
  add_agent(f, 2, 2);
  f.set_route(2, 2, 1, ColorRoute::simple(R, S));
  f.set_route(2, 3, 4, ColorRoute::simple(N, E));  // a route, but for another color
  f.set_route(3, 3, 4, ColorRoute::simple(W, R));
  add_agent(f, 3, 3);
  const std::string msg = finalize_error(f);
  EXPECT_TRUE(contains(msg, "sends to wafer.pe_2_3")) << msg;
  EXPECT_TRUE(contains(msg, "does not accept from N")) << msg;
}

TEST(RouteValidation, RampWithoutAgentThrows) {
  Fabric f(small_config(8, 8));
  add_agent(f, 1, 2)->add_flow({0, 1.0, 1});
  f.set_route(1, 2, 0, ColorRoute::simple(R, E));
  f.set_route(2, 2, 0, ColorRoute::simple(W, R));  // nobody sits at (2,2)'s ramp
  const std::string msg = finalize_error(f);
  EXPECT_TRUE(contains(msg, "wafer.pe_2_2")) << msg;
  EXPECT_TRUE(contains(msg, "ramp")) << msg;
  EXPECT_TRUE(contains(msg, "color 0")) << msg;
}

TEST(RouteValidation, PositionThatAcceptsButSendsNowhereThrows) {
  Fabric f(small_config(8, 8));
  add_agent(f, 0, 2);
  f.set_route(0, 2, 5, ColorRoute::simple(R, E));
  ColorRoute two;
  two.npos = 2;
  two.pos[0] = {W, E};
  two.pos[1] = {W, 0};
  f.set_route(1, 2, 5, two);
  add_agent(f, 2, 2)->add_receive(5);
  f.set_route(2, 2, 5, ColorRoute::simple(W, R));
  const std::string msg = finalize_error(f);
  EXPECT_TRUE(contains(msg, "wafer.pe_1_2")) << msg;
  EXPECT_TRUE(contains(msg, "position 1")) << msg;
  EXPECT_TRUE(contains(msg, "sends nowhere")) << msg;
}

TEST(RouteValidation, ColorOutOfRangeThrowsAtSetRoute) {
  HwConfig c = small_config(8, 8);
  c.router.colors = 24;
  Fabric f(c);
  try {
    f.set_route(1, 1, 24, ColorRoute::simple(R, E));
    FAIL() << "color 24 accepted with 24 colors";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "color 24")) << e.what();
    EXPECT_TRUE(contains(e.what(), "router.colors")) << e.what();
    EXPECT_TRUE(contains(e.what(), "wafer.pe_1_1")) << e.what();
  }
  EXPECT_THROW(f.set_route(1, 1, -1, ColorRoute::simple(R, E)), ConfigError);
  EXPECT_NO_THROW(f.set_route(1, 1, 23, ColorRoute::simple(W, E)));
}

TEST(RouteValidation, BadSwitchPositionCountAndOutsidePeThrow) {
  Fabric f(small_config(8, 8));
  ColorRoute r = ColorRoute::simple(R, E);
  r.npos = 5;
  EXPECT_THROW(f.set_route(1, 1, 0, r), ConfigError);
  r.npos = 0;
  EXPECT_THROW(f.set_route(1, 1, 0, r), ConfigError);
  try {
    f.set_route(8, 1, 0, ColorRoute::simple(W, E));
    FAIL() << "PE (8, 1) accepted on an 8 x 8 fabric";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "outside")) << e.what();
  }
  EXPECT_THROW(f.attach_agent(1, -1, std::make_unique<TrafficAgent>(0, TrafficAgentOptions{})), ConfigError);
}

TEST(RouteValidation, StepFinalizesAndSetUpAfterwardsThrows) {
  Fabric f(small_config(8, 8));
  add_agent(f, 7, 0);
  f.set_route(7, 0, 2, ColorRoute::simple(R, E));
  EXPECT_THROW(f.step(), ConfigError);  // step() validates like finalize()

  Fabric g(small_config(8, 8));
  TrafficAgent* a = add_agent(g, 1, 1);
  a->add_flow({0, 1.0, 2});
  a->add_receive(0);
  g.set_route(1, 1, 0, ColorRoute::simple(R, R));
  g.step();
  EXPECT_THROW(g.set_route(2, 1, 0, ColorRoute::simple(W, R)), ConfigError);
  EXPECT_THROW(g.attach_agent(2, 2, std::make_unique<TrafficAgent>(0, TrafficAgentOptions{})), ConfigError);
}

TEST(RouteValidation, SecondAgentOnAPeThrows) {
  Fabric f(small_config(4, 4));
  add_agent(f, 1, 1);
  EXPECT_THROW(add_agent(f, 1, 1), ConfigError);
}

// ---------------------------------------------------------------------------------------------
// Multicast: the source (2,2) sends color 3 to E+S+R; the tree reaches exactly
// {(2,2), (3,2), (4,2), (2,4), (3,4)}; (2,3) only passes it on; other PEs listen but get nothing.

TEST(Multicast, ReachesExactlyTheRoutedSetOnce) {
  Fabric f(small_config(8, 8));
  const int c = 3;
  const uint32_t count = 40;
  std::map<std::pair<int, int>, TrafficAgent*> agents;
  auto listen = [&](int x, int y) {
    agents[{x, y}] = add_agent(f, x, y, recording());
    agents[{x, y}]->add_receive(c);
  };
  for (auto [x, y] : std::vector<std::pair<int, int>>{{2, 2}, {3, 2}, {4, 2}, {2, 3}, {2, 4}, {3, 4},
                                                      {5, 2}, {1, 2}, {2, 5}, {4, 4}, {3, 3}}) {
    listen(x, y);
  }
  agents[{2, 2}]->add_flow({c, 1.0, count});
  f.set_route(2, 2, c, ColorRoute::simple(R, E | S | R));
  f.set_route(3, 2, c, ColorRoute::simple(W, E | R));
  f.set_route(4, 2, c, ColorRoute::simple(W, R));
  f.set_route(2, 3, c, ColorRoute::simple(N, S));  // pass-through: its listener gets nothing
  f.set_route(2, 4, c, ColorRoute::simple(N, E | R));
  f.set_route(3, 4, c, ColorRoute::simple(W, R));

  ASSERT_TRUE(test::run_until_idle(f, 2000));
  const std::set<std::pair<int, int>> members = {{2, 2}, {3, 2}, {4, 2}, {2, 4}, {3, 4}};
  for (const auto& [xy, a] : agents) {
    if (members.count(xy)) {
      EXPECT_EQ(seqs_of(*a), iota_seqs(count)) << "at " << Fabric::pe_name(xy.first, xy.second);
      for (const auto& arr : a->log()) {
        EXPECT_EQ(payload_source(arr.w.payload), pe_id(f, 2, 2));
        EXPECT_EQ(arr.w.color, c);
        EXPECT_FALSE(arr.w.ctrl);
      }
    } else {
      EXPECT_TRUE(a->log().empty()) << Fabric::pe_name(xy.first, xy.second) << " is outside the tree but got "
                                    << a->log().size() << " wavelets";
    }
  }
  const FabricTotals t = f.totals();
  EXPECT_EQ(t.injected, count);
  EXPECT_EQ(t.delivered, 5 * count);
  // Each wavelet leaves a copy behind at (2,2) twice (3 outputs), at (3,2) and (2,4) once.
  EXPECT_EQ(t.multicast_copies, 4 * count);
  EXPECT_EQ(t.in_flight, 0u);
  EXPECT_EQ(t.injected + t.multicast_copies, t.delivered + t.in_flight);
}

TEST(Multicast, ColumnBroadcastPatternReachesItsColumnOnly) {
  HwConfig hw = small_config(6, 5);
  Fabric f(hw);
  TrafficConfig tc;
  tc.pattern = "column-broadcast";
  tc.count = 25;
  tc.record = true;
  const TrafficPlan plan = program_traffic(f, tc);
  EXPECT_EQ(plan.flows, 6);
  ASSERT_TRUE(test::run_until_idle(f, 3000));
  for (int x = 0; x < 6; ++x) {
    for (int y = 1; y < 5; ++y) {
      const auto* a = f.agent_as<TrafficAgent>(x, y);
      ASSERT_NE(a, nullptr);
      EXPECT_EQ(seqs_of(*a), iota_seqs(25)) << Fabric::pe_name(x, y);
      for (const auto& arr : a->log()) EXPECT_EQ(payload_source(arr.w.payload), pe_id(f, x, 0));
    }
    EXPECT_TRUE(f.agent_as<TrafficAgent>(x, 0)->log().empty());
  }
}

// ---------------------------------------------------------------------------------------------
// Switch positions.

// (2,3) has two positions for color 1: tx=E, then tx=S. The source (1,3) sends data, ctrl, data,
// ctrl back to back; each ctrl leaves on the current position, then the position advances.
TEST(SwitchPositions, ControlWaveletAdvancesPositionAfterLeaving) {
  Fabric f(small_config(8, 8));
  const int c = 1;
  TrafficAgent* src = add_agent(f, 1, 3);
  src->add_flow({c, 1.0, 4, /*ctrl_every=*/2});  // seq 0 data, 1 ctrl, 2 data, 3 ctrl
  f.set_route(1, 3, c, ColorRoute::simple(R, E));
  ColorRoute sw;
  sw.npos = 2;
  sw.pos[0] = {W, E};
  sw.pos[1] = {W, S};
  f.set_route(2, 3, c, sw);
  TrafficAgent* east = add_agent(f, 3, 3, recording());
  east->add_receive(c);
  f.set_route(3, 3, c, ColorRoute::simple(W, R));
  TrafficAgent* south = add_agent(f, 2, 4, recording());
  south->add_receive(c);
  f.set_route(2, 4, c, ColorRoute::simple(N, R));
  f.finalize();

  const Router* r = f.router(2, 3);
  int expected_pos = 0, ctrl_seen = 0;
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(r->switch_position(c), expected_pos) << "cycle " << f.cycle();
    const uint64_t now = f.cycle();
    f.step();
    Wavelet w;
    for (int p : {kEast, kSouth}) {
      if (r->sent_this_cycle(p, now, &w)) {
        // Position 0 sends East, position 1 South: the wavelet took the position active when it left.
        EXPECT_EQ(p, expected_pos == 0 ? kEast : kSouth) << w << " at cycle " << now;
        if (w.ctrl) {
          expected_pos = 1 - expected_pos;
          ++ctrl_seen;
        }
      }
    }
    EXPECT_EQ(r->switch_position(c), expected_pos) << "after cycle " << now;
    EXPECT_EQ(f.router(1, 3)->switch_position(c), 0);  // a single-position route never moves
  }
  EXPECT_EQ(ctrl_seen, 2);
  ASSERT_EQ(east->log().size(), 2u);
  ASSERT_EQ(south->log().size(), 2u);
  EXPECT_EQ(payload_seq(east->log()[0].w.payload), 0u);
  EXPECT_FALSE(east->log()[0].w.ctrl);
  EXPECT_EQ(payload_seq(east->log()[1].w.payload), 1u);
  EXPECT_TRUE(east->log()[1].w.ctrl);
  EXPECT_EQ(payload_seq(south->log()[0].w.payload), 2u);
  EXPECT_FALSE(south->log()[0].w.ctrl);
  EXPECT_EQ(payload_seq(south->log()[1].w.payload), 3u);
  EXPECT_TRUE(south->log()[1].w.ctrl);
  EXPECT_EQ(r->switch_position(c), 0);  // two ctrl wavelets: back to position 0 (cyclic)
}

// Positions can select the input: (3,3) takes color 2 from the West in position 0 and from the
// North in position 1. The North source's wavelets wait until the West stream's ctrl switches.
TEST(SwitchPositions, PositionSelectsInputPort) {
  Fabric f(small_config(8, 8));
  const int c = 2;
  add_agent(f, 2, 3)->add_flow({c, 1.0, 3, /*ctrl_every=*/3});  // data, data, ctrl
  f.set_route(2, 3, c, ColorRoute::simple(R, E));
  add_agent(f, 3, 2)->add_flow({c, 1.0, 2});
  f.set_route(3, 2, c, ColorRoute::simple(R, S));
  ColorRoute sw;
  sw.npos = 2;
  sw.pos[0] = {W, E};
  sw.pos[1] = {N, E};
  f.set_route(3, 3, c, sw);
  TrafficAgent* dst = add_agent(f, 4, 3, recording());
  dst->add_receive(c);
  f.set_route(4, 3, c, ColorRoute::simple(W, R));

  ASSERT_TRUE(test::run_until_idle(f, 500));
  std::vector<std::pair<uint32_t, uint32_t>> got;  // (source, seq)
  for (const auto& a : dst->log()) got.emplace_back(payload_source(a.w.payload), payload_seq(a.w.payload));
  const uint32_t west = pe_id(f, 2, 3), north = pe_id(f, 3, 2);
  const std::vector<std::pair<uint32_t, uint32_t>> want = {{west, 0}, {west, 1}, {west, 2}, {north, 0}, {north, 1}};
  EXPECT_EQ(got, want);
  EXPECT_EQ(f.router(3, 3)->switch_position(c), 1);
}

// ---------------------------------------------------------------------------------------------
// Merges: (3,3) takes color 0 from W, N and S and sends it East to one receiver. With all three
// saturated the output carries one wavelet per cycle and the round-robin gives each input a third.

TEST(Merge, ThreeInputsShareFairlyAndLoseNothing) {
  Fabric f(small_config(8, 8));
  const int c = 0;
  const uint32_t count = 400;
  add_agent(f, 2, 3)->add_flow({c, 1.0, count});
  f.set_route(2, 3, c, ColorRoute::simple(R, E));
  add_agent(f, 3, 2)->add_flow({c, 1.0, count});
  f.set_route(3, 2, c, ColorRoute::simple(R, S));
  add_agent(f, 3, 4)->add_flow({c, 1.0, count});
  f.set_route(3, 4, c, ColorRoute::simple(R, N));
  f.set_route(3, 3, c, ColorRoute::simple(W | N | S, E));
  TrafficAgent* dst = add_agent(f, 4, 3, recording());
  dst->add_receive(c);
  f.set_route(4, 3, c, ColorRoute::simple(W, R));

  ASSERT_TRUE(test::run_until_idle(f, 5000));
  const std::vector<uint32_t> sources = {pe_id(f, 2, 3), pe_id(f, 3, 2), pe_id(f, 3, 4)};

  // Window: cycles [30, 630), while every source still has wavelets queued (each needs >= 3
  // cycles per wavelet of output share, so none finishes before cycle ~1200).
  const uint64_t w0 = 30, w1 = 630;
  std::map<uint32_t, int> share;
  int total = 0;
  for (const auto& a : dst->log()) {
    if (a.cycle >= w0 && a.cycle < w1) {
      ++share[payload_source(a.w.payload)];
      ++total;
    }
  }
  EXPECT_EQ(total, static_cast<int>(w1 - w0)) << "the merged output should carry one wavelet per cycle";
  for (uint32_t s : sources) {
    EXPECT_NEAR(share[s], (w1 - w0) / 3.0, 3.0) << "source " << s << " got an unfair share";
  }

  // No loss, no duplication, order kept per source.
  test::Scoreboard sb(f);
  EXPECT_TRUE(sb.in_order(count));
  EXPECT_EQ(sb.seqs.size(), 3u);
  EXPECT_EQ(sb.arrivals, 3 * count);
}

// Adding the merge router's own ramp as a fourth input still shares fairly.
TEST(Merge, FourInputsIncludingRampShareFairly) {
  Fabric f(small_config(8, 8));
  const int c = 4;
  add_agent(f, 2, 3)->add_flow({c, 1.0, 0});
  f.set_route(2, 3, c, ColorRoute::simple(R, E));
  add_agent(f, 3, 2)->add_flow({c, 1.0, 0});
  f.set_route(3, 2, c, ColorRoute::simple(R, S));
  add_agent(f, 3, 4)->add_flow({c, 1.0, 0});
  f.set_route(3, 4, c, ColorRoute::simple(R, N));
  add_agent(f, 3, 3)->add_flow({c, 1.0, 0});
  f.set_route(3, 3, c, ColorRoute::simple(W | N | S | R, E));
  TrafficAgent* dst = add_agent(f, 4, 3, recording());
  dst->add_receive(c);
  f.set_route(4, 3, c, ColorRoute::simple(W, R));
  f.run(850);
  std::map<uint32_t, int> share;
  for (const auto& a : dst->log()) {
    if (a.cycle >= 50 && a.cycle < 850) ++share[payload_source(a.w.payload)];
  }
  ASSERT_EQ(share.size(), 4u);
  for (const auto& [src, n] : share) EXPECT_NEAR(n, 200.0, 3.0) << "source " << src;
}

TEST(Merge, ReducePatternDeliversEverythingInOrder) {
  Fabric f(small_config(8, 4));
  TrafficConfig tc;
  tc.pattern = "reduce";
  tc.count = 30;
  tc.record = true;
  const TrafficPlan plan = program_traffic(f, tc);
  EXPECT_EQ(plan.flows, 32);
  ASSERT_TRUE(test::run_until_idle(f, 5000));
  test::Scoreboard sb(f);
  EXPECT_TRUE(sb.in_order(tc.count));
  EXPECT_EQ(sb.seqs.size(), 32u);
  for (const auto& [key, v] : sb.seqs) {
    const auto& [rx, src, color] = key;
    EXPECT_EQ(rx % 8, 7u) << "only the east end of a row receives";
    EXPECT_EQ(rx / 8, src / 8) << "a row reduces into its own east end";
    EXPECT_EQ(color, 0);
  }
  EXPECT_EQ(sb.arrivals, 32u * 30u);
}

}  // namespace
}  // namespace wafersim
