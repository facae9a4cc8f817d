// Cores on the fabric: vector ops streaming to and from fabric descriptors, wavelet-triggered
// data tasks, blocked tasks, microthreads, backpressure from a slow consumer, arithmetic against
// plain C++ references, and program errors stopping the run with a message.
#include <cmath>

#include <gtest/gtest.h>

#include "core_support.h"

namespace wafersim::test {
namespace {

// Every counter of a core's stats agrees (lazy against cycle-by-cycle runs).
void expect_same_stats(const CoreStats& x, const CoreStats& z, const std::string& what) {
  EXPECT_EQ(x.busy, z.busy) << what;
  EXPECT_EQ(x.stall, z.stall) << what;
  EXPECT_EQ(x.idle, z.idle) << what;
  EXPECT_EQ(x.instructions, z.instructions) << what;
  EXPECT_EQ(x.vector_elems, z.vector_elems) << what;
  EXPECT_EQ(x.tasks_started, z.tasks_started) << what;
  EXPECT_EQ(x.filtered, z.filtered) << what;
}

// A sender and a receiver core run lazily and cycle by cycle (CoreConfig::lazy).
struct LazyRun {
  uint64_t halt;
  CoreStats tx, rx;
  std::vector<uint32_t> data;  // what the receiver computed
  uint32_t mark;               // 77 once its completion task ran
  uint64_t replayed;           // cycles its cores skipped, then replayed
};

// The receiver's completion task (activated when its microthread is done): marks 77, halts.
const std::string kMarkTask = "\nafter:\n li r1, mark\n li r2, 77\n st32 [r1], r2\n halt\n";

LazyRun finish(CoreRig& rig, PeCore* tx, PeCore* rx, const std::string& data) {
  LazyRun r;
  r.halt = rig.run_until_halted();
  r.tx = tx->stats();
  r.rx = rx->stats();
  r.data = rig.read<uint32_t>(rx, data, 64);
  r.mark = rig.read_u32(rx, "mark");
  r.replayed = rx->replayed_cycles() + tx->replayed_cycles();
  return r;
}

// For every sender delay, run(lazy, delay) both ways must agree on the halt cycle, the data and
// every stat; the cycle-by-cycle run replays nothing. Returns the cycles the lazy runs replayed.
template <class Run>
uint64_t expect_lazy_matches(Run run, std::initializer_list<int> delays) {
  uint64_t replayed = 0;
  for (int delay : delays) {
    const LazyRun a = run(false, delay), b = run(true, delay);
    const std::string what = "delay " + std::to_string(delay);
    EXPECT_EQ(a.replayed, 0u) << what;
    replayed += b.replayed;
    EXPECT_EQ(b.halt, a.halt) << what;
    EXPECT_EQ(b.data, a.data) << what;
    EXPECT_EQ(b.mark, 77u) << what;
    expect_same_stats(b.tx, a.tx, "sender, " + what);
    expect_same_stats(b.rx, a.rx, "receiver, " + what);
  }
  return replayed;
}

std::string floats(int n, float scale, float offset) {
  std::string s;
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(scale * static_cast<float>(i) + offset);
  return s;
}

// PE (0,0) streams `n` fp32 values East on color 1; PE (1,0) writes what arrives into y.
// `delay` idle loop iterations in the receiver before it starts reading.
struct Stream {
  CoreRig rig{2};
  PeCore* tx = nullptr;
  PeCore* rx = nullptr;
  Stream(int n, int delay) {
    rig.route(0, 0, 1, R, E);
    rig.route(1, 0, 1, W, R);
    tx = rig.add(0, 0, ".outq 0, 1\n.task 0, main, active\n.data x, fp32, " + floats(n, 1.5f, -3.0f) +
                           "\nmain:\n dmem d0, x, " + std::to_string(n) + ", 1\n dfout d1, 1, " + std::to_string(n) +
                           "\n vmov.fp32 d1, d0\n halt\n");
    rx = rig.add(1, 0, ".inq 0, 1\n.task 0, main, active\n.space y, fp32, " + std::to_string(n) +
                           "\nmain:\n li r1, 0\n li r2, " + std::to_string(delay) +
                           "\nwait:\n bge r1, r2, go\n addi r1, r1, 1\n jmp wait\ngo:\n dmem d0, y, " +
                           std::to_string(n) + ", 1\n dfin d1, 1, " + std::to_string(n) + "\n vmov.fp32 d0, d1\n halt\n");
  }
};

TEST(CoreFabric, VectorOpsStreamThroughFabricDescriptors) {
  Stream s(40, 0);
  s.rig.run_until_halted();
  const auto y = s.rig.read_f32(s.rx, "y", 40);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(y[static_cast<size_t>(i)], 1.5f * static_cast<float>(i) - 3.0f) << i;
  EXPECT_EQ(s.rx->consumed(), 40u);
}

// A ramp filter (filt, fcnt): of 40 wavelets, the receiver takes wavelets 5..12, then, after a
// recount from 20 (wavelet 13 arrives as number 20), numbers 30..33 (wavelets 23..26); the rest
// are dropped at the ramp and never reach the input queue. The same with the core evaluated
// cycle by cycle (CoreConfig::lazy off). A window, once set, applies to every later arrival.
TEST(CoreFabric, RampFilterPassesOnlyItsWindowOfAColor) {
  for (const bool lazy : {true, false}) {
    CoreRig rig(2);
    rig.hw().core.lazy = lazy;
    rig.route(0, 0, 1, R, E);
    rig.route(1, 0, 1, W, R);
    // 13 wavelets, a pause (the receiver sets its second window meanwhile), 27 more.
    rig.add(0, 0, ".outq 0, 1\n.task 0, main, active\n.data x, fp32, " + floats(40, 1.0f, 0.0f) +
                      "\nmain:\n dmem d0, x, 13, 1\n dfout d1, 1, 13\n vmov.fp32 d1, d0\n li r1, 0\n li r2, 100\n"
                      "wait:\n addi r1, r1, 1\n blt r1, r2, wait\n dmem d0, x+52, 27, 1\n li r3, 27\n dlen d1, r3\n"
                      " vmov.fp32 d1, d0\n halt\n");
    PeCore* rx = rig.add(1, 0, R"(
      .inq 0, 1
      .task 0, main, active
      .space y, fp32, 8
      .space z, fp32, 4
      main:
          li   r1, 5
          li   r2, 13
          filt 1, r1, r2          ; wavelets 5..12 of color 1
          dmem d0, y, 8, 1
          dfin d1, 1, 8
          vmov.fp32 d0, d1
          li   r3, 20
          fcnt 1, r3              ; the next one counts as 20
          li   r1, 30
          li   r2, 34
          filt 1, r1, r2
          dmem d2, z, 4, 1
          dfin d3, 1, 4
          vmov.fp32 d2, d3
          halt
    )");
    rig.run_until_halted();
    const std::string what = lazy ? "lazy" : "cycle by cycle";
    const auto y = rig.read_f32(rx, "y", 8), z = rig.read_f32(rx, "z", 4);
    for (int i = 0; i < 8; ++i) EXPECT_EQ(y[static_cast<size_t>(i)], static_cast<float>(5 + i)) << what << " " << i;
    for (int i = 0; i < 4; ++i) EXPECT_EQ(z[static_cast<size_t>(i)], static_cast<float>(23 + i)) << what << " " << i;
    for (int i = 0; i < 200; ++i) rig.fabric().step();  // the rest arrive and are dropped
    EXPECT_EQ(rx->stats().filtered, 28u) << what;
    EXPECT_EQ(rx->consumed(), 40u) << what;
    EXPECT_EQ(rx->input_queue_count(0), 0) << what;
  }
}

// ctl sends a control wavelet after what the queue holds: it moves the sender's router to its
// next switch position (east, then south) and the ramps that take it pass it to no queue.
// A route of two switch positions at (x, y).
void two_positions(CoreRig& rig, int x, int y, int color, SwitchPos p0, SwitchPos p1, bool hold = false) {
  ColorRoute cr;
  cr.npos = 2;
  cr.hold = hold;
  cr.pos[0] = p0;
  cr.pos[1] = p1;
  rig.route(x, y, color, p0.rx, p0.tx);  // creates the router; replaced below
  rig.fabric().set_route(x, y, color, cr);
}

TEST(CoreFabric, ControlWaveletMovesTheSwitchAndReachesNoQueue) {
  for (const bool lazy : {true, false}) {
    CoreRig rig(2, 2);
    rig.hw().core.lazy = lazy;
    two_positions(rig, 0, 0, 1, {port_bit(kRamp), port_bit(kEast)}, {port_bit(kRamp), port_bit(kSouth)});
    rig.route(1, 0, 1, W, R);
    rig.route(0, 1, 1, N, R);
    rig.add(0, 0, ".outq 0, 1\n.task 0, main, active\n.data x, fp32, 1.0, 2.0, 3.0, 4.0, 5.0\n"
                  "main:\n dmem d0, x, 3, 1\n dfout d1, 1, 3\n vmov.fp32 d1, d0\n ctl 1\n"
                  " dmem d0, x+12, 2, 1\n dfout d1, 1, 2\n vmov.fp32 d1, d0\n halt\n");
    PeCore* east = rig.add(1, 0, ".inq 0, 1\n.task 0, main, active\n.space y, fp32, 3\n"
                                 "main:\n dmem d0, y, 3, 1\n dfin d1, 1, 3\n vmov.fp32 d0, d1\n halt\n");
    PeCore* south = rig.add(0, 1, ".inq 0, 1\n.task 0, main, active\n.space y, fp32, 2\n"
                                  "main:\n dmem d0, y, 2, 1\n dfin d1, 1, 2\n vmov.fp32 d0, d1\n halt\n");
    rig.run_until_halted();
    for (int i = 0; i < 50; ++i) rig.fabric().step();
    const std::string what = lazy ? "lazy" : "cycle by cycle";
    EXPECT_EQ(rig.read_f32(east, "y", 3), (std::vector<float>{1, 2, 3})) << what;
    EXPECT_EQ(rig.read_f32(south, "y", 2), (std::vector<float>{4, 5})) << what;
    EXPECT_EQ(east->stats().control, 1u) << what;
    EXPECT_EQ(east->input_queue_count(0), 0) << what;
    EXPECT_EQ(south->stats().control, 0u) << what;
  }
}

// swadv moves only its own router on, once what the core queued before it has left; with hold
// the last position stays, so a control wavelet passing later changes nothing. The middle PE
// sends 2 values west and then forwards what comes from the east: 3 values, the east PE's
// control wavelet (which reaches the west PE's ramp) and one more value. Without hold that
// control wavelet turns the middle router back to its ramp and the last value waits there.
TEST(CoreFabric, SwitchAdvanceMovesOnlyItsOwnRouterAndHoldKeepsTheLastPosition) {
  for (const bool hold : {true, false}) {
    for (const bool lazy : {true, false}) {
      CoreRig rig(3);
      rig.hw().core.lazy = lazy;
      two_positions(rig, 1, 0, 1, {port_bit(kRamp), port_bit(kWest)}, {port_bit(kEast), port_bit(kWest)}, hold);
      rig.route(0, 0, 1, E, R);
      rig.route(2, 0, 1, R, W);
      PeCore* west = rig.add(0, 0, ".inq 0, 1\n.task 0, main, active\n.space y, fp32, 6\n"
                                   "main:\n dmem d0, y, 6, 1\n dfin d1, 1, 6\n vmov.fp32 d0, d1\n halt\n");
      rig.add(1, 0, ".outq 0, 1\n.task 0, main, active\n.data x, fp32, 1.0, 2.0\n"
                    "main:\n dmem d0, x, 2, 1\n dfout d1, 1, 2\n vmov.fp32 d1, d0\n swadv 1\n halt\n");
      rig.add(2, 0, ".outq 0, 1\n.task 0, main, active\n.data x, fp32, 3.0, 4.0, 5.0, 6.0\n"
                    "main:\n dmem d0, x, 3, 1\n dfout d1, 1, 3\n vmov.fp32 d1, d0\n ctl 1\n"
                    " dmem d0, x+12, 1, 1\n dfout d1, 1, 1\n vmov.fp32 d1, d0\n halt\n");
      const std::string what = std::string(hold ? "hold" : "cyclic") + (lazy ? ", lazy" : ", cycle by cycle");
      for (int i = 0; i < 300; ++i) rig.fabric().step();
      const auto y = rig.read_f32(west, "y", 6);
      EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 5), (std::vector<float>{1, 2, 3, 4, 5})) << what;
      EXPECT_EQ(west->stats().control, 1u) << what;  // the swadv never left its router
      EXPECT_EQ(west->halted(), hold) << what;
      if (hold) {
        EXPECT_EQ(y[5], 6.0f) << what;
      }
      EXPECT_EQ(rig.fabric().router(1, 0)->switch_position(1), hold ? 1 : 0) << what;  // cyclic: back to 0
    }
  }
}

