// The kernel library on the fabric, against plain C++ references of the same math.
#include <cmath>
#include <cstdio>
#include <random>

#include <gtest/gtest.h>

#include "firmware/kernels/kernels.h"
#include "firmware/program.h"
#include "hw/fabric.h"
#include "hw/pe_core.h"
#include "test_support.h"

namespace wafersim::test {
namespace {

using kernels::ReduceAlgo;

struct Ran {
  RunResult run;
  std::vector<OutputValues> out;
  std::vector<CoreStats> stats;
};

Ran run_program(const HwConfig& hw, const FabricProgram& prog, uint64_t limit = 2000000) {
  Fabric f(hw);
  const LoadedProgram lp = load_program(f, prog);
  Ran r;
  r.run = run_to_completion(f, lp, limit);
  EXPECT_TRUE(r.run.finished) << prog.name << " did not finish in " << limit << " cycles";
  r.out = read_outputs(f, prog);
  for (const PeCore* c : lp.cores) r.stats.push_back(c->stats());
  return r;
}

std::vector<float> concat(const std::vector<OutputValues>& out, const std::string& name) {
  std::vector<float> v;
  for (const auto& o : out) {
    if (o.name == name) v.insert(v.end(), o.values.begin(), o.values.end());
  }
  return v;
}

std::vector<float> random_vec(size_t n, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// --- GEMV ---

float round_acc(NumFormat acc, float v) { return to_f32(acc, from_f32(acc, v, kCb16DefaultBias), kCb16DefaultBias); }

// The kernel's own summation order: per tile, y_row = fma(x_k, A[row][k], y_row) over the tile's
// columns in order, rounded to `acc` after each step; then the tiles' partial sums added along
// the row west to east (chain: ((p0 + p1) + p2) + ...), each add rounded to `acc`.
std::vector<float> gemv_same_order(const std::vector<float>& a, const std::vector<float>& x, uint32_t m, uint32_t n,
                                   int pw, NumFormat fmt, NumFormat acc) {
  const uint32_t nt = n / static_cast<uint32_t>(pw);
  std::vector<float> y(m);
  for (uint32_t row = 0; row < m; ++row) {
    float total = 0;
    for (int i = 0; i < pw; ++i) {
      float part = 0;
      for (uint32_t k = i * nt; k < (i + 1) * nt; ++k) {
        const float av = round_acc(fmt, a[size_t{row} * n + k]), xv = round_acc(fmt, x[k]);
        part = round_acc(acc, std::fma(xv, av, part));
      }
      total = i == 0 ? part : round_acc(acc, part + total);
    }
    y[row] = total;
  }
  return y;
}

FabricProgram gemv_program(const kernels::GemvParams& g, const std::vector<float>& a, const std::vector<float>& x,
                           const HwConfig& hw) {
  FabricProgram prog;
  prog.name = "gemv";
  kernels::add_gemv(prog, g, a, x, asm_target(hw));
  return prog;
}

void check_gemv_fp32(int pes) {
  const uint32_t m = 256, n = 256;
  const auto a = random_vec(size_t{m} * n, 11), x = random_vec(n, 12);
  HwConfig hw = small_config(pes, pes + 1);
  kernels::GemvParams g;
  g.rect = {0, 1, pes, pes};
  g.m = m;
  g.n = n;
  const Ran r = run_program(hw, gemv_program(g, a, x, hw));
  const auto y = concat(r.out, "y");
  ASSERT_EQ(y.size(), m);
  const auto ref = gemv_same_order(a, x, m, n, pes, NumFormat::kF32, NumFormat::kF32);
  double max_err = 0;
  for (uint32_t i = 0; i < m; ++i) {
    EXPECT_EQ(bits(y[i]), bits(ref[i])) << "row " << i;  // same order: bit-identical
    double exact = 0, mag = 0;
    for (uint32_t k = 0; k < n; ++k) {
      exact += double{a[size_t{i} * n + k]} * x[k];
      mag += std::fabs(double{a[size_t{i} * n + k]} * x[k]);
    }
    max_err = std::max(max_err, std::fabs(y[i] - exact) / mag);
  }
  EXPECT_LT(max_err, n * std::ldexp(1.0, -24));
  uint64_t busy = 0, all = 0;
  for (const auto& s : r.stats) {
    busy += s.busy;
    all += s.busy + s.stall + s.idle;
  }
  std::printf("gemv fp32 %ux%u on %dx%d PEs: %llu cycles, max relative error vs exact %.3g, core busy %.1f %%\n", m, n,
              pes, pes, static_cast<unsigned long long>(r.run.cycles), max_err, 100.0 * busy / all);
}

TEST(Kernels, GemvFp32On4x4IsBitIdenticalToTheSameOrderReference) { check_gemv_fp32(4); }
TEST(Kernels, GemvFp32On8x8IsBitIdenticalToTheSameOrderReference) { check_gemv_fp32(8); }

TEST(Kernels, Gemv16BitFormatsStayWithinTheirErrorBound) {
  const uint32_t m = 256, n = 256;
  const int pes = 4;
  const auto a = random_vec(size_t{m} * n, 21), x = random_vec(n, 22);
  for (NumFormat fmt : {NumFormat::kF16, NumFormat::kCB16, NumFormat::kBF16}) {
    for (NumFormat acc : {NumFormat::kF32, fmt}) {
      HwConfig hw = small_config(pes, pes + 1);
      kernels::GemvParams g;
      g.rect = {0, 1, pes, pes};
      g.m = m;
      g.n = n;
      g.fmt = fmt;
      g.acc = acc;
      const auto y = concat(run_program(hw, gemv_program(g, a, x, hw)).out, "y");
      ASSERT_EQ(y.size(), m);
      const auto ref = gemv_same_order(a, x, m, n, pes, fmt, acc);
      // Bound against the exact product of the rounded inputs: one rounding of `acc` per add on
      // the longest path (n/pw fmas, pw - 1 chain adds): |err| <= (n/pw + pw) u sum|a x|.
      const double u = std::ldexp(1.0, acc == NumFormat::kF32 ? -24 : fmt == NumFormat::kF16 ? -11
                                                                  : fmt == NumFormat::kCB16 ? -10 : -8);
      const double bound = (n / pes + pes) * u;
      double worst = 0;
      for (uint32_t i = 0; i < m; ++i) {
        EXPECT_EQ(bits(y[i]), bits(ref[i])) << format_name(fmt) << "/" << format_name(acc) << " row " << i;
        double exact = 0, mag = 0;
        for (uint32_t k = 0; k < n; ++k) {
          const double p = double{round_acc(fmt, a[size_t{i} * n + k])} * round_acc(fmt, x[k]);
          exact += p;
          mag += std::fabs(p);
        }
        worst = std::max(worst, std::fabs(y[i] - exact) / mag);
      }
      EXPECT_LE(worst, bound) << format_name(fmt) << "/" << format_name(acc);
      std::printf("gemv %s inputs, %s accumulation: max |err| / sum|a x| = %.3g (bound %.3g)\n", format_name(fmt),
                  format_name(acc), worst, bound);
    }
  }
}

// reps = 3 runs the product three times: each repetition starts y from zero, so y is that of one
// run, bit for bit, and the cores do three times the vector work of one (per tile, the first
// vfill of y in init stands for the one before each later repetition: r (nt mt + the
// reduction's elements + mt) for r repetitions; per feeder r nt), where a kernel that ran it once
// would do the same work as reps = 1.
TEST(Kernels, GemvWithTreeReductionAndRepetitions) {
  const uint32_t m = 64, n = 128;
  const auto a = random_vec(size_t{m} * n, 31), x = random_vec(n, 32);
  auto run = [&](uint32_t reps) {
    HwConfig hw = small_config(8, 3);
    kernels::GemvParams g;
    g.rect = {0, 1, 8, 2};
    g.m = m;
    g.n = n;
    g.algo = ReduceAlgo::kTree;
    g.reps = reps;
    return run_program(hw, gemv_program(g, a, x, hw));
  };
  const Ran one = run(1), three = run(3);
  const auto y = concat(three.out, "y");
  ASSERT_EQ(y.size(), m);
  for (uint32_t i = 0; i < m; ++i) {
    double exact = 0;
    for (uint32_t k = 0; k < n; ++k) exact += double{a[size_t{i} * n + k]} * x[k];
    EXPECT_NEAR(y[i], exact, 1e-4) << "row " << i;
  }
  const auto y1 = concat(one.out, "y");
  ASSERT_EQ(y1.size(), m);
  for (uint32_t i = 0; i < m; ++i) EXPECT_EQ(bits(y[i]), bits(y1[i])) << "row " << i;
  auto elems = [](const Ran& r) {
    uint64_t e = 0;
    for (const auto& s : r.stats) e += s.vector_elems;
    return e;
  };
  EXPECT_GT(elems(one), 0u);
  EXPECT_EQ(elems(three), 3 * elems(one));
  std::printf("gemv %ux%u tree: reps 1 %llu cycles, reps 3 %llu cycles\n", m, n,
              static_cast<unsigned long long>(one.run.cycles), static_cast<unsigned long long>(three.run.cycles));
}

// --- reduce and allreduce ---

std::vector<std::vector<float>> int_vectors(int pes, uint32_t len, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int> d(-1000, 1000);
  std::vector<std::vector<float>> v(static_cast<size_t>(pes), std::vector<float>(len));
  for (auto& e : v) {
    for (float& f : e) f = static_cast<float>(d(g));
  }
  return v;
}

// Runs an allreduce over n x n PEs and checks every PE's sum against one added here; returns the cycles.
uint64_t allreduce(int n, ReduceAlgo algo, uint32_t len) {
  HwConfig hw = small_config(n, n);
  kernels::ReduceParams p;
  p.rect = {0, 0, n, n};
  p.len = len;
  p.algo = algo;
  const auto data = int_vectors(n * n, len, 41);
  FabricProgram prog;
  kernels::add_reduce(prog, p, data, asm_target(hw));
  const Ran r = run_program(hw, prog);
  std::vector<float> sum(len, 0);
  for (const auto& v : data) {
    for (uint32_t i = 0; i < len; ++i) sum[i] += v[i];  // integers: exact in any order
  }
  EXPECT_EQ(r.out.size(), static_cast<size_t>(n) * n);
  for (const auto& o : r.out) EXPECT_EQ(o.values, sum) << o.name;
  return r.run.cycles;
}

TEST(Kernels, AllreduceOn16x16IsExactWithEveryAlgorithm) {
  for (ReduceAlgo algo : {ReduceAlgo::kChain, ReduceAlgo::kTree, ReduceAlgo::kTwoPhase, ReduceAlgo::kBinomial}) {
    for (uint32_t len : {1u, 8u}) allreduce(16, algo, len);
  }
}

// Published (CS-1): a centre-rooted allreduce takes about 10 % more cycles than the fabric
// diameter, its reduction adding in the routers at about a cycle per hop. Here each reduction
// level goes through a core instead (docs/kernels.md): router -> ramp (ramp_latency r) -> the
// core's vadd (1 cycle for one value) -> ramp (r) -> router, 2r + 1 cycles, plus hop_latency h per
// hop; a node with a child on each side adds the second after the first, decode_latency d later;
// the broadcast back costs h per hop. With the root at n/2, the longest reduction path is n hops
// (n/2 along the row, n/2 down the root column) and so is the longest broadcast:
//   chain: n levels of one hop; two of them (the roots of the row and the column) with two children
//          cycles = S + n (2r + 1 + h) + 2d + n h                    (7n + 6 + S with the defaults)
//   tree:  log2(n) levels per dimension, each node with two children
//          cycles = S + 2 log2(n) (2r + 1 + d) + n h + n h           (16 log2(n) + 2n + S)
// S is the fixed start and end (task pick and decode, the vmov of v into sum, the last ramp into
// the farthest core), the same for every n. So from n to 2n the cycles grow by exactly
// n (2r + 1 + 2h) (chain) and 2 (2r + 1 + d) + 2n h (tree), whatever S; and S is at most 16
// (measured: 16 chain, 10 tree). Every PE's sum is checked against one added here.
TEST(Kernels, AllreduceCyclesAgainstFabricDiameter) {
  const HwConfig hw = small_config(4, 4);
  const uint64_t r = static_cast<uint64_t>(hw.router.ramp_latency), h = static_cast<uint64_t>(hw.router.hop_latency),
                 d = static_cast<uint64_t>(hw.core.decode_latency);
  const uint64_t kStart = 16;
  for (ReduceAlgo algo : {ReduceAlgo::kChain, ReduceAlgo::kTree}) {
    const bool chain = algo == ReduceAlgo::kChain;
    uint64_t prev = 0;
    for (uint64_t n : {4, 8, 16, 32}) {
      const uint64_t c = allreduce(static_cast<int>(n), algo, 1);
      const uint64_t diameter = 2 * (n - 1), levels = static_cast<uint64_t>(std::log2(n));
      const uint64_t derived = chain ? n * (2 * r + 1 + h) + 2 * d + n * h : 2 * levels * (2 * r + 1 + d) + 2 * n * h;
      std::printf("allreduce %-5s %2llux%-2llu PEs: %4llu cycles, diameter %2llu, ratio %.2f, derived %llu + S\n",
                  kernels::reduce_algo_name(algo), static_cast<unsigned long long>(n), static_cast<unsigned long long>(n),
                  static_cast<unsigned long long>(c), static_cast<unsigned long long>(diameter),
                  static_cast<double>(c) / static_cast<double>(diameter), static_cast<unsigned long long>(derived));
      EXPECT_GT(c, diameter * h);  // no faster than a wavelet crossing the fabric
      EXPECT_GT(c, derived) << kernels::reduce_algo_name(algo) << " " << n;
      EXPECT_LE(c, derived + kStart) << kernels::reduce_algo_name(algo) << " " << n;
      if (prev) {
        const uint64_t half = n / 2;
        EXPECT_EQ(c - prev, chain ? half * (2 * r + 1 + 2 * h) : 2 * (2 * r + 1 + d) + 2 * half * h)
            << kernels::reduce_algo_name(algo) << " from " << half << " to " << n;
      }
      prev = c;
    }
  }
}

TEST(Kernels, ReduceLeavesTheSumAtAChosenRoot) {
  HwConfig hw = small_config(5, 3);
  kernels::ReduceParams p;
  p.rect = {0, 0, 5, 3};
  p.len = 4;
  p.all = false;
  p.root_x = 4;
  p.root_y = 0;
  const auto data = int_vectors(15, 4, 43);
  FabricProgram prog;
  kernels::add_reduce(prog, p, data, asm_target(hw));
  const Ran r = run_program(hw, prog);
  ASSERT_EQ(r.out.size(), 1u);
  std::vector<float> sum(4, 0);
  for (const auto& v : data) {
    for (int i = 0; i < 4; ++i) sum[static_cast<size_t>(i)] += v[static_cast<size_t>(i)];
  }
  EXPECT_EQ(r.out[0].values, sum);
}

// Luczynski et al.'s binomial tree on rows of every length from 2 to 40 with the root anywhere:
// the exact sum at the root (integers), 4 colors whatever the length (2 with the root at an
// end), and, with the root at the west end, the cycles of their model within 3 cycles + 10 %
// (at 5 elements the model overlaps the distance and the data less than the fabric: up to -8 %).
TEST(Kernels, BinomialReduceIsExactOnAnyRowAndFollowsTheModel) {
  for (int n = 2; n <= 40; ++n) {
    for (int root : {0, n / 2, n - 1}) {
      HwConfig hw = small_config(n, 1);
      kernels::ReduceParams p;
      p.rect = {0, 0, n, 1};
      p.len = 5;
      p.algo = ReduceAlgo::kBinomial;
      p.root_x = root;
      p.root_y = 0;
      p.all = false;
      p.in_place = true;
      p.timed = true;
      const auto data = int_vectors(n, p.len, 47 + static_cast<uint32_t>(n));
      FabricProgram prog;
      const int colors = kernels::add_reduce(prog, p, data, asm_target(hw));
      const Ran r = run_program(hw, prog);
      std::vector<float> sum(p.len, 0);
      for (const auto& v : data) {
        for (uint32_t i = 0; i < p.len; ++i) sum[i] += v[i];
      }
      const std::string what = std::to_string(n) + " PEs, root " + std::to_string(root);
      std::vector<float> got;
      for (const auto& o : r.out) {
        if (o.name == "sum") got = o.values;
      }
      EXPECT_EQ(got, sum) << what;
      const kernels::LinePlan plan = kernels::plan_line_reduce(n, root, ReduceAlgo::kBinomial, 0);
      EXPECT_LE(plan.colors, root == 0 || root == n - 1 ? 2 : 4) << what;
      EXPECT_EQ(colors, plan.colors) << what;  // a one-PE column needs none
      if (root == 0) {
        const double model = plan.model_cycles(p.len), cycles = kernels::timed_span(r.out);
        std::printf("binomial %d PEs: %.0f cycles, model %.1f\n", n, cycles, model);
        EXPECT_LE(std::abs(cycles - model), 3 + 0.10 * model) << what << ": " << cycles << " cycles, model " << model;
      }
    }
  }
}

// The binomial allreduce needs 9 colors on any fabric (4 per dimension and the broadcast).
TEST(Kernels, BinomialAllreduceFitsNineColors) {
  HwConfig hw = small_config(48, 40);
  hw.router.colors = 9;
  kernels::ReduceParams p;
  p.rect = {0, 0, 48, 40};
  p.len = 1;
  p.algo = ReduceAlgo::kBinomial;
  const auto data = int_vectors(48 * 40, 1, 5);
  FabricProgram prog;
  EXPECT_EQ(kernels::add_reduce(prog, p, data, asm_target(hw)), 9);
  const Ran r = run_program(hw, prog);
  float sum = 0;
  for (const auto& v : data) sum += v[0];
  ASSERT_EQ(r.out.size(), 48u * 40u);
  for (const auto& o : r.out) EXPECT_EQ(o.values, std::vector<float>{sum}) << o.name;
}

TEST(Kernels, TreeNeedingMoreColorsThanTheFabricHasIsRejected) {
  HwConfig hw = small_config(32, 32);
  hw.router.colors = 16;  // a 32 x 32 tree allreduce needs 21
  kernels::ReduceParams p;
  p.rect = {0, 0, 32, 32};
  p.algo = ReduceAlgo::kTree;
  FabricProgram prog;
  try {
    kernels::add_reduce(prog, p, int_vectors(32 * 32, 1, 1), asm_target(hw));
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("router.colors"), std::string::npos) << e.what();
  }
}

// --- broadcast, elementwise, ping-pong ---

TEST(Kernels, RowAndColumnBroadcastReachEveryPe) {
  for (bool columns : {false, true}) {
    for (NumFormat fmt : {NumFormat::kF32, NumFormat::kBF16}) {
      HwConfig hw = small_config(6, 4);
      kernels::BroadcastParams p;
      p.rect = {1, 0, 5, 4};
      p.columns = columns;
      p.len = 10;
      p.fmt = fmt;
      p.color = 3;
      const int lines = columns ? 5 : 4;
      std::vector<std::vector<float>> data;
      for (int l = 0; l < lines; ++l) data.push_back(random_vec(10, 50 + static_cast<uint32_t>(l)));
      FabricProgram prog;
      kernels::add_broadcast(prog, p, data, asm_target(hw));
      const Ran r = run_program(hw, prog);
      ASSERT_EQ(r.out.size(), static_cast<size_t>(lines));
      for (int l = 0; l < lines; ++l) {
        const auto& got = r.out[static_cast<size_t>(l)].values;
        const size_t per = static_cast<size_t>(columns ? 4 : 5);
        ASSERT_EQ(got.size(), per * 10);
        for (size_t i = 0; i < got.size(); ++i) {
          EXPECT_EQ(got[i], kernels::round_to(fmt, data[static_cast<size_t>(l)][i % 10], kCb16DefaultBias));
        }
      }
    }
  }
}

TEST(Kernels, ElementwiseOpsMatchOneRoundingOfTheExactResult) {
  struct Case {
    const char* op;
    float (*f)(float, float);
  };
  const Case cases[] = {
      {"add", [](float a, float b) { return a + b; }},   {"sub", [](float a, float b) { return a - b; }},
      {"mul", [](float a, float b) { return a * b; }},   {"max", [](float a, float b) { return std::fmax(a, b); }},
      {"cmpgt", [](float a, float b) { return a > b ? 1.0f : 0.0f; }},
      {"relu", [](float a, float) { return a > 0 ? a : 0.0f; }},
      {"exp", [](float a, float) { return std::exp(a); }},  {"recip", [](float a, float) { return 1.0f / a; }},
  };
  for (const Case& c : cases) {
    for (NumFormat fmt : {NumFormat::kF32, NumFormat::kF16}) {
      HwConfig hw = small_config(3, 2);
      kernels::ElementwiseParams p;
      p.rect = {0, 0, 3, 2};
      p.op = c.op;
      p.len = 12;
      p.fmt = fmt;
      std::vector<std::vector<float>> da, db;
      for (uint32_t i = 0; i < 6; ++i) {
        da.push_back(random_vec(12, 60 + i, -3, 3));
        db.push_back(random_vec(12, 70 + i, -3, 3));
      }
      FabricProgram prog;
      kernels::add_elementwise(prog, p, da, db, asm_target(hw));
      const Ran r = run_program(hw, prog);
      ASSERT_EQ(r.out.size(), 6u);
      for (size_t pe = 0; pe < 6; ++pe) {
        for (size_t i = 0; i < 12; ++i) {
          const float a = round_acc(fmt, da[pe][i]), b = round_acc(fmt, db[pe][i]);
          EXPECT_EQ(bits(r.out[pe].values[i]), bits(round_acc(fmt, c.f(a, b)))) << c.op << " " << format_name(fmt);
        }
      }
    }
  }
}

TEST(Kernels, PingPongEchoesAndApproachesOneWaveletPerCycle) {
  for (int distance : {1, 8}) {
    HwConfig hw = small_config(10, 1);
    const uint64_t base = [&] {
      kernels::PingPongParams p;
      p.distance = distance;
      p.len = 1;
      p.rounds = 1;
      FabricProgram prog;
      kernels::add_pingpong(prog, p, {1.5f}, asm_target(hw));
      return run_program(hw, prog).run.cycles;
    }();
    kernels::PingPongParams p;
    p.distance = distance;
    p.len = 256;
    p.rounds = 4;
    const auto data = random_vec(256, 80);
    FabricProgram prog;
    kernels::add_pingpong(prog, p, data, asm_target(hw));
    const Ran r = run_program(hw, prog);
    ASSERT_EQ(r.out.size(), 1u);
    EXPECT_EQ(r.out[0].values, data);
    const double per_round = static_cast<double>(r.run.cycles) / p.rounds;
    const double words_per_cycle = p.len / per_round;
    std::printf("pingpong distance %d: one word round trip %llu cycles; 256 words: %.1f cycles per round, %.3f words "
                "per cycle each way\n",
                distance, static_cast<unsigned long long>(base), per_round, words_per_cycle);
    EXPECT_GT(words_per_cycle, 0.75);
    EXPECT_LE(words_per_cycle, 1.0);  // one wavelet per link per cycle
  }
}

// --- determinism and the directory form ---

TEST(Kernels, GemvIsBitIdenticalAcrossThreadsAndVisitOrders) {
  const uint32_t m = 64, n = 64;
  const auto a = random_vec(size_t{m} * n, 91), x = random_vec(n, 92);
  kernels::GemvParams g;
  g.rect = {0, 1, 4, 4};
  g.m = m;
  g.n = n;
  HwConfig hw = small_config(4, 5);
  const Ran ref = run_program(hw, gemv_program(g, a, x, hw));
  for (int threads : {1, 2}) {
    for (VisitOrder vo : {VisitOrder::kReverse, VisitOrder::kShuffle}) {
      HwConfig h2 = hw;
      h2.sim.threads = threads;
      h2.sim.threaded_visits = 0;  // every cycle threaded (the default runs small cycles on one)
      h2.sim.visit_order = vo;
      const Ran r = run_program(h2, gemv_program(g, a, x, h2));
      EXPECT_EQ(r.run.cycles, ref.run.cycles);
      ASSERT_EQ(r.out.size(), ref.out.size());
      for (size_t i = 0; i < r.out.size(); ++i) EXPECT_EQ(r.out[i].values, ref.out[i].values);
      for (size_t i = 0; i < r.stats.size(); ++i) {
        EXPECT_EQ(r.stats[i].busy, ref.stats[i].busy);
        EXPECT_EQ(r.stats[i].stall, ref.stats[i].stall);
      }
    }
  }
}

TEST(Kernels, SavedProgramLoadsAndRunsTheSame) {
  const uint32_t m = 32, n = 32;
  const auto a = random_vec(size_t{m} * n, 93), x = random_vec(n, 94);
  kernels::GemvParams g;
  g.rect = {0, 1, 2, 2};
  g.m = m;
  g.n = n;
  g.fmt = NumFormat::kBF16;
  HwConfig hw = small_config(2, 3);
  const FabricProgram prog = gemv_program(g, a, x, hw);
  const std::string dir = tmp_path("saved_gemv");
  save_program(prog, dir);
  const FabricProgram back = load_program_file(dir + "/program.json", asm_target(hw));
  EXPECT_EQ(back.images.size(), prog.images.size());
  EXPECT_EQ(back.placements.size(), prog.placements.size());
  EXPECT_EQ(back.routes.size(), prog.routes.size());
  const Ran r1 = run_program(hw, prog), r2 = run_program(hw, back);
  EXPECT_EQ(r1.run.cycles, r2.run.cycles);
  ASSERT_EQ(r1.out.size(), r2.out.size());
  for (size_t i = 0; i < r1.out.size(); ++i) EXPECT_EQ(r1.out[i].values, r2.out[i].values);
}

}  // namespace
}  // namespace wafersim::test
