// Edge I/O channels on small hand-built fabrics, and the full WSE-2 size with one flow.
#include <cmath>
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
// Edge channels. Row 3 of the 8 x 8 fabric carries color 2 from the West channel straight to the
// East channel; nobody drains the East side at first.

TEST(EdgeChannel, InjectBackpressureThenDrainInOrder) {
  HwConfig hw = small_config(8, 8);
  Fabric f(hw);
  const int c = 2;
  for (int x = 0; x < 8; ++x) f.set_route(x, 3, c, ColorRoute::simple(W, E));
  f.finalize();
  EdgeChannel* in = f.channel(kWest, 0);
  EdgeChannel* out = f.channel(kEast, 0);
  ASSERT_NE(in, nullptr);
  ASSERT_NE(out, nullptr);
  ASSERT_EQ(in->row(), 3);

  // Colors the edge router does not take from that side are refused outright.
  EXPECT_THROW(in->try_inject(Wavelet{0, 5, false}), ConfigError);
  EXPECT_THROW(out->try_inject(Wavelet{0, c, false}), ConfigError);

  // Fill: inject as much as the fabric takes while nothing drains.
  uint32_t injected = 0;
  uint64_t last_accept = 0;
  for (int i = 0; i < 1500; ++i) {
    while (in->try_inject(Wavelet{injected, c, false})) {
      ++injected;
      last_accept = f.cycle();
    }
    f.step();
  }
  const uint32_t capacity = static_cast<uint32_t>(hw.io.queue_depth + 8 * hw.router.buffer_depth + hw.io.queue_depth);
  EXPECT_LT(last_accept, 1400u) << "try_inject never started failing";
  EXPECT_EQ(injected, capacity) << "host queue + router buffers + receive queue";
  EXPECT_EQ(in->inject_queue_size(), static_cast<size_t>(hw.io.queue_depth));
  EXPECT_EQ(out->receive_queue_size(), static_cast<size_t>(hw.io.queue_depth));
  EXPECT_FALSE(in->try_inject(Wavelet{injected, c, false}));
  const FabricTotals full = f.totals();
  EXPECT_EQ(full.in_flight, static_cast<uint64_t>(8 * hw.router.buffer_depth));

  // Drain through try_receive while injecting the rest; nothing is lost and order is kept.
  const uint32_t total = 300;
  std::vector<Wavelet> got;
  for (int i = 0; i < 10000 && got.size() < total; ++i) {
    Wavelet w;
    while (out->try_receive(&w)) got.push_back(w);
    while (injected < total && in->try_inject(Wavelet{injected, c, false})) ++injected;
    f.step();
  }
  ASSERT_EQ(got.size(), total);
  for (uint32_t i = 0; i < total; ++i) {
    EXPECT_EQ(got[i], (Wavelet{i, c, false})) << "position " << i;
  }
  EXPECT_EQ(in->injected(), total);
  EXPECT_EQ(out->received(), total);
  Wavelet w;
  EXPECT_FALSE(out->try_receive(&w));
  EXPECT_EQ(f.totals().in_flight, 0u);
}

TEST(EdgeChannel, ReceiveOnlyAfterArrivalCycle) {
  HwConfig hw = small_config(4, 4);
  hw.router.hop_latency = 3;
  hw.io.channel_gbps = 27.2;  // one wavelet per cycle at 850 MHz
  Fabric f(hw);
  const int row = f.channel_rows().at(0);
  f.set_route(0, row, 0, ColorRoute::simple(W, E));
  f.set_route(1, row, 0, ColorRoute::simple(W, E));
  f.set_route(2, row, 0, ColorRoute::simple(W, E));
  f.set_route(3, row, 0, ColorRoute::simple(W, E));
  f.finalize();
  EdgeChannel* in = f.channel(kWest, 0);
  EdgeChannel* out = f.channel(kEast, 0);
  out->set_record(true);
  ASSERT_TRUE(in->try_inject(Wavelet{0xabc, 0, false}));
  // Channel -> (0,row): 1 link; then 3 hops; then (3,row) -> channel: 1 more link. Each is
  // hop_latency, so the host can take it once 5 * 3 = 15 cycles have completed.
  Wavelet w;
  for (int i = 0; i < 14; ++i) {
    f.step();
    EXPECT_FALSE(out->try_receive(&w)) << "too early at cycle " << f.cycle();
  }
  f.step();
  ASSERT_TRUE(out->try_receive(&w));
  EXPECT_EQ(w, (Wavelet{0xabc, 0, false}));
  ASSERT_EQ(out->log().size(), 1u);
  EXPECT_EQ(out->log()[0].first, 15u);
}

