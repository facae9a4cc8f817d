// Set-up errors that must be caught before the first cycle: agents whose colors disagree with
// the routes, malformed route files, and watchdog settings a slow channel would trip.
#include <gtest/gtest.h>

#include "hw/traffic_gen.h"
#include "test_support.h"

namespace wafersim {
namespace {

using test::contains;
using test::finalize_error;
using test::small_config;

TEST(AgentRoutes, SendingAColorNotRoutedFromTheRampIsRejected) {
  Fabric f(small_config(2, 1));
  f.set_route(1, 0, 0, ColorRoute::simple(port_bit(kWest), port_bit(kRamp)));
  auto a = std::make_unique<TrafficAgent>(0, TrafficAgentOptions{});
  a->add_flow({0, 1.0, 5, 0});
  f.attach_agent(0, 0, std::move(a));
  auto b = std::make_unique<TrafficAgent>(1, TrafficAgentOptions{});
  b->add_receive(0);
  f.attach_agent(1, 0, std::move(b));
  const std::string msg = finalize_error(f);
  EXPECT_TRUE(contains(msg, "wafer.pe_0_0 sends color 0")) << msg;
  EXPECT_TRUE(contains(msg, "accepts from the ramp")) << msg;
}

// (0,0) sends color 3 one hop East to (1,0); the receiver takes color 3 only if asked to.
std::unique_ptr<Fabric> two_pe_line(bool receiver_takes_it) {
  auto f = std::make_unique<Fabric>(small_config(2, 1));
  f->set_route(0, 0, 3, ColorRoute::simple(port_bit(kRamp), port_bit(kEast)));
  f->set_route(1, 0, 3, ColorRoute::simple(port_bit(kWest), port_bit(kRamp)));
  auto a = std::make_unique<TrafficAgent>(0, TrafficAgentOptions{});
  a->add_flow({3, 1.0, 5, 0});
  f->attach_agent(0, 0, std::move(a));
  auto b = std::make_unique<TrafficAgent>(1, TrafficAgentOptions{});
  if (receiver_takes_it) b->add_receive(3);
  f->attach_agent(1, 0, std::move(b));
  return f;
}

TEST(AgentRoutes, RoutingToARampWhoseAgentDoesNotTakeTheColorIsRejected) {
  auto f = two_pe_line(false);
  const std::string msg = finalize_error(*f);
  EXPECT_TRUE(contains(msg, "wafer.pe_1_0 routes color 3 to its ramp")) << msg;
}

TEST(AgentRoutes, ConsistentAgentAndRoutesRun) {
  auto f = two_pe_line(true);
  EXPECT_EQ(finalize_error(*f), "");
  ASSERT_TRUE(test::run_until_idle(*f, 1000));
  EXPECT_EQ(f->agent(1, 0)->consumed(), 5u);
}

// Programs a route file into a fresh fabric; returns the ConfigError message or "".
std::string route_file_error(const std::string& text, int w = 4, int h = 4) {
  const std::string path = test::test_tmp_dir() + "/r.routes";
  test::write_text(path, text);
  Fabric f(small_config(w, h));
  TrafficConfig tc;
  tc.pattern = "file";
  tc.routes = path;
  try {
    program_traffic(f, tc);
    f.finalize();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// The file is accepted, and the fabric it programs runs: the flow's 10 wavelets cross the two
// hops to the receiver at (2, 0), in order, and nothing reaches the PE between.
TEST(RouteFile, GoodFileProgramsAndRuns) {
  const std::string text = "# two hops east\nroute 0 0 1 R E\nroute 1 0 1 W E\nroute 2 0 1 W R\nflow 0 0 1 1.0 10\n";
  EXPECT_EQ(route_file_error(text), "");
  const std::string path = test::test_tmp_dir() + "/good.routes";
  test::write_text(path, text);
  Fabric f(small_config(4, 4));
  TrafficConfig tc;
  tc.pattern = "file";
  tc.routes = path;
  tc.record = true;
  program_traffic(f, tc);
  ASSERT_TRUE(test::run_until_idle(f, 1000));
  ASSERT_NE(f.agent(2, 0), nullptr);
  EXPECT_EQ(f.agent(2, 0)->consumed(), 10u);
  EXPECT_EQ(f.agent(1, 0), nullptr);
  EXPECT_EQ(f.totals().delivered, 10u);
  const auto* rx = dynamic_cast<const TrafficAgent*>(f.agent(2, 0));
  ASSERT_NE(rx, nullptr);
  EXPECT_EQ(test::seqs_of(*rx), test::iota_seqs(10));
}

TEST(RouteFile, ErrorsNameFileAndLine) {
  const std::string msg = route_file_error("route 0 0 1 R E\nroute 1 0 1 W R+\n");
  EXPECT_TRUE(contains(msg, "r.routes:2:")) << msg;
  EXPECT_TRUE(contains(msg, "bad port set 'R+'")) << msg;
}

TEST(RouteFile, MalformedStatementsAreRejected) {
  EXPECT_TRUE(contains(route_file_error("route 0 0\n"), "expected 'route X Y COLOR"));
  EXPECT_TRUE(contains(route_file_error("route 0 0 1 R\n"), "has no TX ports"));
  EXPECT_TRUE(contains(route_file_error("route 0 0 1 RE E\n"), "bad port set"));
  EXPECT_TRUE(contains(route_file_error("route 0 0 1 R E R E R E R E R E\n"), "more than 4 switch positions"));
  EXPECT_TRUE(contains(route_file_error("route 0 0 1 hold\n"), "'hold' comes last"));
  EXPECT_TRUE(contains(route_file_error("route 0 0 1 R E hold W E\n"), "'hold' comes last"));
  EXPECT_EQ(route_file_error("route 1 0 1 R E W E hold\nroute 2 0 1 W R\nflow 1 0 1\n"), "");
  EXPECT_TRUE(contains(route_file_error("route 9 0 1 R E\n"), "outside the fabric"));
  EXPECT_TRUE(contains(route_file_error("route 0 0 40 R E\n"), "color 40 is out of range"));
  EXPECT_TRUE(contains(route_file_error("teleport 0 0 1\n"), "unknown statement 'teleport'"));
  EXPECT_TRUE(contains(route_file_error("route 0 0 1 R E\nroute 1 0 1 W R\nflow 0 0 1 2.0\n"), "rate must be in (0, 1]"));
  EXPECT_TRUE(contains(route_file_error("route 0 0 1 R E\nroute 1 0 1 W R\nflow 0 0 1 x\n"), "flow takes numbers"));
  EXPECT_TRUE(contains(route_file_error("route 0 0 1 R E\nroute 1 0 1 W R\nflow 0 0 1 1 1 1 1\n"), "unexpected '1'"));
  // The statement is checked before its coordinates; counts are whole, non-negative numbers.
  EXPECT_TRUE(contains(route_file_error("bogus 9 9 9\n"), "unknown statement 'bogus'"));
  const std::string two = "route 0 0 1 R E\nroute 1 0 1 W R\n";
  EXPECT_TRUE(contains(route_file_error(two + "flow 0 0 1 1 -1\n"), "flow takes numbers"));
  EXPECT_TRUE(contains(route_file_error(two + "flow 0 0 1 1 5 -1\n"), "flow takes numbers"));
  EXPECT_TRUE(contains(route_file_error(two + "flow 0 0 1 1x\n"), "flow takes numbers"));
  EXPECT_TRUE(contains(route_file_error(two + "flow 0 0 1 1 5x\n"), "flow takes numbers"));
  EXPECT_EQ(route_file_error(two + "flow 0 0 1 0.5 5 2\n"), "");
  // A file that sends nothing is an error, not an empty run.
  EXPECT_TRUE(contains(route_file_error(""), "has no flow statement"));
  EXPECT_TRUE(contains(route_file_error(two), "has no flow statement"));
}

// Programs `tc` into a fresh w x h fabric; returns the ConfigError message, or "no error".
std::string traffic_error(const TrafficConfig& tc, int w, int h) {
  Fabric f(small_config(w, h));
  try {
    program_traffic(f, tc);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(RouteFile, DirectoryIsAClearError) {
  TrafficConfig tc;
  tc.pattern = "file";
  tc.routes = test::test_tmp_dir();
  const std::string e = traffic_error(tc, 4, 4);
  EXPECT_TRUE(contains(e, "is not a regular file")) << e;
}

TEST(RouteFile, MissingFileIsAClearError) {
  TrafficConfig tc;
  tc.pattern = "file";
  tc.routes = test::test_tmp_dir() + "/does-not-exist.routes";
  const std::string e = traffic_error(tc, 4, 4);
  EXPECT_TRUE(contains(e, "cannot read route file")) << e;
}

// A pattern that the fabric or region is too small for is an error, not an empty run.
TEST(Traffic, PatternWithNoFlowIsAClearError) {
  auto error = [](const std::string& pattern, int w, int h, int hops, const std::string& region) {
    Fabric f(small_config(w, h));
    TrafficConfig tc;
    tc.pattern = pattern;
    tc.hops = hops;
    tc.region = region;
    try {
      program_traffic(f, tc);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string n = error("neighbour", 4, 4, 8, "");
  EXPECT_TRUE(contains(n, "traffic pattern neighbour makes no flow in the 4 x 4 fabric")) << n;
  EXPECT_TRUE(contains(n, "longer than traffic.hops = 8")) << n;
  EXPECT_EQ(error("neighbour", 4, 4, 3, ""), "");  // 3 hops fit
  EXPECT_EQ(error("neighbour", 9, 1, 8, ""), "");  // one row long enough
  const std::string r = error("row-broadcast", 8, 8, 8, "2:2,0:7");
  EXPECT_TRUE(contains(r, "in the 1 x 8 region (traffic.region): it needs at least 2 PEs in a row")) << r;
  EXPECT_EQ(error("column-broadcast", 8, 8, 8, "2:2,0:7"), "");
  EXPECT_TRUE(contains(error("column-broadcast", 8, 1, 8, ""), "at least 2 PEs in a column"));
  EXPECT_TRUE(contains(error("random", 8, 8, 8, "3:3,3:3"), "random makes no flow in the 1 x 1 region"));
}

TEST(Traffic, RandomWithNoFlowsIsAClearError) {
  TrafficConfig tc;
  tc.pattern = "random";
  tc.flows = 0;
  const std::string e = traffic_error(tc, 8, 8);
  EXPECT_TRUE(contains(e, "traffic.flows is 0")) << e;
}

// A pattern that routes every PE of a fabric too large for the host's memory is refused before
// anything is built (4096 x 4096 x the neighbour pattern would take about 117 GB; here the limit
// is lowered to 0.01 GB, which a 64 x 64 fabric, about 0.029 GB, exceeds).
TEST(Traffic, FabricTooLargeForHostMemoryIsAClearError) {
  TrafficConfig tc;
  tc.pattern = "neighbour";
  tc.host_memory_gb = 0.01;
  const std::string e = traffic_error(tc, 64, 64);
  EXPECT_TRUE(contains(e, "64 x 64 PEs: about 0.0287 GB of host memory, more than the 0.01 GB")) << e;
  tc.region = "0:31,0:31";  // a region of it fits
  EXPECT_EQ(traffic_error(tc, 64, 64), "no error");
}

TEST(Watchdog, MustOutlastTheSlowestChannel) {
  HwConfig cfg = small_config(8, 8);
  cfg.io.channel_gbps = 0.05;  // one wavelet per 544 cycles at 850 MHz
  cfg.sim.watchdog_cycles = 200;
  try {
    cfg.validate();
    FAIL() << "accepted a watchdog shorter than the channel period";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "sim.watchdog_cycles")) << e.what();
  }
  cfg.sim.watchdog_cycles = 2000;
  EXPECT_NO_THROW(cfg.validate());
  cfg.sim.watchdog_cycles = 0;
  EXPECT_NO_THROW(cfg.validate());
}

}  // namespace
}  // namespace wafersim