// ctl and swadv name a color the core sends on.
TEST(CoreFabric, ControlOnAColorWithoutOutputQueueIsRejected) {
  CoreRig rig(1);
  EXPECT_THROW(rig.add(0, 0, ".task 0, main, active\nmain:\n ctl 3\n halt\n"), ConfigError);
  EXPECT_THROW(rig.add(0, 0, ".task 0, main, active\nmain:\n swadv 3\n halt\n"), ConfigError);
}

// filt and fcnt name a color the core has an input queue for.
TEST(CoreFabric, RampFilterOnAColorWithoutInputQueueIsRejected) {
  CoreRig rig(1);
  EXPECT_THROW(rig.add(0, 0, ".task 0, main, active\nmain:\n filt 3, r0, r0\n halt\n"), ConfigError);
  EXPECT_THROW(rig.add(0, 0, ".task 0, main, active\nmain:\n fcnt 3, r0\n halt\n"), ConfigError);
}

// The example of docs/isa.md: a PE that scales what arrives and sends it on, fabric to fabric.
TEST(CoreFabric, VectorOpReadsAndWritesTheFabricDirectly) {
  CoreRig rig(3);
  rig.route(0, 0, 1, R, E);
  rig.route(1, 0, 1, W, R);
  rig.route(1, 0, 2, R, E);
  rig.route(2, 0, 2, W, R);
  rig.add(0, 0, ".outq 0, 1\n.task 0, main, active\n.data x, fp32, " + floats(16, 1.0f, 0.5f) +
                    "\nmain:\n dmem d0, x, 16, 1\n dfout d1, 1, 16\n vmov.fp32 d1, d0\n halt\n");
  rig.add(1, 0, R"(
    .inq 0, 1
    .outq 0, 2
    .task 0, main, active
    main:
        dfin  d0, 1, 16
        dfout d1, 2, 16
        lif   r1, 3.0
        vmuls.fp32 d1, d0, r1      ; straight from the fabric to the fabric
        halt
  )");
  PeCore* rx = rig.add(2, 0, ".inq 1, 2\n.task 0, main, active\n.space y, fp32, 16\nmain:\n"
                             " dmem d0, y, 16, 1\n dfin d1, 2, 16\n vmov.fp32 d0, d1\n halt\n");
  rig.run_until_halted();
  const auto y = rig.read_f32(rx, "y", 16);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(y[static_cast<size_t>(i)], 3.0f * (static_cast<float>(i) + 0.5f)) << i;
}