TEST(EdgeChannel, AutoDrainKeepsReceiveQueueEmpty) {
  Fabric f(small_config(8, 8));
  for (int x = 0; x < 8; ++x) f.set_route(x, 3, 0, ColorRoute::simple(W, E));
  f.finalize();
  EdgeChannel* in = f.channel(kWest, 0);
  EdgeChannel* out = f.channel(kEast, 0);
  out->set_auto_drain(true);
  out->set_record(true);
  uint32_t n = 0;
  for (int i = 0; i < 600; ++i) {
    while (n < 100 && in->try_inject(Wavelet{n, 0, false})) ++n;
    f.step();
  }
  EXPECT_EQ(out->received(), 100u);
  EXPECT_EQ(out->receive_queue_size(), 0u);
  ASSERT_EQ(out->log().size(), 100u);
  for (uint32_t i = 0; i < 100; ++i) EXPECT_EQ(out->log()[i].second.payload, i);
}

// A channel's rate slots depend only on the cycles since its burst began, never on how far the
// run has got: the same burst at cycle 0 and late in a long run (where a double's rounding of
// the running slot used to move some slots by a cycle) takes the same cycles, relative to its
// start; a weight-streaming run resumed from a checkpoint repeats the steps it continues. The
// channel is driven from its fabric side directly (no fabric needed for that side).
TEST(EdgeChannel, RateSlotsDoNotDependOnTheAbsoluteCycle) {
  for (const double rate : {35.0 / 136.0, 7.0 / 27.2, 0.1, 2.0 / 3.0}) {
    std::vector<uint64_t> first;
    for (const uint64_t t0 : {uint64_t{1000}, uint64_t{482967}, (uint64_t{1} << 35) + 3, (uint64_t{1} << 41) + 1}) {
      EdgeChannel ch(nullptr, kEast, 0, 0, 4, rate);
      ch.set_auto_drain(true);
      std::vector<uint64_t> took;
      for (uint64_t t = t0; took.size() < 3000; ++t) {
        if (!ch.fabric_can_take(t)) continue;
        ch.fabric_deliver(Wavelet{0, 0, false}, t, t);
        took.push_back(t - t0);
      }
      // The schedule keeps the exact rate: wavelet k goes about k / rate cycles after the first.
      EXPECT_EQ(took[0], 0u) << "rate " << rate;
      EXPECT_NEAR(static_cast<double>(took.back()), 2999 / rate, 1.0) << "rate " << rate;
      if (first.empty()) first = took;
      else EXPECT_EQ(took, first) << "rate " << rate << ", burst from cycle " << t0;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The full WSE-2 size: 757 x 996 PEs instantiate (routers only where routed) and one flow from
// near one corner to near the other is delivered on time and in order.

TEST(FullWafer, Wse2SizeOneFlow) {
  HwConfig hw;  // defaults are the WSE-2 figures
  ASSERT_EQ(hw.fabric.width, 757);
  ASSERT_EQ(hw.fabric.height, 996);
  Fabric f(hw);
  EXPECT_EQ(f.channels_per_edge(), 60);
  const int sx = 3, sy = 5, dx = 750, dy = 990;
  TrafficAgentOptions o;
  o.record = true;
  TrafficBuilder b(f, o);
  const auto path = xy_path(sx, sy, dx, dy);
  const int hops = static_cast<int>(path.size()) - 1;
  ASSERT_EQ(hops, (dx - sx) + (dy - sy));
  const uint32_t count = 32;
  b.path(path, 7, kRamp);
  b.agent(sx, sy).add_flow({7, 1.0, count});
  b.apply();
  f.finalize();
  EXPECT_EQ(f.routers().size(), path.size());

  const uint64_t first = 2 * hw.router.ramp_latency + static_cast<uint64_t>(hops) * hw.router.hop_latency;
  ASSERT_TRUE(test::run_until_idle(f, first + 10 * count));
  const auto* dst = f.agent_as<TrafficAgent>(dx, dy);
  ASSERT_NE(dst, nullptr);
  ASSERT_EQ(dst->log().size(), count);
  for (uint32_t i = 0; i < count; ++i) {
    const auto& a = dst->log()[i];
    EXPECT_EQ(a.w.payload, make_payload(pe_id(f, sx, sy), i));
    EXPECT_EQ(a.cycle, first + i) << "one wavelet per cycle behind the first";
  }
  const FabricTotals t = f.totals();
  EXPECT_EQ(t.injected, count);
  EXPECT_EQ(t.delivered, count);
  EXPECT_EQ(t.forwarded, static_cast<uint64_t>(count) * (hops + 1));
}

}  // namespace
}  // namespace wafersim
