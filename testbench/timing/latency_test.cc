// Cycle-exact timing: end-to-end latency edges, credit-limited throughput and edge channel rates.
#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "hw/fabric.h"
#include "hw/traffic_agent.h"
#include "hw/traffic_gen.h"
#include "test_support.h"

namespace wafersim {
namespace {

using test::pe_id;

struct Latencies {
  int hop, ramp;
};
void PrintTo(const Latencies& l, std::ostream* os) { *os << "hop " << l.hop << " ramp " << l.ramp; }

HwConfig latency_config(int width, int height, int hop, int ramp) {
  HwConfig hw = test::small_config(width, height);
  hw.router.hop_latency = hop;
  hw.router.ramp_latency = ramp;
  return hw;
}

// ---------------------------------------------------------------------------------------------
// Latency edge: a wavelet offered by the source in cycle 0 over k hops is consumed by the
// destination in cycle N = 2 * ramp_latency + k * hop_latency. After fabric.run(N) (cycles
// 0..N-1) nothing has arrived; one more step and it has, stamped with cycle N.

class LatencyEdge : public testing::TestWithParam<std::tuple<Latencies, int, int>> {};

TEST_P(LatencyEdge, ConsumedExactlyAtCycleN) {
  const auto [lat, k, dir] = GetParam();
  const HwConfig hw = latency_config(12, 12, lat.hop, lat.ramp);
  Fabric f(hw);
  const int sx = dir == kEast ? 1 : 6, sy = dir == kEast ? 6 : 10;
  const int dx = sx + port_dx(dir) * k, dy = sy + port_dy(dir) * k;
  TrafficAgentOptions o;
  o.record = true;
  TrafficBuilder b(f, o);
  const auto path = xy_path(sx, sy, dx, dy);
  ASSERT_EQ(static_cast<int>(path.size()), k + 1);
  b.path(path, 3, kRamp);
  b.agent(sx, sy).add_flow({3, 1.0, 1});
  b.apply();
  const auto* dst = f.agent_as<TrafficAgent>(dx, dy);
  const auto* src = f.agent_as<TrafficAgent>(sx, sy);
  ASSERT_NE(dst, nullptr);

  const uint64_t n = 2 * static_cast<uint64_t>(lat.ramp) + static_cast<uint64_t>(k) * lat.hop;
  f.step();
  EXPECT_EQ(src->sent(), 1u) << "the source offers its wavelet in cycle 0";
  f.run(n - 1);
  ASSERT_EQ(f.cycle(), n);
  EXPECT_TRUE(dst->log().empty()) << "consumed before cycle " << n;
  EXPECT_EQ(dst->consumed(), 0u);
  f.step();
  ASSERT_EQ(dst->log().size(), 1u) << "not consumed in cycle " << n;
  EXPECT_EQ(dst->log()[0].cycle, n);
  EXPECT_EQ(dst->log()[0].w, (Wavelet{make_payload(pe_id(f, sx, sy), 0), 3, false}));
  const FabricTotals t = f.totals();
  EXPECT_EQ(t.delivered, 1u);
  EXPECT_EQ(t.in_flight, 0u);
  EXPECT_EQ(t.forwarded, static_cast<uint64_t>(k) + 1);
}

const Latencies kLatencies[] = {{1, 2}, {1, 1}, {2, 3}, {3, 1}, {4, 2}};

INSTANTIATE_TEST_SUITE_P(
    HopsEastAndNorth, LatencyEdge,
    testing::Combine(testing::ValuesIn(kLatencies), testing::Values(1, 2, 5, 9), testing::Values(int{kEast}, int{kNorth})),
    [](const testing::TestParamInfo<LatencyEdge::ParamType>& info) {
      const Latencies lat = std::get<0>(info.param);
      return "hop" + std::to_string(lat.hop) + "_ramp" + std::to_string(lat.ramp) + "_k" +
             std::to_string(std::get<1>(info.param)) + "_" + (std::get<2>(info.param) == kEast ? "East" : "North");
    });

// Zero hops: a PE's ramp routed straight back to its own ramp takes N = 2 * ramp_latency.
class ZeroHop : public testing::TestWithParam<Latencies> {};

TEST_P(ZeroHop, RampToOwnRamp) {
  const Latencies lat = GetParam();
  Fabric f(latency_config(4, 4, lat.hop, lat.ramp));
  TrafficAgentOptions o;
  o.record = true;
  auto a = std::make_unique<TrafficAgent>(pe_id(f, 2, 1), o);
  a->add_flow({5, 1.0, 1});
  a->add_receive(5);
  const TrafficAgent* ag = a.get();
  f.attach_agent(2, 1, std::move(a));
  f.set_route(2, 1, 5, ColorRoute::simple(port_bit(kRamp), port_bit(kRamp)));
  const uint64_t n = 2 * static_cast<uint64_t>(lat.ramp);
  f.run(n);
  EXPECT_TRUE(ag->log().empty());
  f.step();
  ASSERT_EQ(ag->log().size(), 1u);
  EXPECT_EQ(ag->log()[0].cycle, n);
  EXPECT_EQ(ag->log()[0].w.payload, make_payload(pe_id(f, 2, 1), 0));
}

INSTANTIATE_TEST_SUITE_P(Latencies, ZeroHop, testing::ValuesIn(kLatencies),
                         [](const testing::TestParamInfo<Latencies>& info) {
                           return "hop" + std::to_string(info.param.hop) + "_ramp" + std::to_string(info.param.ramp);
                         });

// ---------------------------------------------------------------------------------------------
// Single-flow throughput vs buffer depth.
//
// Credit loop of one link with latency L (hop_latency between routers, ramp_latency on either
// ramp) into a buffer of depth D: a wavelet sent in cycle s is pushed in s's commit, becomes
// forwardable at s+L and, if it leaves at once, is popped in the commit of s+L. The sender sees
// the freed slot in cycle s+L+1. So when the sender decides in cycle t, the buffer still holds
// every wavelet sent in cycles t-L .. t-1, and it may send only if fewer than D of them were
// sent: at most D wavelets in any L+1 consecutive cycles. The link sustains
//     rate = min(1, D / (L + 1)),
// and a path (source ramp, hops, destination ramp, each with depth D: the receiving agent's
// queue is D deep as in program_traffic) sustains the minimum over its links:
//     rate = min(1, D / (hop_latency + 1), D / (ramp_latency + 1)).
// Hence D >= max(hop, ramp) + 1 gives one wavelet per cycle; anything less gives less.

struct DepthCase {
  int hop, ramp, depth;
};
void PrintTo(const DepthCase& c, std::ostream* os) {
  *os << "hop " << c.hop << " ramp " << c.ramp << " depth " << c.depth;
}

class CreditThroughput : public testing::TestWithParam<DepthCase> {};

TEST_P(CreditThroughput, SingleFlowSteadyRate) {
  const DepthCase p = GetParam();
  HwConfig hw = latency_config(16, 3, p.hop, p.ramp);
  hw.router.buffer_depth = p.depth;
  Fabric f(hw);
  TrafficAgentOptions o;
  o.queue_depth = p.depth;
  TrafficBuilder b(f, o);
  b.path(xy_path(2, 1, 12, 1), 0, kRamp);  // 10 hops East
  b.agent(2, 1).add_flow({0, 1.0, 0});
  b.apply();
  const auto* dst = f.agent_as<TrafficAgent>(12, 1);

  const uint64_t warmup = 200, window = 600;  // window: a multiple of every L+1 used here
  f.run(warmup);
  const uint64_t before = dst->consumed();
  f.run(window);
  const uint64_t got = dst->consumed() - before;
  const double rate = std::min({1.0, double(p.depth) / (p.hop + 1), double(p.depth) / (p.ramp + 1)});
  EXPECT_NEAR(static_cast<double>(got), rate * window, 1.0)
      << "hop " << p.hop << ", ramp " << p.ramp << ", depth " << p.depth << ": expected " << rate
      << " wavelets/cycle, got " << static_cast<double>(got) / window;
  if (p.depth >= std::max(p.hop, p.ramp) + 1) {
    EXPECT_EQ(got, window);
  } else {
    EXPECT_LT(got, window);
  }
}

INSTANTIATE_TEST_SUITE_P(Depths, CreditThroughput,
                         testing::Values(DepthCase{1, 2, 3}, DepthCase{1, 2, 4}, DepthCase{1, 2, 2}, DepthCase{1, 2, 1},
                                         DepthCase{1, 1, 2}, DepthCase{1, 1, 1}, DepthCase{3, 1, 4}, DepthCase{3, 1, 3},
                                         DepthCase{3, 1, 2}, DepthCase{2, 3, 4}, DepthCase{2, 3, 3}, DepthCase{4, 2, 5},
                                         DepthCase{4, 2, 3}, DepthCase{4, 2, 2}),
                         [](const testing::TestParamInfo<DepthCase>& info) {
                           return "hop" + std::to_string(info.param.hop) + "_ramp" + std::to_string(info.param.ramp) +
                                  "_depth" + std::to_string(info.param.depth);
                         });

// ---------------------------------------------------------------------------------------------
// Edge channel rate: io.channel_gbps / (32 bits * clock) wavelets per cycle, capped at 1, in both
// directions. Non-integer periods (7 Gb/s at 850 MHz: one wavelet per 3.886 cycles, the default;
// 10 Gb/s: per 2.72 cycles) must average out to the exact rate over a long window, not round
// the period up to whole cycles.

struct ChannelCase {
  double gbps, clock_mhz;
};
void PrintTo(const ChannelCase& c, std::ostream* os) { *os << c.gbps << " Gb/s at " << c.clock_mhz << " MHz"; }

double channel_rate(const ChannelCase& c) { return std::min(1.0, c.gbps * 1e3 / (32.0 * c.clock_mhz)); }

class ChannelRate : public testing::TestWithParam<ChannelCase> {};

HwConfig channel_config(const ChannelCase& c) {
  HwConfig hw = test::small_config(12, 12);
  hw.io.channel_gbps = c.gbps;
  hw.fabric.clock_mhz = c.clock_mhz;
  return hw;
}

// A saturating source at (4, row) sends East to the East channel of its row.
TEST_P(ChannelRate, FabricToHostOnHandBuiltPath) {
  Fabric f(channel_config(GetParam()));
  ASSERT_EQ(f.channels_per_edge(), 1);
  const int row = f.channel_rows()[0];
  TrafficBuilder b(f, TrafficAgentOptions{});
  b.path(xy_path(4, row, 11, row), 0, kEast);
  b.agent(4, row).add_flow({0, 1.0, 0});
  b.apply();
  EdgeChannel* ch = f.channel(kEast, 0);
  ch->set_auto_drain(true);
  const uint64_t warmup = 100, window = 800;
  f.run(warmup);
  const uint64_t before = ch->received();
  f.run(window);
  const double expected = channel_rate(GetParam()) * window;
  EXPECT_NEAR(static_cast<double>(ch->received() - before), expected, 1.0);
}

// A receiver at (x, row) that takes color 1 from the West and drains at once.
const TrafficAgent* receiver_from_west(Fabric& f, int x, int row) {
  f.set_route(x, row, 1, ColorRoute::simple(port_bit(kWest), port_bit(kRamp)));
  auto a = std::make_unique<TrafficAgent>(pe_id(f, x, row), TrafficAgentOptions{});
  a->add_receive(1);
  const TrafficAgent* p = a.get();
  f.attach_agent(x, row, std::move(a));
  return p;
}

// The host keeps the West channel's inject queue full; a receiver at (3, row) drains at once.
TEST_P(ChannelRate, HostToFabricInject) {
  Fabric f(channel_config(GetParam()));
  const int row = f.channel_rows()[0];
  for (int x = 0; x < 3; ++x) f.set_route(x, row, 1, ColorRoute::simple(port_bit(kWest), port_bit(kEast)));
  const TrafficAgent* dst = receiver_from_west(f, 3, row);
  f.finalize();
  EdgeChannel* ch = f.channel(kWest, 0);
  uint32_t seq = 0;
  auto run = [&](uint64_t cycles) {
    for (uint64_t i = 0; i < cycles; ++i) {
      while (ch->try_inject(Wavelet{seq, 1, false})) ++seq;
      f.step();
    }
  };
  const uint64_t warmup = 100, window = 800;
  run(warmup);
  const uint64_t injected = ch->injected(), consumed = dst->consumed();
  run(window);
  const double expected = channel_rate(GetParam()) * window;
  EXPECT_NEAR(static_cast<double>(ch->injected() - injected), expected, 1.0);
  EXPECT_NEAR(static_cast<double>(dst->consumed() - consumed), expected, 1.0);
}

// A slow channel with a full inject queue: its edge router looks at it only at its rate slots
// (the host's pushes and the cycles between do not wake it), and still takes one per slot.
TEST(ChannelRateSleep, EdgeRouterSleepsBetweenRateSlots) {
  const ChannelCase slow{0.68, 850};  // one wavelet per 40 cycles
  Fabric f(channel_config(slow));
  const int row = f.channel_rows()[0];
  const TrafficAgent* dst = receiver_from_west(f, 0, row);
  f.finalize();
  EdgeChannel* ch = f.channel(kWest, 0);
  uint32_t seq = 0;
  uint64_t idle = 0;
  const uint64_t window = 2000;
  for (uint64_t i = 0; i < window; ++i) {
    while (ch->try_inject(Wavelet{seq, 1, false})) ++seq;
    f.step();
    if (f.active_routers() == 0) ++idle;
  }
  EXPECT_NEAR(static_cast<double>(ch->injected()), channel_rate(slow) * window, 1.0);
  EXPECT_EQ(dst->consumed(), ch->injected());
  EXPECT_GT(idle, window * 3 / 4) << "the edge router was visited in cycles its channel could not offer";
}

INSTANTIATE_TEST_SUITE_P(Bandwidths, ChannelRate,
                         testing::Values(ChannelCase{27.2, 850}, ChannelCase{54.4, 850}, ChannelCase{13.6, 850},
                                         ChannelCase{6.8, 850}, ChannelCase{7.0, 850}, ChannelCase{10.0, 850},
                                         ChannelCase{6.8, 425}),
                         [](const testing::TestParamInfo<ChannelCase>& info) {
                           std::ostringstream os;
                           os << "gbps" << info.param.gbps << "_mhz" << info.param.clock_mhz;
                           std::string n = os.str();
                           std::replace(n.begin(), n.end(), '.', 'p');
                           return n;
                         });

// The hotspot pattern: all 64 PEs of an 8 x 8 fabric converge on one East channel, which is the
// bottleneck at 6.8 Gb/s / (32 bit * 850 MHz) = 1 wavelet per 4 cycles.
TEST(ChannelRateHotspot, ChannelLimitsConvergingTraffic) {
  HwConfig hw = test::small_config(8, 8);
  hw.io.channel_gbps = 6.8;
  Fabric f(hw);
  TrafficConfig tc;
  tc.pattern = "hotspot";
  const TrafficPlan plan = program_traffic(f, tc);
  EXPECT_EQ(plan.flows, 64);
  EdgeChannel* ch = f.channel(kEast, 0);
  f.run(200);
  const uint64_t before = ch->received();
  f.run(400);
  EXPECT_NEAR(static_cast<double>(ch->received() - before), 100.0, 1.0);
  const FabricTotals t = f.totals();
  EXPECT_EQ(t.injected + t.multicast_copies, t.delivered + t.in_flight);
}

}  // namespace
}  // namespace wafersim