TEST(CoreFabric, SlowConsumerStallsTheProducersVectorOpAndNothingIsLost) {
  Stream fast(64, 0), slow(64, 200);
  fast.rig.run_until_halted();
  slow.rig.run_until_halted();
  // The producer's vmov cannot finish before the consumer drains all but what the output
  // queue, the router buffers and the input queue hold.
  EXPECT_GT(slow.tx->stats().stall, fast.tx->stats().stall + 100);
  const auto y = slow.rig.read_f32(slow.rx, "y", 64);
  for (int i = 0; i < 64; ++i) EXPECT_EQ(y[static_cast<size_t>(i)], 1.5f * static_cast<float>(i) - 3.0f) << i;
}

const char* kDataTaskRx = R"(
  .inq 2, 1
  .space y, fp32, 4
  .space count, i32, 1
  .task 5, on_x, color=1%s
  .task 0, main, active
  main:
    li r3, y
    li r4, count
    exit
  on_x:
    st32 [r3], r15       ; the wavelet's payload arrives in r15
    addi r3, r3, 4
    ld32 r5, [r4]
    addi r5, r5, 1
    st32 [r4], r5
    exit
)";

std::string rx_program(bool blocked) {
  char buf[1024];
  std::snprintf(buf, sizeof buf, kDataTaskRx, blocked ? ", blocked" : "");
  return buf;
}

const char* kFourWaveletTx = R"(
  .outq 0, 1
  .data x, fp32, 10, 20, 30, 40
  .task 0, main, active
  main:
    li r1, 0
    li r2, 30
  wait:
    addi r1, r1, 1
    blt r1, r2, wait      ; send well after the receiver has gone idle
    dmem d0, x, 4, 1
    dfout d1, 1, 4
    vmov.fp32 d1, d0
    halt
)";

// kFourWaveletTx at (0,0) sends East on color 1 to the data-task receiver at (1,0).
struct FourWavelets {
  CoreRig rig{2};
  PeCore* tx = nullptr;
  PeCore* rx = nullptr;
  explicit FourWavelets(bool blocked) {
    rig.route(0, 0, 1, R, E);
    rig.route(1, 0, 1, W, R);
    tx = rig.add(0, 0, kFourWaveletTx);
    rx = rig.add(1, 0, rx_program(blocked));
  }
};

