// Core timing edges: task start and branch refill (decode_latency), scalar results visible the
// cycle after they execute, vector op rates per format, SRAM port limits and bank conflicts.
#include <gtest/gtest.h>

#include "core_support.h"

namespace wafersim::test {
namespace {

TEST(CoreTiming, FirstInstructionExecutesDecodeLatencyAfterTaskStartAndStoresShowNextCycle) {
  for (int lat : {1, 3, 5}) {
    CoreRig rig(1);
    rig.hw().core.decode_latency = lat;
    PeCore* c = rig.add(0, 0, R"(
      .task 0, main, active
      .space out, i32, 2
      main:
        li r1, 5           ; executes at cycle lat (picked at 0)
        li r2, out         ; lat + 1
        st32 [r2], r1      ; lat + 2
        addi r1, r1, 2     ; lat + 3
        st32 [r2+4], r1    ; lat + 4
        halt               ; lat + 5
    )");
    const uint64_t store = static_cast<uint64_t>(lat) + 2;
    for (uint64_t t = 0; t < store; ++t) rig.fabric().step();
    EXPECT_EQ(rig.read_u32(c, "out"), 0u) << "not visible before cycle " << store << " (latency " << lat << ")";
    rig.fabric().step();  // cycle `store`
    EXPECT_EQ(rig.read_u32(c, "out"), 5u) << "latency " << lat;
    EXPECT_EQ(rig.halt_cycle(c), static_cast<uint64_t>(lat) + 5);
    EXPECT_EQ(rig.read_u32(c, "out", 1), 7u);
    EXPECT_EQ(c->stats().instructions, 6u);
  }
}

TEST(CoreTiming, TakenBranchCostsDecodeLatency) {
  for (int lat : {1, 3, 4}) {
    CoreRig rig(1);
    rig.hw().core.decode_latency = lat;
    PeCore* c = rig.add(0, 0, R"(
      .task 0, main, active
      main:
        li r1, 0
        li r2, 3
      loop:
        addi r1, r1, 1
        blt r1, r2, loop
        halt
    )");
    // li, li at lat, lat+1; iterations: addi, blt (taken twice: +lat each), halt.
    const uint64_t L = static_cast<uint64_t>(lat);
    const uint64_t expect = L + 2 + 2 * (1 + L) + 2;
    EXPECT_EQ(rig.halt_cycle(c), expect) << "latency " << lat;
    EXPECT_EQ(c->reg(1), 3u);
  }
}

// One vector op of n elements between three dmem set-ups and a halt: the halt executes in the
// cycle after the op's last step.
uint64_t vector_cycles(CoreRig& rig, const std::string& op, const std::string& fmt, int n, int gap_bytes = 264) {
  const std::string decl = fmt == "fp32" ? "fp32" : fmt;
  std::string src = ".task 0, main, active\n";
  src += ".org 4096\n.space a, " + decl + ", " + std::to_string(n) + "\n";
  src += ".org " + std::to_string(4096 + gap_bytes) + "\n.space b, " + decl + ", " + std::to_string(n) + "\n";
  src += ".org 12288\n.space c, " + decl + ", " + std::to_string(n) + "\n";
  src += ".org 16400\n.space y, " + decl + ", " + std::to_string(n) + "\n";
  src += "main:\n dmem d0, a, " + std::to_string(n) + ", 1\n dmem d1, b, " + std::to_string(n) +
         ", 1\n dmem d2, c, " + std::to_string(n) + ", 1\n dmem d3, y, " + std::to_string(n) + ", 1\n";
  src += " " + op + "\n halt\n";
  PeCore* c = rig.add(0, 0, src);
  const uint64_t start = static_cast<uint64_t>(rig.hw().core.decode_latency) + 4;  // the op's cycle
  return rig.halt_cycle(c) - start;
}

TEST(CoreTiming, VectorRatesPerFormat) {
  struct Case {
    const char* op;
    const char* fmt;
    int n;
    uint64_t cycles;
  };
  const Case cases[] = {
      {"vadd.fp32 d3, d0, d1", "fp32", 8, 4},          // add_fp32 = 2 per cycle
      {"vadd.fp16 d3, d0, d1", "fp16", 8, 2},          // add_16 = 4
      {"vmul.bf16 d3, d0, d1", "bf16", 8, 2},
      {"vmov.cb16 d3, d0", "cb16", 9, 3},              // ceil(9 / 4)
      {"vfmac.fp32 d3, d0, d1, d3", "fp32", 8, 16},    // 3 reads on 2 ports: 2 cycles per step
      {"vfmac.fp16 d3, d0, d1, d3", "fp16", 8, 4},     // 4 per step, 2 cycles each
      {"vexp.fp32 d3, d0", "fp32", 5, 5},              // special = 1
      {"vlog.fp32 d3, d0", "fp32", 5, 5},
      {"vmax.fp32 d3, d0, d1", "fp32", 7, 4},
  };
  for (const Case& k : cases) {
    CoreRig rig(1);
    EXPECT_EQ(vector_cycles(rig, k.op, k.fmt, k.n), k.cycles) << k.op;
  }
}

TEST(CoreTiming, AxpyRunsAtFmacRate) {
  for (auto [fmt, rate] : {std::pair<const char*, int>{"fp32", 1}, {"fp16", 4}}) {
    CoreRig rig(1);
    PeCore* c = rig.add(0, 0, std::string(R"(
      .task 0, main, active
      .org 4096
      .space x, )") + fmt + R"(, 16
      .org 8200
      .space y, )" + fmt + R"(, 16
      main:
        dmem d0, x, 16, 1
        dmem d1, y, 16, 1
        lif r1, 2.0
        vaxpy.)" + fmt + R"( d1, d0, r1
        halt
    )");
    const uint64_t start = static_cast<uint64_t>(rig.hw().core.decode_latency) + 3;
    EXPECT_EQ(rig.halt_cycle(c) - start, static_cast<uint64_t>(16 / rate)) << fmt;
  }
}

TEST(CoreTiming, FmacRateIsAParameter) {
  CoreRig rig(1);
  rig.hw().core.fmac_fp32 = 2;
  rig.hw().core.read_ports = 3;
  rig.hw().core.sram_banks = 16;  // three 4-word reads in one cycle without a conflict
  EXPECT_EQ(vector_cycles(rig, "vfmac.fp32 d3, d0, d1, d3", "fp32", 8), 4u);
}

// fp32 multiplies run at core.mul_fp32 (1 a cycle: the FMAC's multiplier; wse-facts.md, the
// CS-2's STREAM fmuls), adds at core.add_fp32 (2); 16-bit multiplies at the 16-bit rate. The
// halt executes exactly in the cycle after the last step.
TEST(CoreTiming, Fp32MultiplyRateIsAParameter) {
  for (int mul : {1, 2}) {
    for (const char* op : {"vmul.fp32 d3, d0, d1", "vmuls.fp32 d3, d0, r0"}) {
      CoreRig rig(1);
      rig.hw().core.mul_fp32 = mul;
      EXPECT_EQ(vector_cycles(rig, op, "fp32", 8), static_cast<uint64_t>(8 / mul)) << op << " at " << mul;
    }
  }
  CoreRig add(1);
  add.hw().core.mul_fp32 = 1;
  EXPECT_EQ(vector_cycles(add, "vadd.fp32 d3, d0, d1", "fp32", 8), 4u);
  CoreRig half(1);
  half.hw().core.mul_fp32 = 1;
  EXPECT_EQ(vector_cycles(half, "vmul.fp16 d3, d0, d1", "fp16", 8), 2u);
  HwConfig bad = small_config(1, 1);
  bad.core.mul_fp32 = 3;  // more than vector_bits / 32
  EXPECT_THROW(bad.validate(), ConfigError);
}

TEST(CoreTiming, ReadsOfOneBankInOneStepCostACycle) {
  // fp16, 4 elements per step: sources 48 bytes (24 words) apart hit the same 4 of 8 banks;
  // 40 bytes apart they do not; with 16 banks 48 bytes apart they do not either.
  CoreRig same(1);
  EXPECT_EQ(vector_cycles(same, "vadd.fp16 d3, d0, d1", "fp16", 16, 48), 8u);
  CoreRig apart(1);
  EXPECT_EQ(vector_cycles(apart, "vadd.fp16 d3, d0, d1", "fp16", 16, 40), 4u);
  CoreRig more_banks(1);
  more_banks.hw().core.sram_banks = 16;
  EXPECT_EQ(vector_cycles(more_banks, "vadd.fp16 d3, d0, d1", "fp16", 16, 48), 4u);
}

// Sources that advance at different rates (stride 1 and 2) collide in some steps and not in
// others. A solo op's timing (all its steps at once, PeCore::solo_cycles, by the banks' period)
// must count every step as the rule does: one cycle, plus one when the two reads share a bank.
TEST(CoreTiming, MixedStrideBankConflictsCountEveryStep) {
  const int n = 45;
  for (int banks : {8, 6, 16}) {
    for (int gap : {0, 4, 8, 20, 36}) {
      CoreRig rig(1);
      rig.hw().core.sram_banks = banks;
      const int a = 4096, b = 8192 + gap;
      PeCore* c = rig.add(0, 0, ".task 0, main, active\n.org " + std::to_string(a) + "\n.space x, fp32, " + std::to_string(n) +
                                    "\n.org " + std::to_string(b) + "\n.space z, fp32, " + std::to_string(2 * n) +
                                    "\n.org 16400\n.space y, fp32, " + std::to_string(n) +
                                    "\nmain:\n dmem d0, x, " + std::to_string(n) + ", 1\n dmem d1, z, " + std::to_string(n) +
                                    ", 2\n dmem d3, y, " + std::to_string(n) + ", 1\n vadd.fp32 d3, d0, d1\n halt\n");
      uint64_t expect = 0;  // one element a step (a strided operand); each read is 2 words
      for (int i = 0; i < n; ++i) {
        const int wa = a / 2 + 2 * i, wb = b / 2 + 4 * i;
        const bool clash = wa % banks == wb % banks || wa % banks == (wb + 1) % banks || (wa + 1) % banks == wb % banks;
        expect += 1 + (clash ? 1 : 0);
      }
      const uint64_t start = static_cast<uint64_t>(rig.hw().core.decode_latency) + 3;
      EXPECT_EQ(rig.halt_cycle(c) - start, expect) << banks << " banks, gap " << gap;
    }
  }
}

TEST(CoreTiming, StridedOperandsMoveOneElementPerCycle) {
  CoreRig rig(1);
  PeCore* c = rig.add(0, 0, R"(
    .task 0, main, active
    .org 4096
    .data x, fp16, 1, 2, 3, 4, 5, 6, 7, 8
    .org 8192
    .space y, fp16, 4
    main:
      dmem d0, x, 4, 2
      dmem d1, y, 4, 1
      vmov.fp16 d1, d0
      halt
  )");
  const uint64_t start = static_cast<uint64_t>(rig.hw().core.decode_latency) + 2;
  EXPECT_EQ(rig.halt_cycle(c) - start, 4u);
  const auto y = rig.read<uint16_t>(c, "y", 4);
  EXPECT_EQ(f16_to_f32(y[0]), 1.0f);
  EXPECT_EQ(f16_to_f32(y[1]), 3.0f);
  EXPECT_EQ(f16_to_f32(y[3]), 7.0f);
}

// tsc reads the cycle its instruction executes in: the first one executes decode_latency after
// the pick at cycle 0, each later scalar instruction one cycle on, a taken branch
// decode_latency on, a synchronous vector op the cycle after its last step. With the core
// skipping cycles (core.lazy) the readings are the same: tsc ends a skipped stretch.
TEST(CoreTiming, TscReadsTheCycleItExecutesIn) {
  for (bool lazy : {true, false}) {
    for (int lat : {1, 3}) {
      CoreRig rig(1);
      rig.hw().core.decode_latency = lat;
      rig.hw().core.lazy = lazy;
      PeCore* c = rig.add(0, 0, R"(
        .task 0, main, active
        .space a, fp32, 64
        .space out, i32, 4
        main:
          tsc r1              ; lat
          tsc r2              ; lat + 1
          jmp next            ; lat + 2, taken
        next:
          tsc r3              ; lat + 2 + lat
          dmem d0, a, 64, 1
          vmov.fp32 d0, d0    ; 32 steps at 2 fp32 per cycle: lat + 4 + lat .. + 31
          tsc r4              ; the cycle after the last step
          li r5, out
          st32 [r5], r1
          st32 [r5+4], r2
          st32 [r5+8], r3
          st32 [r5+12], r4
          halt
      )");
      rig.run_until_halted();
      const uint64_t L = static_cast<uint64_t>(lat);
      const auto v = rig.read<uint32_t>(c, "out", 4);
      EXPECT_EQ(v[0], L) << "lazy " << lazy;
      EXPECT_EQ(v[1], L + 1);
      EXPECT_EQ(v[2], L + 2 + L);
      EXPECT_EQ(v[3], L + 2 + L + 1 + 1 + 32) << "tsc, dmem, then 32 steps of vmov";
    }
  }
}

}  // namespace
}  // namespace wafersim::test

