// The PE instruction set: opcodes, their operand signatures, the decoded instruction and its
// 64-bit encoding. One table (isa.cc) serves the assembler, the disassembler and the core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "hw/number_format.h"

namespace wafersim {

// Architectural limits of the encoding (the core's configured counts may be smaller).
constexpr int kNumGprs = 16;
constexpr int kMaxDsdRegs = 64;     // 6-bit field; the core has 44 by default
constexpr int kMaxTasks = 64;
constexpr int kMaxMicrothreads = 8;
constexpr int kInstrBytes = 8;      // every instruction takes 8 bytes of SRAM
constexpr uint32_t kMaxDsdLength = 65535;  // a descriptor's length field is 16 bits (dmem; dlen faults above)
constexpr int kMaxDsdStride = 2047;        // dmem's stride field: 12 bits, signed

enum class Op : uint8_t {
  // Scalar: integer ALU, fp32 on register bit patterns, loads/stores, branches, task control.
  kNop, kLi, kLif, kMov, kAdd, kSub, kMul, kAnd, kOr, kXor, kShl, kShr, kSra, kSlt, kSltu, kAddi,
  kFadd, kFsub, kFmul,
  kLd16, kLd32, kSt16, kSt32,
  kBeq, kBne, kBlt, kBge, kJmp,
  kActivate, kBlock, kUnblock, kExit, kHalt,
  // Descriptors: memory (base, length, stride) and fabric (color, length) operands.
  kDmem, kDfin, kDfout, kDlen, kDbase, kDaddb, kDstride,
  // Vector ops over descriptors (sync on the main thread, or async on a microthread).
  kVmov, kVadd, kVsub, kVmul, kVmax, kVfmac, kVaxpy, kVmuls, kVfill, kVrelu, kVdrelu, kVexp,
  kVrecip, kVcmpgt, kVsel, kVcvt, kVsum, kVlog,
  // Ramp filters: which wavelets of a color enter its input queue.
  kFilt, kFcnt,
  // The cycle counter (the SDK's timestamp module), as programs time themselves.
  kTsc,
  // D = A + B * s (the SDK's fmacs/fmach: STREAM's triad); after kTsc to keep earlier opcodes.
  kVfmacs,
  // Sends one control wavelet on a color (through its output queue, after what is queued):
  // it advances the switch positions of the routers it leaves (the stencil's broadcast patterns).
  kCtl,
  // Advances this PE's own router's switch position for a color once everything the core queued
  // on that color before it has left that router; nothing is sent (the SDK's advance_switch on
  // a fabric output). Tree reductions forward later children's data this way.
  kSwadv,
  // Gives a memory descriptor a second dimension: rows of rN elements (each `stride` apart), rS
  // elements from one row's start to the next (the SDK's mem4d_dsd, two of its four dimensions);
  // rN = 0 makes it one-dimensional again, as dmem does.
  kDrows,
  kCount
};

// What an async vector op does when it completes.
enum class DoneAction : uint8_t { kNone = 0, kActivate = 1, kUnblock = 2 };

// Operand signature letters (in assembly order):
//   r  GPR r0..r15            d  descriptor register d0..d63
//   c  color 0..31            t  task id 0..63
//   i  32-bit integer immediate or data label (a byte address)
//   F  fp32 literal (stored as its bit pattern)
//   m  memory operand [rA+imm] or [rA] (a GPR and a 32-bit offset)
//   l  code label (an instruction index)
//   B  dmem base (20-bit byte address), L 16-bit length, S 12-bit signed stride in elements
struct OpInfo {
  const char* mnemonic;
  const char* signature;
  bool vector;     // takes format suffixes and may be async
  bool two_fmts;   // vcvt, vfmac: .SRC.DST (destination format may differ)
};
extern const OpInfo kOpInfo[];  // indexed by Op
[[noreturn]] void unknown_opcode(size_t i);
inline const OpInfo& op_info(Op op) {
  const auto i = static_cast<size_t>(op);
  if (i >= static_cast<size_t>(Op::kCount)) unknown_opcode(i);
  return kOpInfo[i];
}
bool find_op(const std::string& mnemonic, Op* op);

// A decoded instruction. Operands are stored in signature order: register-like operands
// (r, d, c, t, and the GPR of an m operand) in reg[], in the order they appear; immediates
// (i, F, l, the offset of m, B) in imm; L in imm2; S in imm3.
struct Instr {
  Op op = Op::kNop;
  NumFormat fmt = NumFormat::kF32;   // source format of a vector op
  NumFormat fmt2 = NumFormat::kF32;  // destination format (== fmt unless two_fmts)
  uint8_t reg[4] = {0, 0, 0, 0};
  int32_t imm = 0;
  int32_t imm2 = 0;
  int32_t imm3 = 0;
  bool async = false;   // vector op on microthread `ut`
  uint8_t ut = 0;
  DoneAction done = DoneAction::kNone;
  uint8_t done_task = 0;

  bool operator==(const Instr& o) const;
};

// Encoding, 64 bits, little-endian fields:
//   [7:0] op; [13:8] reg0; [19:14] reg1; [25:20] reg2; [31:26] reg3.
//   Vector ops: [33:32] fmt, [35:34] fmt2, [36] async, [39:37] ut, [41:40] done,
//   [47:42] done_task.  Others with an immediate: [63:32] imm.
//   dmem: [13:8] d, [27:16] stride (signed), [43:28] length, [63:44] base.
// encode() throws std::invalid_argument when a field does not fit or a field the op does not
// have is not at its default (GPRs r0..r15, colors 0..31); decode() throws on an unknown opcode and
// on any word encode() would not produce. decode(encode(x)) == x for every valid x.
uint64_t encode(const Instr& in);
Instr decode(uint64_t word);

// One line of assembly for `in` (no label names: code targets print as `@N`, addresses as
// numbers), e.g. "vfmac.fp16.fp32 d3, d0, d1, d3" or "beq r1, r2, @7".
std::string disassemble(const Instr& in);

}  // namespace wafersim