TEST(CoreFabric, DataTaskRunsOncePerWaveletAndOnlyAfterItArrives) {
  FourWavelets s(false);
  CoreRig& rig = s.rig;
  PeCore* tx = s.tx;
  PeCore* rx = s.rx;
  for (int t = 0; t < 60; ++t) rig.fabric().step();
  EXPECT_EQ(rx->stats().tasks_started, 1u) << "only main ran before anything was sent";
  EXPECT_EQ(rig.read_u32(rx, "count"), 0u);
  rig.halt_cycle(tx);
  for (int t = 0; t < 100; ++t) rig.fabric().step();
  EXPECT_EQ(rig.read_u32(rx, "count"), 4u);
  EXPECT_EQ(rig.read_f32(rx, "y", 4), (std::vector<float>{10, 20, 30, 40}));
  EXPECT_EQ(rx->stats().tasks_started, 5u);
}

TEST(CoreFabric, BlockedDataTaskDoesNotRun) {
  FourWavelets s(true);
  CoreRig& rig = s.rig;
  PeCore* tx = s.tx;
  PeCore* rx = s.rx;
  rig.halt_cycle(tx);
  for (int t = 0; t < 200; ++t) rig.fabric().step();
  EXPECT_EQ(rig.read_u32(rx, "count"), 0u);
  EXPECT_EQ(rx->input_queue_count(2), 4) << "queue 2 (depth 4) holds what the blocked task did not take";
}

TEST(CoreFabric, AsyncOpRunsBesideMainAndActivatesATaskWhenDone) {
  CoreRig rig(1);
  PeCore* c = rig.add(0, 0, R"(
    .task 0, main, active
    .task 3, after
    .data a, fp32, 1, 2, 3, 4, 5, 6, 7, 8
    .data b, fp32, 8, 7, 6, 5, 4, 3, 2, 1
    .space y, fp32, 8
    .space mark, i32, 2
    main:
      dmem d0, a, 8, 1
      dmem d1, b, 8, 1
      dmem d2, y, 8, 1
      vadd.fp32 d2, d0, d1, async=2, done=activate:3
      li r1, 11
      li r2, mark
      st32 [r2], r1       ; the main thread goes on while the add runs
      exit
    after:
      li r2, mark
      li r1, 22
      st32 [r2+4], r1
      halt
  )");
  rig.halt_cycle(c);
  EXPECT_EQ(rig.read_f32(c, "y", 8), std::vector<float>(8, 9.0f));
  EXPECT_EQ(rig.read_u32(c, "mark", 0), 11u);
  EXPECT_EQ(rig.read_u32(c, "mark", 1), 22u);
  EXPECT_EQ(c->stats().tasks_started, 2u);
}

// Every arithmetic op against a plain C++ reference on the same inputs (fp32).
TEST(CoreFabric, ArithmeticMatchesReference) {
  const float a[6] = {1.5f, -2.25f, 0.0f, 3.0f, -0.5f, 7.0f};
  const float b[6] = {0.5f, 4.0f, -1.0f, 3.0f, -0.25f, 2.0f};
  const float c0[6] = {1.0f, 1.0f, 2.0f, -3.0f, 0.5f, 0.125f};
  struct Case {
    const char* op;
    float (*ref)(float, float, float);
  };
  const Case cases[] = {
      {"vadd.fp32 d3, d0, d1", [](float x, float y, float) { return x + y; }},
      {"vsub.fp32 d3, d0, d1", [](float x, float y, float) { return x - y; }},
      {"vmul.fp32 d3, d0, d1", [](float x, float y, float) { return x * y; }},
      {"vmax.fp32 d3, d0, d1", [](float x, float y, float) { return std::fmax(x, y); }},
      {"vfmac.fp32 d3, d0, d1, d2", [](float x, float y, float z) { return std::fma(x, y, z); }},
      {"vrelu.fp32 d3, d0", [](float x, float, float) { return x > 0 ? x : 0.0f; }},
      {"vdrelu.fp32 d3, d0, d1", [](float x, float y, float) { return x > 0 ? y : 0.0f; }},
      {"vexp.fp32 d3, d0", [](float x, float, float) { return std::exp(x); }},
      {"vrecip.fp32 d3, d1", [](float, float y, float) { return 1.0f / y; }},
      {"vlog.fp32 d3, d1", [](float, float y, float) { return std::log(y); }},
      {"vcmpgt.fp32 d3, d0, d1", [](float x, float y, float) { return x > y ? 1.0f : 0.0f; }},
      {"vsel.fp32 d3, d2, d0, d1", [](float x, float y, float z) { return z != 0 ? x : y; }},
      {"vaxpy.fp32 d3, d0, r1", [](float x, float, float) { return std::fma(0.75f, x, 0.0f); }},
      {"vmuls.fp32 d3, d0, r1", [](float x, float, float) { return x * 0.75f; }},
      {"vfill.fp32 d3, r1", [](float, float, float) { return 0.75f; }},
  };
  for (const Case& k : cases) {
    CoreRig rig(1);
    PeCore* c = rig.add(0, 0, std::string(".task 0, main, active\n.data a, fp32, ") +
                                  "1.5, -2.25, 0, 3, -0.5, 7\n.data b, fp32, 0.5, 4, -1, 3, -0.25, 2\n"
                                  ".data c, fp32, 1, 1, 2, -3, 0.5, 0.125\n.space y, fp32, 6\n"
                                  "main:\n dmem d0, a, 6, 1\n dmem d1, b, 6, 1\n dmem d2, c, 6, 1\n"
                                  " dmem d3, y, 6, 1\n lif r1, 0.75\n " +
                                  k.op + "\n halt\n");
    rig.halt_cycle(c);
    const auto y = rig.read_f32(c, "y", 6);
    for (int i = 0; i < 6; ++i) {
      const auto u = static_cast<size_t>(i);
      EXPECT_EQ(f32_bits(y[u]), f32_bits(k.ref(a[i], b[i], c0[i]))) << k.op << " element " << i;
    }
  }
}

