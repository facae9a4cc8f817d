// The validation suite (docs/validation.md): the STREAM kernel's numbers and timing, vfmacs,
// and `wafersim validate` through the binary (its output files and its bad-input exits).
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <functional>
#include <cstdlib>
#include <filesystem>
#include <random>

#include <nlohmann/json.hpp>

#include "firmware/assembler.h"
#include "firmware/kernels/kernels.h"
#include "firmware/program.h"
#include "hw/fabric.h"
#include "test_support.h"

namespace wafersim::test {
namespace {

namespace fs = std::filesystem;

// Every STREAM op in every format on 2 x 2 PEs: each PE's result bit for bit against the host
// (the op computed in fp32 from the rounded inputs, rounded once), and its counter reading is
// the op's steps plus one (the second tsc executes the cycle after the last step): copy at the
// add rate, scale at the multiply rate (fp32: 1 a cycle; 16-bit: the add rate), add at the add
// rate with one more cycle per step when the two reads meet in a bank, triad at the FMAC rate
// (docs/core.md).
TEST(Stream, EveryOpAndFormatIsExactAndTimedByTheCycleCounter) {
  HwConfig hw = small_config(2, 2);
  const AsmTarget t = asm_target(hw);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-4.0f, 4.0f);
  const uint32_t len = 96;
  for (NumFormat fmt : {NumFormat::kF32, NumFormat::kF16, NumFormat::kBF16, NumFormat::kCB16}) {
    for (const std::string op : {"copy", "scale", "add", "triad"}) {
      const bool two = kernels::stream_sources(op) == 2;
      std::vector<std::vector<float>> a(4), b(4);
      for (int p = 0; p < 4; ++p) {
        for (uint32_t i = 0; i < len; ++i) {
          a[p].push_back(to_f32(fmt, from_f32(fmt, uni(rng), hw.core.cb16_bias), hw.core.cb16_bias));
          b[p].push_back(to_f32(fmt, from_f32(fmt, uni(rng), hw.core.cb16_bias), hw.core.cb16_bias));
        }
        if (!two) b[p].clear();
      }
      kernels::StreamParams sp;
      sp.rect = {0, 0, 2, 2};
      sp.op = op;
      sp.len = len;
      sp.fmt = fmt;
      sp.warmup = 3;
      sp.scalar = 1.5f;
      FabricProgram prog;
      kernels::add_stream(prog, sp, a, two ? b : std::vector<std::vector<float>>{}, t);
      Fabric f(hw);
      const LoadedProgram lp = load_program(f, prog);
      ASSERT_TRUE(run_to_completion(f, lp, 100000).finished);
      const auto out = read_outputs(f, prog);
      const bool f32 = fmt == NumFormat::kF32;
      const uint32_t per_step = f32 ? (op == "triad" || op == "scale" ? 1u : 2u) : 4u;
      // Two sources whose step spans a whole 64-bit access meet in a bank (src1 starts 1 fp32 or 3
      // 16-bit elements in): one more cycle per step. fp32 triad's one-element steps do not.
      const uint32_t step_cycles = two && per_step * (f32 ? 4 : 2) == 8 ? 2u : 1u;
      const uint32_t want_cycles = (len / per_step) * step_cycles + 1;
      for (int p = 0; p < 4; ++p) {
        const std::string xy = std::to_string(p % 2) + "." + std::to_string(p / 2);
        std::vector<float> dest, cycles;
        for (const auto& o : out) {
          if (o.name == "dest." + xy) dest = o.values;
          if (o.name == "cycles." + xy) cycles = o.values;
        }
        ASSERT_EQ(dest.size(), len) << op << " " << format_name(fmt);
        for (uint32_t i = 0; i < len; ++i) {
          const float want = kernels::stream_reference(op, a[p][i], two ? b[p][i] : 0.0f, sp.scalar, fmt, hw.core.cb16_bias);
          ASSERT_EQ(f32_bits(dest[i]), f32_bits(want)) << op << " " << format_name(fmt) << " element " << i;
        }
        ASSERT_EQ(cycles.size(), 1u);
        EXPECT_EQ(cycles[0], static_cast<float>(want_cycles)) << op << " " << format_name(fmt);
      }
    }
  }
}

// A chain reduce over a row toward its west end, timed as the published measurements time it
// (max of the PEs' end readings - min of their start readings): the first element crosses each
// of the P - 1 hops in ramp out + hop + ramp in + the add's cycle, the other B - 1 follow one a
// cycle, plus the two counter reads: B + (P - 1)(2 ramp_latency + hop_latency + 1) + 2. With the
// defaults (ramp 2, hop 1) that is the reduce model of Luczynski et al. (T_R = 2) plus 2, and the
// sum is exact.
TEST(Reduce, TimedChainFollowsTheRowModelForEveryLatency) {
  for (int ramp : {1, 2, 3}) {
    for (int hop : {1, 2}) {
      for (int pes : {2, 5, 9}) {
        for (uint32_t len : {1u, 7u, 64u}) {
          HwConfig hw = small_config(pes, 1);
          hw.router.ramp_latency = ramp;
          hw.router.hop_latency = hop;
          kernels::ReduceParams p;
          p.rect = {0, 0, pes, 1};
          p.len = len;
          p.root_x = 0;
          p.root_y = 0;
          p.all = false;
          p.in_place = true;
          p.timed = true;
          std::vector<std::vector<float>> data;
          for (int i = 0; i < pes; ++i) data.push_back(std::vector<float>(len, static_cast<float>(i + 1)));
          FabricProgram prog;
          kernels::add_reduce(prog, p, data, asm_target(hw));
          Fabric f(hw);
          const LoadedProgram lp = load_program(f, prog);
          ASSERT_TRUE(run_to_completion(f, lp, 100000).finished);
          const auto out = read_outputs(f, prog);
          std::vector<float> sum;
          for (const auto& o : out) {
            if (o.name == "sum") sum = o.values;
          }
          const std::string at = "ramp " + std::to_string(ramp) + " hop " + std::to_string(hop) + " P " +
                                 std::to_string(pes) + " B " + std::to_string(len);
          EXPECT_EQ(sum, std::vector<float>(len, static_cast<float>(pes * (pes + 1) / 2))) << at;
          EXPECT_EQ(kernels::timed_span(out), len + (pes - 1) * (2.0 * ramp + hop + 1) + 2) << at;
        }
      }
    }
  }
}

// The two-phase reduction (groups, then their leaders) leaves the exact sum everywhere, for
// roots and group sizes that put the root at a group's edge or in its middle.
TEST(Reduce, TwoPhaseAllreduceIsExact) {
  for (int group : {0, 1, 3, 5, 16}) {
    for (int root : {-1, 0, 11}) {
      HwConfig hw = small_config(13, 12);
      kernels::ReduceParams p;
      p.rect = {0, 0, 13, 12};
      p.len = 5;
      p.algo = kernels::ReduceAlgo::kTwoPhase;
      p.group = group;
      p.root_x = root;
      p.root_y = root;
      std::vector<std::vector<float>> data;
      double want = 0;
      for (int i = 0; i < 13 * 12; ++i) {
        data.push_back(std::vector<float>(5, static_cast<float>(i % 9)));
        want += i % 9;
      }
      FabricProgram prog;
      kernels::add_reduce(prog, p, data, asm_target(hw));
      Fabric f(hw);
      const LoadedProgram lp = load_program(f, prog);
      ASSERT_TRUE(run_to_completion(f, lp, 100000).finished) << group << " " << root;
      const auto out = read_outputs(f, prog);
      ASSERT_EQ(out.size(), 13u * 12u);
      for (const auto& o : out) EXPECT_EQ(o.values, std::vector<float>(5, static_cast<float>(want))) << o.name;
    }
  }
}

// MeshGEMV against a host reference in the same order: per PE row j and column i, the partial
// res = fl(res + W[k, c] x_k) over the tile's rows k in order (one rounding to the format per
// step, as vfmacs does), then the column's partials summed in the two-phase plan's order
// (acc = fl(child + acc), children in the plan's order), the same value on every PE of the column.
TEST(MeshGemv, BitIdenticalToTheSameOrderReferenceInEveryFormat) {
  for (NumFormat fmt : {NumFormat::kF16, NumFormat::kBF16, NumFormat::kF32}) {
    for (int group : {0, 2}) {
      const int pw = 3, ph = 7;
      const uint32_t m = 7 * 6, n = 3 * 8;
      HwConfig hw = small_config(pw, ph);
      const int bias = hw.core.cb16_bias;
      std::mt19937 rng(11);
      std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
      std::vector<float> w(size_t{m} * n), x(m);
      for (float& v : w) v = to_f32(fmt, from_f32(fmt, uni(rng), bias), bias);
      for (float& v : x) v = to_f32(fmt, from_f32(fmt, uni(rng), bias), bias);
      kernels::MeshGemvParams p;
      p.rect = {0, 0, pw, ph};
      p.m = m;
      p.n = n;
      p.fmt = fmt;
      p.group = group;
      FabricProgram prog;
      kernels::add_meshgemv(prog, p, w, x, asm_target(hw));
      Fabric f(hw);
      const LoadedProgram lp = load_program(f, prog);
      ASSERT_TRUE(run_to_completion(f, lp, 200000).finished);
      const auto out = read_outputs(f, prog);
      const std::vector<float> want = kernels::meshgemv_reference(p, w, x, bias);
      for (const auto& o : out) {
        if (o.name.rfind("out.", 0) != 0) continue;
        const int i = std::stoi(o.name.substr(4, o.name.find('.', 4) - 4));
        ASSERT_EQ(o.values.size(), size_t{n} / pw) << o.name;
        for (size_t c = 0; c < o.values.size(); ++c) {
          ASSERT_EQ(f32_bits(o.values[c]), f32_bits(want[static_cast<size_t>(i) * (n / pw) + c]))
              << format_name(fmt) << " group " << group << " " << o.name << "[" << c << "]";
        }
      }
    }
  }
}

TEST(MeshGemv, OneColumnTakesTheCyclesOfTheWholeMesh) {
  auto run = [](int pw, int ph, uint32_t m, uint32_t n, uint32_t reps) {
    HwConfig hw = small_config(pw, ph);
    kernels::MeshGemvParams p;
    p.rect = {0, 0, pw, ph};
    p.m = m;
    p.n = n;
    p.warmup = reps > 1 ? 2 : 0;
    p.reps = reps;
    std::vector<float> w(size_t{m} * n, 0.5f), x(m, 0.25f);
    FabricProgram prog;
    kernels::add_meshgemv(prog, p, w, x, asm_target(hw));
    Fabric f(hw);
    const LoadedProgram lp = load_program(f, prog);
    const RunResult r = run_to_completion(f, lp, 200000);
    EXPECT_TRUE(r.finished);
    return std::make_pair(r.cycles, kernels::timed_span(read_outputs(f, prog)));
  };
  for (int ph : {5, 9}) {
    const auto mesh = run(6, ph, static_cast<uint32_t>(ph) * 16, 6 * 12, 1);
    const auto column = run(1, ph, static_cast<uint32_t>(ph) * 16, 12, 1);
    EXPECT_EQ(mesh, column) << ph << " rows";
    EXPECT_GT(column.second, 16.0 * 12 / 4) << "at least the local GEMV's vector steps";
    // Repeats (after warm-ups) take the same on the mesh and on one column too, and the timed
    // span of 3 covers at least 3 local GEMVs.
    const auto mesh3 = run(6, ph, static_cast<uint32_t>(ph) * 16, 6 * 12, 3);
    EXPECT_EQ(mesh3, run(1, ph, static_cast<uint32_t>(ph) * 16, 12, 3)) << ph << " rows, 3 repeats";
    EXPECT_GT(mesh3.second, 3 * 16.0 * 12 / 4);
  }
}

// The 25-point stencil on 7 x 6 PEs (partial broadcast groups at every edge, a short last Z
// block) against the plain C++ stencil in the kernel's order, bit for bit, both time levels,
// with lazy cores and cycle by cycle (same data, same cycles).
TEST(Stencil, BitIdenticalToThePlainStencilAtEveryEdge) {
  uint64_t cycles[2] = {};
  for (const bool lazy : {true, false}) {
    HwConfig hw = small_config(7, 6);
    hw.core.lazy = lazy;
    const AsmTarget t = asm_target(hw);
    kernels::StencilParams sp;
    sp.rect = {0, 0, 7, 6};
    sp.nz = 37;
    sp.block = 10;
    sp.warmup = 1;
    sp.steps = 2;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::vector<std::vector<float>> u0(42), u1(42);
    for (size_t pe = 0; pe < 42; ++pe) {
      for (uint32_t z = 0; z < sp.nz; ++z) {
        u0[pe].push_back(uni(rng));
        u1[pe].push_back(uni(rng));
      }
    }
    FabricProgram prog;
    kernels::add_stencil(prog, sp, u0, u1, t);
    Fabric f(hw);
    const LoadedProgram lp = load_program(f, prog);
    const RunResult rr = run_to_completion(f, lp, 2000000);
    ASSERT_TRUE(rr.finished);
    cycles[lazy ? 0 : 1] = f.cycle();
    const auto out = read_outputs(f, prog);
    const auto want = kernels::stencil_reference(sp, u0, u1);
    int checked = 0;
    for (const auto& o : out) {
      const bool ua = o.name.rfind("ua.", 0) == 0;
      if (!ua && o.name.rfind("ub.", 0) != 0) continue;
      const int x = std::stoi(o.name.substr(3)), y = std::stoi(o.name.substr(o.name.find('.', 3) + 1));
      const auto& w = want[(ua ? 0 : 42) + static_cast<size_t>(y) * 7 + static_cast<size_t>(x)];
      ASSERT_EQ(o.values.size(), sp.nz);
      for (uint32_t z = 0; z < sp.nz; ++z) {
        ASSERT_EQ(f32_bits(o.values[z]), f32_bits(w[z])) << o.name << " z " << z << (lazy ? " lazy" : "");
      }
      ++checked;
    }
    EXPECT_EQ(checked, 84);
    EXPECT_GT(kernels::timed_span(out), 0.0);
  }
  EXPECT_EQ(cycles[0], cycles[1]);
}

// The paper's block rule: the fewest Z blocks whose buffers fit 48 KB (334 cells for nz = 1000,
// as its Table III), and every cell when they fit at once.
TEST(Stencil, BlocksAreTheFewestThatFit) {
  const AsmTarget t = asm_target(small_config(4, 4));
  kernels::StencilParams sp;
  sp.nz = 1000;
  EXPECT_EQ(kernels::stencil_block(sp, t), 334u);
  sp.nz = 300;
  EXPECT_EQ(kernels::stencil_block(sp, t), 300u);
}

// The 3-D FFT on n x n PEs (n = 2, 4, 8): every PE's values bit for bit against the host FFT in
// the kernel's order, and within 1e-5 (relative to the largest) of a 3-D DFT in double at the
// documented place (kx = rev(y), ky = rev(r), kz = rev(x)); lazy cores and cycle by cycle agree.
TEST(Fft, BitIdenticalToTheSameOrderFftAndCloseToTheDft) {
  for (uint32_t n : {2u, 4u, 8u}) {
    uint64_t cycles[2] = {};
    for (const bool lazy : {true, false}) {
      HwConfig hw = small_config(static_cast<int>(n), static_cast<int>(n));
      hw.core.lazy = lazy;
      const AsmTarget t = asm_target(hw);
      std::mt19937 rng(n);
      std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
      std::vector<std::vector<float>> u(size_t{n} * n);
      for (auto& v : u) {
        for (uint32_t k = 0; k < 2 * n; ++k) v.push_back(uni(rng));
      }
      kernels::FftParams fp;
      fp.n = n;
      FabricProgram prog;
      kernels::add_fft3d(prog, fp, u, t);
      Fabric f(hw);
      const LoadedProgram lp = load_program(f, prog);
      ASSERT_TRUE(run_to_completion(f, lp, 1000000).finished) << n;
      cycles[lazy ? 0 : 1] = f.cycle();
      const auto out = read_outputs(f, prog);
      const auto want = kernels::fft3d_reference(n, u);
      double peak = 0, worst = 0;
      for (uint32_t y = 0; y < n; ++y) {
        for (uint32_t x = 0; x < n; ++x) {
          std::vector<float> got;
          for (const auto& o : out) {
            if (o.name == "out." + std::to_string(x) + "." + std::to_string(y)) got = o.values;
          }
          ASSERT_EQ(got.size(), 2 * size_t{n});
          for (uint32_t k = 0; k < 2 * n; ++k) {
            ASSERT_EQ(f32_bits(got[k]), f32_bits(want[size_t{y} * n + x][k])) << "n " << n << " PE " << x << "," << y << " k " << k;
          }
          if (!lazy) continue;
          for (uint32_t r = 0; r < n; ++r) {
            const uint32_t kx = kernels::bit_reverse(y, n), ky = kernels::bit_reverse(r, n), kz = kernels::bit_reverse(x, n);
            double re = 0, im = 0;
            for (uint32_t a = 0; a < n; ++a) {
              for (uint32_t b = 0; b < n; ++b) {
                for (uint32_t c = 0; c < n; ++c) {
                  const double ang = -2 * M_PI * static_cast<double>((a * kx + b * ky + c * kz) % n) / n;
                  const double vr = u[size_t{b} * n + a][2 * c], vi = u[size_t{b} * n + a][2 * c + 1];
                  re += vr * std::cos(ang) - vi * std::sin(ang);
                  im += vr * std::sin(ang) + vi * std::cos(ang);
                }
              }
            }
            peak = std::max({peak, std::fabs(re), std::fabs(im)});
            worst = std::max({worst, std::fabs(re - got[2 * r]), std::fabs(im - got[2 * r + 1])});
          }
        }
      }
      if (lazy) {
        EXPECT_LT(worst, 1e-5 * peak) << "n " << n;
      }
      EXPECT_GT(kernels::timed_span(out), 0.0);
    }
    EXPECT_EQ(cycles[0], cycles[1]) << "n " << n;
  }
}

TEST(Stream, VfmacsAssemblesAndDisassembles) {
  const PeImage img = assemble(".task 0, main, active\nmain:\n  vfmacs.fp16 d3, d1, d2, r7, async=2\n  tsc r4\n  halt\n", "t.s", AsmTarget{});
  ASSERT_GE(img.code.size(), 2u);
  EXPECT_EQ(disassemble(decode(img.code[0])), "vfmacs.fp16 d3, d1, d2, r7, async=2");
  EXPECT_EQ(disassemble(decode(img.code[1])), "tsc r4");
  EXPECT_EQ(encode(decode(img.code[0])), img.code[0]);
}

struct Cli {
  int rc;
  std::string out, err;
};

Cli validate(const std::vector<std::string>& args) {
  static int n = 0;
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(n++);
  const std::string o = tmp_path("validate_out_" + tag), e = tmp_path("validate_err_" + tag);
  std::string line = "exec timeout 300 " + std::string(WAFERSIM_BIN) + " validate";
  for (const auto& a : args) line += " " + quote(a);
  line += " > " + quote(o) + " 2> " + quote(e);
  const int status = std::system(("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE=1 bash -c " + quote(line)).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(o), slurp(e)};
}

TEST(ValidateCli, WritesTheTableAndTheJsonOfTheChosenCases) {
  const fs::path d = tmp_path("validate_cli_ok");
  fs::remove_all(d);
  const Cli r = validate({"stream.fmovs.2048", "stream.fmach.4096", "-o", d.string()});
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto doc = nlohmann::json::parse(slurp(d / "validation.json"));
  ASSERT_EQ(doc["cases"].size(), 2u);
  for (const auto& c : doc["cases"]) {
    EXPECT_TRUE(c["numerics_ok"].get<bool>()) << c["case"];
    EXPECT_GT(c["simulated_cycles"].get<double>(), 0);
    const double err = 100.0 * (c["simulated_cycles"].get<double>() - c["published_cycles"].get<double>()) /
                       c["published_cycles"].get<double>();
    EXPECT_NEAR(c["error_pct"].get<double>(), err, 1e-9);
    EXPECT_EQ(c["command"].get<std::string>(), "wafersim validate " + c["case"].get<std::string>());
  }
  EXPECT_EQ(doc["cases"][0]["published_cycles"].get<double>(), 1512);
  const std::string md = slurp(d / "validation.md");
  EXPECT_NE(md.find("| stream.fmovs.2048 | 1512 |"), std::string::npos) << md;
  EXPECT_NE(md.find("Mean absolute error"), std::string::npos);
  // --max-error turns a case further off than that into exit 1, after writing the table.
  fs::remove_all(d);
  const Cli strict = validate({"stream.fmovs.2048", "-o", d.string(), "--max-error", "0.001"});
  EXPECT_EQ(strict.rc, 1) << strict.out;
  EXPECT_NE(strict.err.find("max-error"), std::string::npos) << strict.err;
  EXPECT_TRUE(fs::exists(d / "validation.json"));
}

// Bad input: an unknown case, a fabric without the colors a case needs, a PE without the SRAM
// a case needs, an empty -o: each a clear message and exit 2.
TEST(ValidateCli, BadInputIsAUsageError) {
  const std::string d = tmp_path("validate_cli_bad");
  Cli r = validate({"stream.nosuch", "-o", d});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("validation case 'stream.nosuch' is unknown"), std::string::npos) << r.err;
  r = validate({"allreduce.binomial.600x595", "--router.colors", "8", "-o", d});  // needs 9
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("router.colors"), std::string::npos) << r.err;
  r = validate({"stream.fmovs.2048", "--core.sram_kb", "8", "-o", d});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("stream.fmovs.2048"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SRAM"), std::string::npos) << r.err;
  r = validate({"stencil.25pt.200x200", "--core.sram_kb", "8", "-o", d});  // the new kernels too
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("the two time levels alone do not fit"), std::string::npos) << r.err;
  r = validate({"fft.3d.32", "--core.sram_kb", "1", "-o", d});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("fft.3d.32: fft: a pencil of 32 complex values needs"), std::string::npos) << r.err;
  r = validate({"fft.3d.32", "--router.colors", "2", "-o", d});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("router.colors"), std::string::npos) << r.err;
  r = validate({"--quick", "allreduce.binomial.600x595", "-o", d});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("no case chosen"), std::string::npos) << r.err;
  r = validate({"-o", ""});
  EXPECT_EQ(r.rc, 2);
  r = validate({"stream.fmovs.2048", "--fabric.width", "64", "-o", d});  // each case has its own size
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("fabric.width is set by each validation case"), std::string::npos) << r.err;
  r = validate({"--list"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("stream.fmacs.2048"), std::string::npos);
}

}  // namespace
}  // namespace wafersim::test
