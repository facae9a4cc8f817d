// The ISA encoding, the assembler and disassembler, and the binary image format: encode/decode
// of every opcode at its field extremes, a program using every mnemonic and directive, text and
// binary round trips, corrupt image files, and each assembler error with its line:column.
#include "firmware/assembler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "firmware/image.h"
#include "firmware/isa.h"
#include "hw/wavelet.h"

namespace wafersim {
namespace {

// Every register field at its architectural maximum, so the text round trips need this target.
AsmTarget wide_target() {
  AsmTarget t;
  t.colors = kMaxColors;
  t.dsd_regs = kMaxDsdRegs;
  return t;
}

// An instruction of `op` with every operand at its low (variant 0) or high (variant 1) extreme,
// or at mixed values (variant 2); vector ops get formats and completion fields by variant too.
Instr extreme(Op op, int variant) {
  const OpInfo& info = op_info(op);
  Instr in;
  in.op = op;
  int slot = 0;
  const bool hi = variant == 1;
  for (const char* s = info.signature; *s; ++s) {
    switch (*s) {
      case 'r':
        in.reg[slot++] = hi ? 15 : variant == 2 ? 7 : 0;
        break;
      case 'c':
        in.reg[slot++] = hi ? kMaxColors - 1 : variant == 2 ? 21 : 0;
        break;
      case 'd':
      case 't':
        in.reg[slot++] = hi ? 63 : variant == 2 ? 21 : 0;
        break;
      case 'm':
        in.reg[slot++] = hi ? 15 : 0;
        in.imm = hi ? INT32_MAX : variant == 2 ? -4 : INT32_MIN;
        break;
      case 'i':
      case 'F':
        in.imm = hi ? INT32_MAX : variant == 2 ? -1 : INT32_MIN;
        break;
      case 'l':
        in.imm = hi ? INT32_MAX : 0;
        break;
      case 'B':
        in.imm = hi ? (1 << 20) - 1 : variant == 2 ? 4096 : 0;
        break;
      case 'L':
        in.imm2 = hi ? 65535 : variant == 2 ? 100 : 0;
        break;
      case 'S':
        in.imm3 = hi ? 2047 : variant == 2 ? 1 : -2048;
        break;
      default:
        break;
    }
  }
  if (info.vector) {
    in.fmt = static_cast<NumFormat>(variant % 4);
    in.fmt2 = info.two_fmts ? static_cast<NumFormat>((variant + 3) % 4) : in.fmt;
    if (variant >= 1) {
      in.async = true;
      in.ut = hi ? 7 : 3;
      in.done = hi ? DoneAction::kUnblock : DoneAction::kActivate;
      in.done_task = hi ? 63 : 9;
    }
  }
  return in;
}

TEST(Isa, EveryOpcodeRoundTripsAtItsFieldExtremes) {
  for (int o = 0; o < static_cast<int>(Op::kCount); ++o) {
    const Op op = static_cast<Op>(o);
    for (int variant = 0; variant < 3; ++variant) {
      const Instr in = extreme(op, variant);
      SCOPED_TRACE(std::string(op_info(op).mnemonic) + " variant " + std::to_string(variant));
      const uint64_t word = encode(in);
      EXPECT_EQ(word & 0xff, static_cast<uint64_t>(o));
      EXPECT_TRUE(decode(word) == in) << disassemble(decode(word)) << " vs " << disassemble(in);
      // The printed form assembles back to the same word (branch targets must lie in the code).
      if (in.imm != INT32_MAX || !std::strchr(op_info(op).signature, 'l')) {
        const PeImage img = assemble(disassemble(in) + "\n.task 0, @0\n", "x.s", wide_target());
        ASSERT_EQ(img.code.size(), 1u);
        EXPECT_EQ(img.code[0], word) << disassemble(in);
      }
    }
  }
}

TEST(Isa, VectorFormatPairs) {
  for (int a = 0; a < 4; ++a) {
    for (int b = 0; b < 4; ++b) {
      Instr in;
      in.op = Op::kVcvt;
      in.fmt = static_cast<NumFormat>(a);
      in.fmt2 = static_cast<NumFormat>(b);
      in.reg[0] = 1;
      in.reg[1] = 2;
      EXPECT_TRUE(decode(encode(in)) == in) << disassemble(in);
    }
  }
}

TEST(Isa, InvalidFieldsThrow) {
  const auto bad = [](Instr in, const char* why) {
    EXPECT_THROW(encode(in), std::invalid_argument) << why << ": " << disassemble(in);
  };
  Instr add;
  add.op = Op::kAdd;
  Instr in = add;
  in.reg[1] = 16;
  bad(in, "GPR past r15");
  in = add;
  in.reg[3] = 1;
  bad(in, "register slot the op does not have");
  in = add;
  in.fmt = NumFormat::kF16;
  bad(in, "format on a scalar op");
  in = add;
  in.async = true;
  bad(in, "async on a scalar op");
  in = add;
  in.imm = 5;
  bad(in, "immediate on an op without one");

  Instr dfin;
  dfin.op = Op::kDfin;
  dfin.reg[1] = kMaxColors;
  bad(dfin, "color 32");

  Instr dmem;
  dmem.op = Op::kDmem;
  in = dmem;
  in.imm = 1 << 20;
  bad(in, "base");
  in = dmem;
  in.imm = -1;
  bad(in, "negative base");
  in = dmem;
  in.imm2 = 65536;
  bad(in, "length");
  in = dmem;
  in.imm3 = 2048;
  bad(in, "stride high");
  in = dmem;
  in.imm3 = -2049;
  bad(in, "stride low");
  in = dmem;
  in.reg[0] = 64;
  bad(in, "descriptor register");

  Instr vadd;
  vadd.op = Op::kVadd;
  in = vadd;
  in.imm = 1;
  bad(in, "immediate on a vector op");
  in = vadd;
  in.fmt2 = NumFormat::kBF16;
  bad(in, "second format on a one-format op");
  in = vadd;
  in.ut = 3;
  bad(in, "microthread without async");
  in = vadd;
  in.done = DoneAction::kActivate;
  bad(in, "completion without async");
  in = vadd;
  in.async = true;
  in.done_task = 4;
  bad(in, "completion task without action");
  in = vadd;
  in.async = true;
  in.ut = 8;
  bad(in, "microthread 8");
  in = vadd;
  in.fmt = in.fmt2 = static_cast<NumFormat>(4);
  bad(in, "format 4");
  in = vadd;
  in.op = Op::kCount;
  bad(in, "opcode kCount");

  EXPECT_THROW(decode(0xff), std::invalid_argument);
  EXPECT_THROW(decode(static_cast<uint64_t>(Op::kCount)), std::invalid_argument);
  const uint64_t nop = encode(Instr{});
  EXPECT_THROW(decode(nop | uint64_t{1} << 40), std::invalid_argument);  // stray immediate bits
  EXPECT_THROW(decode(nop | uint64_t{1} << 8), std::invalid_argument);   // stray register
  EXPECT_THROW(decode(encode(add) | uint64_t{16} << 8), std::invalid_argument);  // r16
  Instr async = vadd;
  async.async = true;
  EXPECT_THROW(decode(encode(async) | uint64_t{3} << 40), std::invalid_argument);  // done = 3
  EXPECT_THROW(decode(encode(vadd) | uint64_t{1} << 34), std::invalid_argument);   // fmt2 != fmt
}

// Every mnemonic and every directive; 64 instructions, so the code ends at byte 512.
const char kSample[] = R"(; sample program
.equ N, 16
.equ IN, 3
.inq 0, IN
.inq 7, 5
.outq 0, 4
.outq 5, 23
main:   li r1, 0x7fffffff
        li r2, -2147483648
        li r3, 0xffffffff
        li r4, x+4              // a data address plus an offset
        lif r5, 1.5
        lif r6, -inf
        lif r7, 0x7fc00001
        mov r8, r1
        add r1, r2, r3
        sub r1, r2, r3
        mul r9, r10, r11
        and r12, r13, r14
        or r15, r0, r1
        xor r1, r2, r3
        shl r1, r2, r3
        shr r1, r2, r3
        sra r1, r2, r3
        slt r1, r2, r3
        sltu r1, r2, r3
        addi r1, r2, -5
        fadd r1, r2, r3
        fsub r1, r2, r3
        fmul r1, r2, r3
        ld16 r1, [r2]
        ld32 r1, [ r2 + 8 ]
        st16 [r3-4], r4
        st32 [r15+tbl], r0
loop:   beq r1, r2, loop
        bne r1, r2, @0
        blt r1, r2, done
        bge r1, r2, loop
        jmp done
        activate 5
        block 63
        unblock 0
        exit
        halt
        dmem d0, x, N, 1
        dmem d43, 0xfffff, 65535, -2048
        dfin d1, IN, 32
        dfout d2, 4, N
        dlen d3, r1
        dbase d3, r2
        daddb d3, -8
        dstride d3, r4
        vmov.fp32 d0, d1
        vadd.fp16 d0, d1, d2
        vsub.bf16 d0, d1, d2
        vmul.cb16 d0, d1, d2
        vmax.fp32 d0, d1, d2
        vfmac.fp16.fp32 d3, d0, d1, d3, async=2, done=activate:5
        vaxpy.fp32 d0, d1, r2
        vmuls.fp32 d0, d1, r2
        vfill.fp16 d0, r3
        vrelu.fp32 d0, d1, async=7
        vdrelu.fp32 d0, d1, d2
        vexp.fp32 d0, d1
        vrecip.fp32 d0, d1
        vlog.fp32 d0, d1
        vcmpgt.fp32 d0, d1, d2
        vsel.fp32 d0, d1, d2, d3
        vcvt.fp32.bf16 d0, d1, async=0, done=unblock:63
        vsum.fp32 r1, d0
        vcvt.fp16 d4, d5        ; the destination format defaults to the source's
        filt IN, r1, r2
        fcnt IN, r3
done:   nop
        tsc r9
        vfmacs.bf16 d1, d2, d3, r4, async=1, done=unblock:5
        ctl 4
        swadv 4
        drows d3, r1, r2
end:
.task 0, main, active
.task 5, loop, color=IN
.task 63, @2, blocked, active
.task 1, done, color=5
.data x, fp32, 1.0, -2.5, 0x7f800001, 3.4028235e38, 1e-45
.align 64
.data h, fp16, 1.0, 65504, 0x7c00
.data c, cb16, 1.0, -0.5
.data b, bf16, 1.5
.data ints, i16, -32768, 65535, 7
.data words, i32, -1, 0xffffffff, x+8, words
.space tbl, i32, N
.org 0x1000
.data tail, fp32, inf, -inf, nan
.equ END, tail+12
        )";

uint32_t word_at(const PeImage& img, const std::string& sym, uint32_t k) {
  const Symbol* s = img.find(sym);
  for (const DataBlock& b : img.data) {
    if (b.addr == s->addr) {
      uint32_t v = 0;
      for (uint32_t i = 0; i < s->elem_bytes; ++i) {
        v |= uint32_t{b.bytes[k * s->elem_bytes + i]} << (8 * i);
      }
      return v;
    }
  }
  ADD_FAILURE() << "no block for " << sym;
  return 0;
}

TEST(Assembler, SampleProgramUsesEveryMnemonic) {
  const PeImage img = assemble(kSample, "sample.s", AsmTarget{});
  ASSERT_EQ(img.code.size(), 72u);
  std::vector<bool> seen(static_cast<size_t>(Op::kCount));
  for (uint64_t w : img.code) seen[static_cast<size_t>(decode(w).op)] = true;
  for (size_t o = 0; o < seen.size(); ++o) {
    EXPECT_TRUE(seen[o]) << op_info(static_cast<Op>(o)).mnemonic << " not exercised";
  }
}

TEST(Assembler, SampleProgramLayoutAndFields) {
  const PeImage img = assemble(kSample, "sample.s", AsmTarget{});
  // Data starts right after the 72 instructions (576 bytes), naturally aligned.
  ASSERT_NE(img.find("x"), nullptr);
  EXPECT_EQ(img.find("x")->addr, 576u);
  EXPECT_EQ(img.find("h")->addr, 640u);  // .align 64 after x's 20 bytes
  EXPECT_EQ(img.find("c")->addr, 646u);
  EXPECT_EQ(img.find("b")->addr, 650u);
  EXPECT_EQ(img.find("ints")->addr, 652u);
  EXPECT_EQ(img.find("words")->addr, 660u);  // 658 rounded up to 4
  EXPECT_EQ(img.find("tbl")->addr, 676u);
  EXPECT_EQ(img.find("tbl")->count, 16u);
  EXPECT_EQ(img.find("tail")->addr, 0x1000u);
  EXPECT_EQ(img.end_address(), 0x100cu);
  EXPECT_EQ(img.find("END"), nullptr);  // .equ constants stay in the assembler
  const Symbol* loop = img.find("loop");
  ASSERT_NE(loop, nullptr);
  EXPECT_TRUE(loop->code);
  EXPECT_EQ(loop->addr, 27u);
  EXPECT_EQ(img.find("end")->addr, 72u);
  EXPECT_TRUE(img.find("ints")->is_int);
  EXPECT_EQ(img.find("ints")->elem_bytes, 2u);
  EXPECT_EQ(img.find("h")->fmt, NumFormat::kF16);

  EXPECT_EQ(img.inq_color[0], 3);
  EXPECT_EQ(img.inq_color[7], 5);
  EXPECT_EQ(img.inq_color[1], -1);
  EXPECT_EQ(img.outq_color[5], 23);
  ASSERT_EQ(img.tasks.size(), 4u);
  EXPECT_EQ(img.tasks[0].name, "main");
  EXPECT_TRUE(img.tasks[0].active);
  EXPECT_EQ(img.tasks[0].color, -1);
  EXPECT_EQ(img.tasks[1].entry, 27u);
  EXPECT_EQ(img.tasks[1].color, 3);
  EXPECT_EQ(img.tasks[2].id, 63);
  EXPECT_EQ(img.tasks[2].entry, 2u);
  EXPECT_EQ(img.tasks[2].name, "");
  EXPECT_TRUE(img.tasks[2].blocked && img.tasks[2].active);

  const auto at = [&](size_t i) { return decode(img.code[i]); };
  EXPECT_EQ(at(1).imm, INT32_MIN);
  EXPECT_EQ(at(2).imm, -1);  // 0xffffffff as a bit pattern
  EXPECT_EQ(at(3).imm, 576 + 4);
  EXPECT_EQ(static_cast<uint32_t>(at(4).imm), 0x3fc00000u);
  EXPECT_EQ(static_cast<uint32_t>(at(5).imm), 0xff800000u);
  EXPECT_EQ(static_cast<uint32_t>(at(6).imm), 0x7fc00001u);
  EXPECT_EQ(at(24).reg[1], 2);
  EXPECT_EQ(at(24).imm, 8);
  EXPECT_EQ(at(25).reg[0], 3);
  EXPECT_EQ(at(25).imm, -4);
  EXPECT_EQ(at(26).imm, 676);  // [r15+tbl]
  EXPECT_EQ(at(27).imm, 27);   // beq to itself
  EXPECT_EQ(at(29).imm, 66);   // blt done
  const Instr dmem = at(37);
  EXPECT_EQ(dmem.op, Op::kDmem);
  EXPECT_EQ(dmem.imm, 576);
  EXPECT_EQ(dmem.imm2, 16);
  EXPECT_EQ(dmem.imm3, 1);
  EXPECT_EQ(at(38).imm3, -2048);
  EXPECT_EQ(at(39).reg[1], 3);  // dfin's color, from .equ
  const Instr fmac = at(50);
  EXPECT_EQ(fmac.op, Op::kVfmac);
  EXPECT_EQ(fmac.fmt, NumFormat::kF16);
  EXPECT_EQ(fmac.fmt2, NumFormat::kF32);
  EXPECT_TRUE(fmac.async);
  EXPECT_EQ(fmac.ut, 2);
  EXPECT_EQ(fmac.done, DoneAction::kActivate);
  EXPECT_EQ(fmac.done_task, 5);
  EXPECT_EQ(at(61).done, DoneAction::kUnblock);
  EXPECT_EQ(at(63).fmt2, NumFormat::kF16);  // vcvt.fp16: destination defaults to the source

  EXPECT_EQ(word_at(img, "x", 1), 0xc0200000u);
  EXPECT_EQ(word_at(img, "x", 2), 0x7f800001u);
  EXPECT_EQ(word_at(img, "x", 3), 0x7f7fffffu);
  EXPECT_EQ(word_at(img, "x", 4), 0x00000001u);
  EXPECT_EQ(word_at(img, "h", 0), 0x3c00u);
  EXPECT_EQ(word_at(img, "h", 1), 0x7bffu);
  EXPECT_EQ(word_at(img, "c", 0), uint32_t{kCb16DefaultBias} << 9);
  EXPECT_EQ(word_at(img, "c", 1), 0x8000u | uint32_t{kCb16DefaultBias - 1} << 9);
  EXPECT_EQ(word_at(img, "b", 0), 0x3fc0u);
  EXPECT_EQ(word_at(img, "ints", 0), 0x8000u);
  EXPECT_EQ(word_at(img, "ints", 1), 0xffffu);
  EXPECT_EQ(word_at(img, "words", 2), 584u);  // x+8
  EXPECT_EQ(word_at(img, "words", 3), 660u);  // its own address
  EXPECT_EQ(word_at(img, "tail", 2), 0x7fc00000u);
}

TEST(Assembler, Cb16UsesTheTargetBias) {
  AsmTarget t;
  t.cb16_bias = 20;
  const PeImage img = assemble("nop\n.task 0, @0\n.data c, cb16, 1.0\n", "b.s", t);
  EXPECT_EQ(word_at(img, "c", 0), 20u << 9);
}

TEST(Assembler, TextRoundTrip) {
  const PeImage img = assemble(kSample, "sample.s", AsmTarget{});
  const std::string text = disassemble_image(img);
  const PeImage again = assemble(text, "disasm.s", AsmTarget{});
  EXPECT_TRUE(again == img) << text;
  EXPECT_EQ(disassemble_image(again), text);
  // The disassembly keeps labels and task names, and zero blocks compact to .space.
  EXPECT_NE(text.find("loop:\n    beq r1, r2, @27\n"), std::string::npos) << text;
  EXPECT_NE(text.find(".task 5, loop, color=3\n"), std::string::npos) << text;
  EXPECT_NE(text.find(".task 63, @2, active, blocked\n"), std::string::npos) << text;
  EXPECT_NE(text.find(".org 0x2a4\n.space tbl, i32, 16\n"), std::string::npos) << text;
  EXPECT_NE(text.find(".data ints, i16, -32768, -1, 7\n"), std::string::npos) << text;
}

TEST(Assembler, DisassemblyRefusesImagesItCannotReproduce) {
  PeImage img = assemble(kSample, "sample.s", AsmTarget{});
  PeImage bad = img;
  bad.code[3] |= uint64_t{1} << 20;  // a register bit in li's unused slot
  EXPECT_THROW(disassemble_image(bad), std::invalid_argument);
  bad = img;
  bad.data.pop_back();
  EXPECT_THROW(disassemble_image(bad), std::invalid_argument);
  bad = img;
  bad.tasks[0].name = "nowhere";
  EXPECT_THROW(disassemble_image(bad), std::invalid_argument);
  bad = img;
  std::swap(bad.symbols[0], bad.symbols[1]);
  EXPECT_THROW(disassemble_image(bad), std::invalid_argument);
}

TEST(Image, DefaultsAndLookup) {
  const PeImage img;
  for (int8_t c : img.inq_color) EXPECT_EQ(c, -1);
  for (int8_t c : img.outq_color) EXPECT_EQ(c, -1);
  EXPECT_EQ(img.end_address(), 0u);
  EXPECT_EQ(img.find("x"), nullptr);
  EXPECT_TRUE(img == PeImage());
}

std::string to_bytes(const PeImage& img) {
  std::ostringstream os;
  write_image(img, os);
  return os.str();
}

PeImage from_bytes(const std::string& bytes) {
  std::istringstream is(bytes);
  return read_image(is, "mem.wsimg");
}

// The runtime_error of reading `bytes`, or "" if it read.
std::string read_error(const std::string& bytes) {
  try {
    from_bytes(bytes);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(Image, BinaryRoundTrip) {
  const PeImage img = assemble(kSample, "sample.s", AsmTarget{});
  const std::string bytes = to_bytes(img);
  EXPECT_EQ(bytes.compare(0, 8, std::string("WSIMG1\n\0", 8)), 0);
  EXPECT_TRUE(from_bytes(bytes) == img);
  PeImage other = img;
  other.symbols[3].count += 1;
  EXPECT_FALSE(from_bytes(bytes) == other);
}

TEST(Image, FileRoundTrip) {
#ifdef WAFERSIM_TEST_TMPDIR
  const std::string dir = WAFERSIM_TEST_TMPDIR;
#else
  const std::string dir = testing::TempDir();
#endif
  const std::string path = dir + "/assembler_test_" + std::to_string(::getpid()) + ".wsimg";
  const PeImage img = assemble(kSample, "sample.s", AsmTarget{});
  save_image_file(img, path);
  EXPECT_TRUE(load_image_file(path) == img);
  std::remove(path.c_str());
  try {
    load_image_file(path);
    ADD_FAILURE() << "loaded a missing file";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(Image, EveryTruncationIsRejected) {
  const PeImage img = assemble(
      ".inq 1, 2\nmain: li r1, buf\n halt\n.task 0, main, color=2\n.data buf, i16, 1, 2, 3\n",
      "small.s", AsmTarget{});
  const std::string bytes = to_bytes(img);
  ASSERT_TRUE(from_bytes(bytes) == img);
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string err = read_error(bytes.substr(0, n));
    EXPECT_EQ(err.rfind("mem.wsimg: ", 0), 0u) << "length " << n << ": '" << err << "'";
  }
}

TEST(Image, CorruptFilesAreRejected) {
  const PeImage img = assemble("main: halt\n.task 0, main\n.data v, fp32, 1\n", "s.s", AsmTarget{});
  const std::string good = to_bytes(img);
  const auto patched = [&](size_t at, const std::string& with) {
    std::string b = good;
    b.replace(at, with.size(), with);
    return b;
  };
  const auto expect = [](const std::string& bytes, const std::string& what) {
    const std::string err = read_error(bytes);
    EXPECT_NE(err.find(what), std::string::npos) << "'" << err << "' lacks '" << what << "'";
    EXPECT_EQ(err.rfind("mem.wsimg: ", 0), 0u) << err;
  };
  expect(patched(0, "X"), "bad magic");
  expect(patched(8, std::string("\x02\0\0\0", 4)), "version 2");
  expect(patched(12, "\xff\xff\xff\xff"), "instructions");             // code count
  expect(patched(24, std::string("\0\0\0\x10", 4)), "data blocks");    // 256 M data blocks
  expect(patched(32, std::string("\0\0\0\x02", 4)), "bytes of data");  // a 32 MB block
  expect(patched(28, "\xff\xff\xff\xff"), "32-bit address space");     // block address
  expect(good + "x", "trailing");
  std::string bad_color = good;
  bad_color[40] = 32;  // inq_color[0]
  expect(bad_color, "color 32");
}

// What the core and the program loader rely on, checked when the file is read (fuzz_program
// found the first; before, load_program threw std::invalid_argument, and the others read or wrote
// outside their buffers).
TEST(Image, CorruptTablesAreRejected) {
  const PeImage img = assemble("main: halt\n.task 0, main\n.data v, fp32, 1\n", "s.s", AsmTarget{});
  const std::string good = to_bytes(img);
  ASSERT_TRUE(from_bytes(good) == img);
  const auto patched = [&](size_t at, const std::string& with) {
    std::string b = good;
    b.replace(at, with.size(), with);
    return b;
  };
  const auto expect = [](const std::string& bytes, const std::string& what) {
    const std::string err = read_error(bytes);
    EXPECT_NE(err.find(what), std::string::npos) << "'" << err << "' lacks '" << what << "'";
    EXPECT_EQ(err.rfind("mem.wsimg: ", 0), 0u) << err;
  };
  // The code word at byte 16: an unknown opcode, and bits in a field halt does not have.
  expect(patched(16, "\xff"), "instruction 0: unknown opcode 255");
  expect(patched(20, "\x09"), "instruction 0: invalid instruction word");
  // The data block at byte 28 (4 bytes): ending at 4 GB, which a 32-bit end address cannot hold.
  expect(patched(28, "\xfc\xff\xff\xff"), "32-bit address space");
  // The last symbol, v: address, flags, format, element bytes, count (the last 14 bytes).
  const size_t v = good.size() - 14;
  expect(patched(v + 6, std::string("\x08\0\0\0", 4)), "data symbol 'v' has 8-byte elements");
  expect(patched(v + 6, std::string("\x02\0\0\0", 4)), "data symbol 'v' has 2-byte elements");
  expect(patched(v + 10, std::string("\0\0\0\0", 4)), "data symbol 'v' has no elements");
  expect(patched(v, "\xfe\xff\xff\xff"), "data symbol 'v' runs past the 32-bit address space");
  EXPECT_EQ(read_error(patched(v + 4, "\x02")), "");  // as i32: integer symbols have 2- or 4-byte elements
  expect(patched(v + 4, std::string("\x02\0\x01", 3)), "data symbol 'v' has 1-byte elements");
}

// ---------------------------------------------------------------------------------------------
// Assembler errors: each names the file, line and column of the offending token.

void expect_error(const std::string& src, int line, int col, const std::string& what,
                  const AsmTarget& target = AsmTarget{}) {
  SCOPED_TRACE(src);
  try {
    assemble(src, "t.s", target);
    ADD_FAILURE() << "assembled; expected '" << what << "'";
  } catch (const AsmError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.line(), line) << msg;
    EXPECT_EQ(e.column(), col) << msg;
    const std::string where = "t.s:" + std::to_string(line) + ":" + std::to_string(col) + ": ";
    EXPECT_EQ(msg.rfind(where, 0), 0u) << msg;
    EXPECT_NE(msg.find(what), std::string::npos) << msg;
  }
}

TEST(AssemblerErrors, UnknownMnemonicAndDirective) {
  expect_error("nop\n  vadx.fp32 d0, d1\n", 2, 3, "unknown mnemonic 'vadx'");
  expect_error("nop\n.task 0, @0\n  .dta x, fp32, 1\n", 3, 3, "unknown directive '.dta'");
}

TEST(AssemblerErrors, OperandCountAndKind) {
  expect_error("add r1, r2\n", 1, 1,
               "'add' takes 3 operands (register, register, register), got 2");
  expect_error("add r1, r2, r3, r4\n", 1, 17, "takes 3 operands");
  expect_error("add r1, d2, r3\n", 1, 9, "expected a general register r0..r15, got 'd2'");
  expect_error("li r1, 1.5\n", 1, 8, "expected an immediate, got '1.5'");
  expect_error("ld32 r1, r2\n", 1, 10, "expected a memory operand");
  expect_error("ld32 r1, [r2*4]\n", 1, 13, "expected '+NAME', '+N' or '-N'");
  expect_error("lif r1, 1.5x\n", 1, 9, "expected a float literal");
  expect_error("add r1, , r3\n", 1, 9, "missing operand before ','");
  expect_error("add r1, r2,\n", 1, 11, "missing operand after ','");
  expect_error(".inq 1\n", 1, 1, "expected .inq QUEUE, COLOR");
}

TEST(AssemblerErrors, BadRegisters) {
  expect_error("add r1, r16, r3\n", 1, 9, "bad register 'r16'");
  expect_error("vmov.fp32 d44, d0\n", 1, 11,
               "bad register 'd44': expected a descriptor register d0..d43");
  expect_error("mov r01, r2\n", 1, 5, "bad register 'r01'");
}

TEST(AssemblerErrors, OutOfRangeValues) {
  expect_error("li r1, 0x100000000\n", 1, 8, "immediate 0x100000000 out of range");
  expect_error("addi r1, r2, -2147483649\n", 1, 14, "out of range");
  expect_error("dfin d0, 24, 4\n", 1, 10, "color 24 out of range (0..23)");
  expect_error("filt 24, r1, r2\n", 1, 6, "color 24 out of range (0..23)");
  expect_error("fcnt 3, 7\n", 1, 9, "expected a general register r0..r15, got '7'");
  expect_error("activate 64\n", 1, 10, "task 64 out of range (0..63)");
  expect_error(".inq 8, 1\n", 1, 6, "input queue 8 out of range (0..7)");
  expect_error(".outq 6, 1\n", 1, 7, "output queue 6 out of range (0..5)");
  expect_error("vmov.fp32 d0, d1, async=8\n", 1, 25, "microthread 8 out of range (0..7)");
  expect_error("vmov.fp32 d0, d1, async=1, done=activate:64\n", 1, 42, "task 64 out of range");
  expect_error("dmem d0, 0x100000, 4, 1\n", 1, 10, "dmem base 0x100000 out of range");
  expect_error("dmem d0, 0, 65536, 1\n", 1, 13, "length 65536 out of range");
  expect_error("dmem d0, 0, 4, -2049\n", 1, 16, "stride -2049 out of range");
  expect_error(".equ K, 40\ndfin d0, K, 4\n", 2, 10, "color K (= 40) out of range");
  expect_error("nop\n.data h, fp16, 1, 70000\n", 2, 19, "70000 overflows fp16");
  expect_error("nop\n.data h, fp16, 0x10000\n", 2, 16, "does not fit fp16");
  expect_error("nop\n.data v, i16, 65536\n", 2, 15, "i16 value 65536 out of range");
  expect_error("lif r1, 1e39\n", 1, 9, "out of fp32 range");
}

TEST(AssemblerErrors, FormatSuffixes) {
  expect_error("vadd d0, d1, d2\n", 1, 1, "'vadd' needs a format suffix, e.g. vadd.fp32");
  expect_error("add.fp32 r1, r2, r3\n", 1, 5, "'add' takes no format suffix");
  expect_error("vadd.fp32.fp16 d0, d1, d2\n", 1, 11, "'vadd' takes one format suffix");
  expect_error("vcvt.fp32.fp16.bf16 d0, d1\n", 1, 16, "at most two format suffixes");
  expect_error("vadd.fp64 d0, d1, d2\n", 1, 6, "unknown format 'fp64'");
  expect_error("nop\n.data x, f32, 1\n", 2, 10, "unknown data format 'f32'");
}

TEST(AssemblerErrors, Labels) {
  expect_error("nop\n  jmp nowhere\n", 2, 7, "unknown label 'nowhere'");
  expect_error("a: nop\nb: nop\n  a: nop\n", 3, 3, "duplicate label 'a' (first defined on line 1)");
  expect_error("x: nop\n.data x, fp32, 1\n", 2, 7,
               "duplicate symbol 'x' (first defined on line 1)");
  expect_error("r3: nop\n", 1, 1, "'r3' is a register name");
  expect_error("nop\nx: .data y, fp32, 1\n", 2, 1, "label 'x' before a directive");
  expect_error("nop\n.data y, fp32, 1\n  jmp y\n", 3, 7, "'y' is not a code label");
  expect_error("nop\nend: li r1, end\n", 2, 13, "'end' is a code label");
  expect_error("nop\n.equ A, B\n.equ B, 1\n", 2, 9, "'B' is defined further down");
  expect_error("nop\n  jmp @2\n", 2, 7,
               "branch target '@2' is past the end of code (2 instructions)");
}

TEST(AssemblerErrors, Tasks) {
  expect_error("m: nop\n.task 0, m\n.task 0, m\n", 3, 7, "task 0 is already declared (line 2)");
  expect_error("nop\n", 1, 1, "no tasks: declare at least one .task");
  expect_error("nop\nend:\n.task 3, end\n", 3, 10, "task 3 entry 'end' is past the end of code");
  expect_error("nop\n.task 3, @1\n", 2, 10, "task 3 entry '@1' is past the end of code");
  expect_error("m: nop\n.task 0, m, color=4\n", 2, 19, "no input queue takes color 4");
  expect_error(".inq 0, 4\nm: nop\n.task 0, m, color=4\n.task 1, m, color=4\n", 4, 19,
               "color 4 already triggers task 0");
  expect_error("m: nop\n.task 0, m, active, active\n", 2, 21, "duplicate .task option 'active'");
  expect_error("m: nop\n.task 0, m, ready\n", 2, 13, "unknown .task option 'ready'");
}

TEST(AssemblerErrors, Queues) {
  expect_error(".inq 2, 1\n.inq 2, 3\n", 2, 6,
               "input queue 2 is already bound to color 1 (line 1)");
  expect_error(".inq 2, 1\n.inq 3, 1\n", 2, 9, "color 1 is already bound to input queue 2");
  expect_error(".outq 0, 1\n.outq 1, 1\n", 2, 10, "color 1 is already bound to output queue 0");
}

TEST(AssemblerErrors, AsyncAndCompletion) {
  expect_error("add r1, r2, r3, async=1\n", 1, 17, "async= is only valid on vector ops");
  expect_error("vmov.fp32 d0, d1, done=activate:1\n", 1, 19, "done= needs async=");
  expect_error("vmov.fp32 d0, d1, async=1, done=wake:1\n", 1, 33,
               "unknown completion action 'wake'");
  expect_error("vmov.fp32 d0, async=1, d1\n", 1, 24, "keyword operands come last");
}

TEST(AssemblerErrors, SramAndDataLayout) {
  AsmTarget tiny;
  tiny.sram_bytes = 64;
  std::string nine;
  for (int i = 0; i < 9; ++i) nine += "  nop\n";
  expect_error(nine, 9, 3, "the code alone needs 72 bytes, 8 more than the target's 64", tiny);
  expect_error("nop\n.data v, fp32, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15\n", 2, 7,
               "'v' ends at byte 68, 4 more than the target's 64", tiny);
  expect_error("nop\n.data a, fp32, 1, 2\n.org 12\n", 3, 6,
               "overlapping data: .org 0xc is below the end of 'a' (0x10)");
  expect_error("nop\nnop\n.org 8\n", 3, 6, ".org 0x8 is inside the code");
  expect_error("nop\n.align 3\n", 2, 8, "not a power of two");
}

}  // namespace
}  // namespace wafersim