TEST(CoreFabric, ConversionsAndMixedPrecisionMatchNumberFormats) {
  CoreRig rig(1);
  PeCore* c = rig.add(0, 0, R"(
    .task 0, main, active
    .data x, fp32, 0.1, -3.14159, 65504, 70000, 1e-8, 2.5
    .space h, fp16, 6
    .space cb, cb16, 6
    .space bf, bf16, 6
    .data w, fp16, 0.5, 0.25, -2, 1, 3, 0.1
    .data acc, fp32, 1, 1, 1, 1, 1, 1
    .space s, fp32, 1
    main:
      dmem d0, x, 6, 1
      dmem d1, h, 6, 1
      dmem d2, cb, 6, 1
      dmem d3, bf, 6, 1
      vcvt.fp32.fp16 d1, d0
      vcvt.fp32.cb16 d2, d0
      vcvt.fp32.bf16 d3, d0
      dmem d4, w, 6, 1
      dmem d5, acc, 6, 1
      vfmac.fp16.fp32 d5, d4, d1, d5     ; fp16 sources, fp32 accumulator
      vsum.fp32 r7, d5
      li r8, s
      st32 [r8], r7
      halt
  )");
  rig.halt_cycle(c);
  const float x[6] = {0.1f, -3.14159f, 65504.0f, 70000.0f, 1e-8f, 2.5f};
  const float w[6] = {0.5f, 0.25f, -2.0f, 1.0f, 3.0f, 0.1f};
  const auto h = rig.read<uint16_t>(c, "h", 6), cb = rig.read<uint16_t>(c, "cb", 6), bf = rig.read<uint16_t>(c, "bf", 6);
  const auto acc = rig.read_f32(c, "acc", 6);
  const int bias = rig.hw().core.cb16_bias;
  float sum = 0;
  for (int i = 0; i < 6; ++i) {
    const auto u = static_cast<size_t>(i);
    EXPECT_EQ(h[u], f32_to_f16(x[i])) << i;
    EXPECT_EQ(cb[u], f32_to_cb16(x[i], bias)) << i;
    EXPECT_EQ(bf[u], f32_to_bf16(x[i])) << i;
    const float ref = std::fma(f16_to_f32(f32_to_f16(w[i])), f16_to_f32(h[u]), 1.0f);
    EXPECT_EQ(f32_bits(acc[u]), f32_bits(ref)) << i;
    sum += ref;
  }
  EXPECT_EQ(rig.read_u32(c, "s"), f32_bits(sum));
}

// Elements go in order, each read after the previous one's write: a stride-0 destination that is
// also the addend accumulates, one fused multiply-add after another (the weight-streaming dW of
// narrow slices), and a strided source walks a column of a row-major block; one element a step.
TEST(CoreFabric, StrideZeroDestinationAccumulatesInElementOrder) {
  CoreRig rig(1);
  PeCore* c = rig.add(0, 0, R"(
    .task 0, main, active
    .data a, fp32, 0.1, 3.0, -7.25, 1e-3, 2.5, 0.3
    .data m, fp32, 1.1, 9.0, 2.2, 9.0, 3.3, 9.0, 4.4, 9.0, 5.5, 9.0, 6.6, 9.0
    .data acc, fp32, 0.5
    main:
      dmem d0, a, 6, 1
      dmem d1, m, 6, 2
      dmem d2, acc, 6, 0
      vfmac.fp32 d2, d0, d1, d2
      halt
  )");
  rig.halt_cycle(c);
  const float a[6] = {0.1f, 3.0f, -7.25f, 1e-3f, 2.5f, 0.3f};
  const float m[6] = {1.1f, 2.2f, 3.3f, 4.4f, 5.5f, 6.6f};
  float acc = 0.5f;
  for (int i = 0; i < 6; ++i) acc = std::fma(a[i], m[i], acc);
  EXPECT_EQ(f32_bits(rig.read_f32(c, "acc", 1)[0]), f32_bits(acc));
  EXPECT_EQ(c->stats().vector_elems, 6u);
}

// drows gives a memory descriptor rows: a window of a plane (rows of 3 elements, stride 2, rows
// 8 apart) as one operand of a vaxpy into a 2-D destination (rows of 3, 4 apart), one element a
// step; dmem makes it one-dimensional again; a 2-D operand outside SRAM faults. The
// convolutions of weight streaming read their taps' windows this way (ws_codegen.cc).
TEST(CoreFabric, TwoDimensionalDescriptorsWalkRowsOfAPlane) {
  CoreRig rig(1);
  std::string plane;
  for (int i = 0; i < 32; ++i) plane += (i ? ", " : "") + std::to_string(i) + ".5";
  PeCore* c = rig.add(0, 0, R"(
    .task 0, main, active
    .data x, fp32, )" + plane + R"(
    .space y, fp32, 12
    .space z, fp32, 4
    main:
      dmem d0, x, 9, 2
      li r1, 3
      li r2, 8
      drows d0, r1, r2
      dmem d1, y, 9, 1
      li r2, 4
      drows d1, r1, r2
      lif r3, 2.0
      vaxpy.fp32 d1, d0, r3
      dmem d0, x, 4, 1
      dmem d2, z, 4, 1
      vmov.fp32 d2, d0
      halt
  )");
  rig.halt_cycle(c);
  const auto y = rig.read_f32(c, "y", 12), z = rig.read_f32(c, "z", 4);
  for (int r = 0; r < 3; ++r) {
    for (int k = 0; k < 3; ++k) EXPECT_EQ(y[static_cast<size_t>(4 * r + k)], 2.0f * (static_cast<float>(8 * r + 2 * k) + 0.5f)) << r << "," << k;
    EXPECT_EQ(y[static_cast<size_t>(4 * r + 3)], 0.0f) << "the gap between the destination's rows";
  }
  for (int i = 0; i < 4; ++i) EXPECT_EQ(z[static_cast<size_t>(i)], static_cast<float>(i) + 0.5f) << "dmem: one-dimensional again";
  EXPECT_EQ(c->stats().vector_elems, 13u);

  CoreRig bad(1);
  bad.add(0, 0, R"(
    .task 0, main, active
    .space x, fp32, 4
    .space y, fp32, 4
    main:
      dmem d0, x, 4, 1
      li r1, 2
      li r2, 100000
      drows d0, r1, r2
      dmem d1, y, 4, 1
      vmov.fp32 d1, d0
      halt
  )");
  try {
    bad.run_until_halted(1000);
    FAIL() << "expected a PeFaultError";
  } catch (const PeFaultError& e) {
    EXPECT_TRUE(contains(e.what(), "outside SRAM")) << e.what();
  }
}

