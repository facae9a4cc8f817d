// The layer-pipelined estimate's model of a convolution tile's vector ops (placement.h
// conv_tap_cycles) against the core: every tap's window op, run alone on a PE with the tile's
// layout (the ring, the planes and dx on the banks' alignment), takes the cycles the model counts,
// bank conflicts included.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "compiler/placement.h"
#include "compiler/ws_plan.h"
#include "core_support.h"

namespace wafersim::test {
namespace {

using compiler::ConvParams;
using compiler::ConvTap;

// The cycles of `op` over tap t's window for output channel o: x is a ring slot (input planes),
// y the output planes, dx like x, dz like y, w a stride-0 element; the bases as the tile aligns
// them (one slot of ring: the slot offset is the model's too).
uint64_t tap_op_cycles(const ConvParams& c, int cq, const ConvTap& t, int o, const std::string& op, int align) {
  const long long ni = static_cast<long long>(c.c) * c.h * c.w, P = static_cast<long long>(c.ho) * c.wo;
  const long long xo = (static_cast<long long>(t.ci) * c.h + t.oy0 * c.sh - c.pt + t.ky) * c.w + t.ox0 * c.sw - c.pl + t.kx;
  const long long yo = o * P + static_cast<long long>(t.oy0) * c.wo + t.ox0;
  const long long rows = t.oy1 - t.oy0, cols = t.ox1 - t.ox0;
  auto S = [](long long v) { return std::to_string(v); };
  const std::string al = ".align " + S(align) + "\n";
  const std::string prog = ".task 0, main, active\n.space pad, fp32, 3\n" + al + ".space x, fp32, " + S(ni) + "\n" + al +
                           ".space y, fp32, " + S(cq * P) + "\n" + al + ".space dz, fp32, " + S(cq * P) + "\n" + al +
                           ".space dx, fp32, " + S(ni) + "\n.space w, fp32, 1\nmain:\n" +
                           "  dmem d0, x+" + S(4 * xo) + ", " + S(rows * cols) + ", " + S(c.sw) + "\n" +
                           "  dmem d1, y+" + S(4 * yo) + ", " + S(rows * cols) + ", 1\n" +
                           "  dmem d2, dz+" + S(4 * yo) + ", " + S(rows * cols) + ", 1\n" +
                           "  dmem d3, dx+" + S(4 * xo) + ", " + S(rows * cols) + ", " + S(c.sw) + "\n" +
                           "  dmem d4, w, " + S(rows * cols) + ", 0\n" +
                           "  li r2, " + S(cols) + "\n  li r3, " + S(static_cast<long long>(c.sh) * c.w) + "\n" +
                           "  drows d0, r2, r3\n  drows d3, r2, r3\n  li r3, " + S(c.wo) + "\n  drows d1, r2, r3\n  drows d2, r2, r3\n" +
                           "  lif r1, 0.5\n" + op + "\n  halt\n";
  CoreRig rig(1);
  PeCore* core = rig.add(0, 0, prog);
  return rig.halt_cycle(core);
}

TEST(ConvCost, TapCyclesAreTheCoresWithBankConflicts) {
  std::mt19937 rng(7);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  int checked = 0;
  for (int trial = 0; trial < 12; ++trial) {
    ConvParams c;
    c.on = true;
    c.c = pick(1, 2);
    c.h = pick(5, 11);
    c.w = pick(5, 11);
    c.kh = pick(1, 3);
    c.kw = pick(1, 3);
    c.sh = pick(1, 2);
    c.sw = pick(1, 2);
    c.pt = pick(0, c.kh - 1);
    c.pl = pick(0, c.kw - 1);
    c.ho = (c.h + 2 * c.pt - c.kh) / c.sh + 1;
    c.wo = (c.w + 2 * c.pl - c.kw) / c.sw + 1;
    const int cq = pick(1, 3);
    c.co = cq;
    CoreConfig core = small_config(1, 1).core;
    const int align = compiler::conv_sram_align(core);
    // The same program without its op: the cycles around it.
    const ConvTap none = compiler::conv_taps(c).front();
    const uint64_t base = tap_op_cycles(c, cq, none, 0, "", align);
    uint64_t fwd = 0, bwd = 0;
    for (const ConvTap& t : compiler::conv_taps(c)) {
      if (t.oy1 <= t.oy0 || t.ox1 <= t.ox0) continue;
      for (int o = 0; o < cq; ++o) {
        fwd += tap_op_cycles(c, cq, t, o, "vaxpy.fp32 d1, d0, r1", align) - base;
        bwd += tap_op_cycles(c, cq, t, o, "vfmac.fp32 d4, d2, d0, d4", align) - base;
        bwd += tap_op_cycles(c, cq, t, o, "vaxpy.fp32 d3, d2, r1", align) - base;
        ++checked;
      }
    }
    const compiler::ConvTapCycles m = compiler::conv_tap_cycles(c, cq, true, 1, core);
    const std::string what = "trial " + std::to_string(trial) + ": c " + std::to_string(c.c) + " " + std::to_string(c.h) + "x" +
                             std::to_string(c.w) + " k " + std::to_string(c.kh) + "x" + std::to_string(c.kw) + " s " +
                             std::to_string(c.sh) + "," + std::to_string(c.sw) + " cq " + std::to_string(cq);
    EXPECT_EQ(static_cast<double>(fwd), m.fwd) << what;
    EXPECT_EQ(static_cast<double>(bwd), m.bwd) << what;
  }
  EXPECT_GT(checked, 50);
}

}  // namespace
}  // namespace wafersim::test