// Same program, same results and cycle counts whatever the thread count and visiting order.
TEST(CoreFabric, DeterministicAcrossThreadsAndVisitOrders) {
  struct Result {
    uint64_t halt;
    CoreStats tx, rx;
    std::vector<float> y;
  };
  auto run = [](int threads, VisitOrder order) {
    CoreRig rig(1, 4);
    rig.hw().sim.threads = threads;
    rig.hw().sim.threaded_visits = 0;  // every cycle threaded (the default runs small cycles on one)
    rig.hw().sim.visit_order = order;
    rig.route(0, 0, 1, R, S);
    rig.route(0, 1, 1, N, S);
    rig.route(0, 2, 1, N, S);
    rig.route(0, 3, 1, N, R);
    PeCore* tx = rig.add(0, 0, ".outq 0, 1\n.task 0, main, active\n.data x, fp32, " + floats(50, 0.25f, 1.0f) +
                                   "\nmain:\n dmem d0, x, 50, 1\n dfout d1, 1, 50\n vmov.fp32 d1, d0\n halt\n");
    PeCore* rx = rig.add(0, 3, ".inq 3, 1\n.task 0, main, active\n.space y, fp32, 50\nmain:\n"
                                   " dmem d0, y, 50, 1\n dfin d1, 1, 50\n lif r1, 3.0\n vmuls.fp32 d0, d1, r1\n halt\n");
    Result r;
    r.halt = rig.run_until_halted();
    r.tx = tx->stats();
    r.rx = rx->stats();
    r.y = rig.read_f32(rx, "y", 50);
    return r;
  };
  const Result ref = run(1, VisitOrder::kForward);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(ref.y[static_cast<size_t>(i)], (0.25f * static_cast<float>(i) + 1.0f) * 3.0f);
  for (int threads : {1, 2, 3}) {
    for (VisitOrder order : {VisitOrder::kForward, VisitOrder::kReverse, VisitOrder::kShuffle}) {
      const Result r = run(threads, order);
      EXPECT_EQ(r.halt, ref.halt) << threads << " threads, " << visit_order_name(order);
      EXPECT_EQ(r.y, ref.y);
      for (auto [a, b] : {std::pair<CoreStats, CoreStats>{r.tx, ref.tx}, {r.rx, ref.rx}}) {
        EXPECT_EQ(a.busy, b.busy);
        EXPECT_EQ(a.stall, b.stall);
        EXPECT_EQ(a.idle, b.idle);
        EXPECT_EQ(a.instructions, b.instructions);
      }
    }
  }
}

// The sender of the lazy-core tests on a 2-PE rig: PE (0,0) spins `delay` loop iterations, then
// streams 40 fp32 values East on color 1 to PE (1,0)'s ramp in one vector op.
PeCore* add_late_sender(CoreRig& rig, bool lazy, int delay) {
  rig.hw().core.lazy = lazy;
  rig.route(0, 0, 1, R, E);
  rig.route(1, 0, 1, W, R);
  return rig.add(0, 0, ".outq 0, 1\n.task 0, main, active\n.data x, fp32, " + floats(40, 0.5f, 1.0f) +
                           "\nmain:\n li r1, 0\n li r2, " + std::to_string(delay) +
                           "\nwait:\n bge r1, r2, go\n addi r1, r1, 1\n jmp wait\ngo:\n"
                           " dmem d0, x, 40, 1\n dfout d1, 1, 40\n vmov.fp32 d1, d0\n halt\n");
}

// A sender at (0,0) that sends 40 fp32 values on color 1 one at a time, spinning `delay` loop
// iterations after each (scalar loops, no microthread); the caller routes color 1 from its ramp.
PeCore* add_paced_sender(CoreRig& rig, int delay) {
  return rig.add(0, 0, ".outq 0, 1\n.task 0, main, active\n.data x, fp32, " + floats(40, 0.5f, 1.0f) +
                           "\nmain:\n dmem d0, x, 1, 1\n dfout d1, 1, 1\n li r5, 0\n li r6, 40\n"
                           "next:\n vmov.fp32 d1, d0\n daddb d0, 4\n li r1, 0\n li r2, " +
                           std::to_string(delay) +
                           "\nwait:\n bge r1, r2, go\n addi r1, r1, 1\n jmp wait\ngo:\n"
                           " addi r5, r5, 1\n blt r5, r6, next\n halt\n");
}

// A core whose microthread waits for wavelets while its main thread runs SRAM-only vector ops
// skips those cycles and replays them when a wavelet comes (CoreConfig::lazy): the main thread's
// ops read what the microthread writes from the fabric, so any change in the interleaving would
// change the data, the cycle counts or the stats. Lazy and cycle-by-cycle runs must agree bit for
// bit, for senders that start before, during and after the main thread's ops.
TEST(CoreFabric, LazyCoreReplaysSkippedCyclesExactly) {
  auto run = [](bool lazy, int delay) {
    CoreRig rig(2);
    PeCore* tx = add_late_sender(rig, lazy, delay);
    PeCore* rx = rig.add(1, 0, R"(
      .inq 0, 1
      .task 0, main, active
      .task 3, after
      .space buf, fp32, 64
      .data c, fp32, )" + floats(64, 0.125f, -2.0f) + R"(
      .space y, fp32, 64
      .space mark, i32, 1
      main:
        dmem d0, buf, 40, 1
        dfin d1, 1, 40
        vmov.fp32 d0, d1, async=2, done=activate:3   ; microthread: fabric -> buf
        dmem d2, c, 64, 1
        dmem d3, y, 64, 1
        dmem d4, buf, 64, 1
        dmem d5, y, 64, 2
        li r3, 0
        li r4, 6
      again:
        vadd.fp32 d3, d2, d4       ; reads buf while the microthread fills it
        vadd.fp32 d4, d4, d3       ; and writes it back (bank conflicts with itself)
        vmuls.fp32 d5, d4, r4      ; stride 2: one element per step
        addi r3, r3, 1
        blt r3, r4, again
        exit
    )" + kMarkTask);
    return finish(rig, tx, rx, "y");
  };
  const uint64_t replayed = expect_lazy_matches(run, {0, 5, 20, 60, 150, 400});
  EXPECT_GT(replayed, 500u) << "the lazy runs skipped (almost) nothing: the test no longer covers the replay";
}

// A producer whose output queue and router ramp buffer are full (its consumer reads late) has
// nothing to do until the router forwards that buffer's head, and the router then evaluates it
// in the next cycle, so a lazy producer sleeps meanwhile (PeCore::m_outq_wait) and replays the
// stalled cycles when woken. Lazy and cycle-by-cycle runs must agree bit for bit, for consumers
// that read at once and ones that read hundreds of cycles late.
TEST(CoreFabric, ProducerSleepsOnAFullRampBufferExactly) {
  uint64_t tx_evals[2] = {0, 0};  // the producer's evaluations, cycle by cycle and lazy
  auto run = [&](bool lazy, int delay) {
    CoreRig rig(2);
    rig.hw().core.lazy = lazy;
    rig.route(0, 0, 1, R, E);
    rig.route(1, 0, 1, W, R);
    PeCore* tx = rig.add(0, 0, ".outq 0, 1\n.task 0, main, active\n.data x, fp32, " + floats(64, 1.5f, -3.0f) +
                                   "\nmain:\n dmem d0, x, 64, 1\n dfout d1, 1, 64\n vmov.fp32 d1, d0\n halt\n");
    PeCore* rx = rig.add(1, 0, ".inq 0, 1\n.task 0, main, active\n.space y, fp32, 64\n.space mark, i32, 1\nmain:\n"
                               " li r1, 0\n li r2, " + std::to_string(delay) +
                                   "\nwait:\n bge r1, r2, go\n addi r1, r1, 1\n jmp wait\ngo:\n dmem d0, y, 64, 1\n"
                                   " dfin d1, 1, 64\n vmov.fp32 d0, d1\n li r1, mark\n li r2, 77\n st32 [r1], r2\n halt\n");
    LazyRun r = finish(rig, tx, rx, "y");
    tx_evals[lazy] += tx->evaluations();
    return r;
  };
  expect_lazy_matches(run, {0, 1, 3, 40, 200, 500});
  // The consumer reads over 2,000 cycles late in all; the lazy producer sleeps through them.
  EXPECT_GT(tx_evals[0], 2000u);
  EXPECT_LT(tx_evals[1] * 4, tx_evals[0]) << "the producer did not sleep on its full ramp buffer";
}

// The same for scalar code: a receiver's main thread runs integer loops, loads from the buffer
// its microthread fills from the fabric, descriptor updates and stores, while wavelets come
// one at a time from a sender that spins between them (its own scalar loops, with no
// microthread). Lazy cores replay the pure scalar runs and sleep through the ramp latency of
// a queued wavelet; cycles, data and every stat must be those of cycle-by-cycle evaluation.
TEST(CoreFabric, LazyCoreReplaysScalarRunsExactly) {
  auto run = [](bool lazy, int delay) {
    CoreRig rig(3);
    rig.hw().core.lazy = lazy;
    rig.route(0, 0, 1, R, E);
    rig.route(1, 0, 1, W, E);
    rig.route(2, 0, 1, W, R);
    PeCore* tx = add_paced_sender(rig, delay);
    PeCore* rx = rig.add(2, 0, R"(
      .inq 0, 1
      .task 0, main, active
      .task 3, after
      .space buf, fp32, 40
      .space out, i32, 64
      .space mark, i32, 1
      main:
        dmem d0, buf, 40, 1
        dfin d1, 1, 40
        vmov.fp32 d0, d1, async=2, done=activate:3   ; microthread: fabric -> buf
        li r3, 0
        li r4, 64
        li r5, 7
        li r7, 3
        li r8, buf
        li r9, out
        li r12, 31
        li r13, 2
      loop:
        mul r5, r5, r7
        and r11, r3, r12
        shl r11, r11, r13
        add r11, r11, r8
        ld32 r6, [r11]             ; reads buf while the microthread fills it
        add r5, r5, r6
        dmem d2, buf, 4, 1
        daddb d2, 4
        li r10, 0
      inner:                       ; a pure run of its own
        addi r10, r10, 1
        blt r10, r3, inner
        st32 [r9], r5              ; ends a run
        addi r9, r9, 4
        addi r3, r3, 1
        blt r3, r4, loop
        exit
    )" + kMarkTask);
    return finish(rig, tx, rx, "out");
  };
  const uint64_t replayed = expect_lazy_matches(run, {0, 1, 3, 10, 40});
  EXPECT_GT(replayed, 2000u) << "the lazy runs skipped (almost) nothing: the test no longer covers the replay";
}

// A wavelet delivered to a core that sleeps inside a task or an op lets it sleep on until the
// wavelet is readable; an idle core is evaluated when it arrives, as its evaluations count idle
// cycles. Here the receiver is idle between wavelets (a data task takes each one; the lazy
// tests above cover cores asleep inside an op): cycles, data and every stat must be those of
// cycle-by-cycle evaluation (it fails if an idle core sleeps through the ramp latency too).
TEST(CoreFabric, DeliveryWakesOnlyIdleCoresAtOnce) {
  uint64_t rx_evals[2] = {0, 0}, rx_replayed[2] = {0, 0};  // the receiver's, cycle by cycle and lazy
  auto run = [&](bool lazy, int delay) {
    CoreRig rig(2);
    rig.hw().core.lazy = lazy;
    rig.route(0, 0, 1, R, E);
    rig.route(1, 0, 1, W, R);
    PeCore* tx = add_paced_sender(rig, delay);
    PeCore* rx = rig.add(1, 0, R"(
      .inq 2, 1
      .space y, fp32, 64
      .space mark, i32, 1
      .task 5, on_x, color=1
      .task 0, main, active
      main:
        li r3, y
        li r4, 0
        li r6, 40
        exit
      on_x:
        st32 [r3], r15           ; the wavelet's payload arrives in r15
        addi r3, r3, 4
        addi r4, r4, 1
        blt r4, r6, more
        li r1, mark
        li r2, 77
        st32 [r1], r2
        halt
      more:
        exit
    )");
    LazyRun r = finish(rig, tx, rx, "y");
    rx_evals[lazy] += rx->evaluations();
    rx_replayed[lazy] += rx->replayed_cycles();
    return r;
  };
  expect_lazy_matches(run, {0, 1, 2, 5, 30});
  // The lazy path ran: the lazy receiver skipped cycles inside its data tasks and replayed them
  // (1,425 in all, measured; none cycle by cycle) and was evaluated about 40 % fewer times than
  // cycle by cycle (976 against 1,601), so the equal results above compare two schedules.
  EXPECT_EQ(rx_replayed[0], 0u);
  EXPECT_GT(rx_replayed[1], 1000u) << "the lazy receiver skipped (almost) nothing: the test no longer covers the lazy path";
  EXPECT_LT(rx_evals[1] * 3, rx_evals[0] * 2) << "lazy " << rx_evals[1] << " evaluations, cycle by cycle " << rx_evals[0];
}

// A lazy window that runs past an SRAM-only vector op into the scalar code after it must not
// guess that code from the registers and SRAM as they are before the op's skipped steps: here
// a vsum's result decides a branch (to a store and a vector op, which a lazy core must not
// replay, or to a pure loop), and a load reads what the op before it wrote.
TEST(CoreFabric, LazyCoreDoesNotGuessPastItsVectorOp) {
  auto run = [](bool lazy, int delay) {
    CoreRig rig(2);
    PeCore* tx = add_late_sender(rig, lazy, delay);
    PeCore* rx = rig.add(1, 0, R"(
      .inq 0, 1
      .task 0, main, active
      .task 3, after
      .space buf, fp32, 40
      .data c, fp32, )" + floats(32, 0.25f, -3.0f) + R"(
      .space t, fp32, 32
      .space out, i32, 64
      .space mark, i32, 1
      main:
        dmem d0, buf, 40, 1
        dfin d1, 1, 40
        vmov.fp32 d0, d1, async=2, done=activate:3   ; microthread: fabric -> buf
        dmem d2, c, 32, 1
        dmem d3, t, 32, 1
        li r3, 0
        li r4, 12
        li r6, 0
        li r8, t
        addi r8, r8, 124           ; t[31]: written by the vadd's last step
        li r9, out
      loop:
        vsum.fp32 r5, d2           ; r5 is 0 before it ends
        bne r5, r6, taken          ; decided by the sum
        li r10, 0
      spin:                        ; a pure run
        addi r10, r10, 1
        blt r10, r4, spin
        jmp next
      taken:
        st32 [r9], r5
        addi r9, r9, 4
        vadd.fp32 d3, d2, d2       ; t = 2c
        ld32 r11, [r8]             ; reads what the vadd wrote (0 before)
        bne r11, r6, keep          ; decided by it
        li r10, 0
      spin2:                       ; a pure run
        addi r10, r10, 1
        blt r10, r4, spin2
      keep:
        st32 [r9], r11
        addi r9, r9, 4
      next:
        li r5, 0
        st32 [r8], r6              ; t[31] = 0 again
        addi r3, r3, 1
        blt r3, r4, loop
        exit
    )" + kMarkTask);
    return finish(rig, tx, rx, "out");
  };
  const uint64_t replayed = expect_lazy_matches(run, {0, 10, 60, 200, 600});
  EXPECT_GT(replayed, 200u) << "the lazy runs skipped (almost) nothing: the test no longer covers the replay";
}

TEST(CoreFabric, ProgramErrorStopsTheRunNamingThePe) {
  CoreRig rig(2);
  rig.add(1, 0, R"(
    .task 0, main, active
    main:
      dmem d0, 60000, 16, 1    ; past the end of 48 KB
      dmem d1, 60000, 16, 1
      vmov.fp32 d1, d0
      halt
  )");
  try {
    rig.run_until_halted(100);
    FAIL() << "expected a PeFaultError";
  } catch (const PeFaultError& e) {
    EXPECT_TRUE(contains(e.what(), "wafer.pe_1_0")) << e.what();
    EXPECT_TRUE(contains(e.what(), "outside SRAM")) << e.what();
  }
}

// A descriptor's length is 16 bits: dlen takes 65,535 and faults above it, naming the length.
TEST(CoreFabric, DescriptorLengthAboveSixteenBitsFaults) {
  for (const uint32_t n : {65535u, 65536u}) {
    CoreRig rig(1);
    rig.add(0, 0, R"(
      .task 0, main, active
      main:
        dmem d0, 0, 1, 0
        li r1, )" + std::to_string(n) + R"(
        dlen d0, r1
        halt
    )");
    if (n == 65535) {
      EXPECT_NO_THROW(rig.run_until_halted(100));
      continue;
    }
    try {
      rig.run_until_halted(100);
      FAIL() << "expected a PeFaultError";
    } catch (const PeFaultError& e) {
      EXPECT_TRUE(contains(e.what(), "dlen of 65536 elements: a descriptor covers at most 65535")) << e.what();
    }
  }
}

TEST(CoreFabric, ImageLargerThanSramIsRejected) {
  CoreRig rig(1);
  rig.hw().core.sram_kb = 1;
  try {
    rig.add(0, 0, ".task 0, main, active\n.space big, fp32, 300\nmain:\n halt\n");
    FAIL() << "expected an error";
  } catch (const AsmError& e) {
    EXPECT_TRUE(contains(e.what(), "does not fit in SRAM")) << e.what();
    EXPECT_TRUE(contains(e.what(), "184 more")) << e.what();
  }
  // An image built for a bigger core is refused by the core itself.
  PeImage img = assemble(".task 0, main, active\n.space big, fp32, 300\nmain:\n halt\n", "big.s", AsmTarget{});
  CoreConfig small;
  small.sram_kb = 1;
  try {
    PeCore core(small, img, 0, "wafer.pe_0_0");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "needs 1208 bytes of SRAM")) << e.what();
  }
}

}  // namespace
}  // namespace wafersim::test
