#include "firmware/isa.h"

#include <cstring>
#include <sstream>
#include <stdexcept>

#include "hw/wavelet.h"

namespace wafersim {

// Indexed by Op; the order must match the enum.
const OpInfo kOpInfo[] = {
    {"nop", "", false, false},
    {"li", "r,i", false, false},
    {"lif", "r,F", false, false},
    {"mov", "r,r", false, false},
    {"add", "r,r,r", false, false},
    {"sub", "r,r,r", false, false},
    {"mul", "r,r,r", false, false},
    {"and", "r,r,r", false, false},
    {"or", "r,r,r", false, false},
    {"xor", "r,r,r", false, false},
    {"shl", "r,r,r", false, false},
    {"shr", "r,r,r", false, false},
    {"sra", "r,r,r", false, false},
    {"slt", "r,r,r", false, false},
    {"sltu", "r,r,r", false, false},
    {"addi", "r,r,i", false, false},
    {"fadd", "r,r,r", false, false},
    {"fsub", "r,r,r", false, false},
    {"fmul", "r,r,r", false, false},
    {"ld16", "r,m", false, false},
    {"ld32", "r,m", false, false},
    {"st16", "m,r", false, false},
    {"st32", "m,r", false, false},
    {"beq", "r,r,l", false, false},
    {"bne", "r,r,l", false, false},
    {"blt", "r,r,l", false, false},
    {"bge", "r,r,l", false, false},
    {"jmp", "l", false, false},
    {"activate", "t", false, false},
    {"block", "t", false, false},
    {"unblock", "t", false, false},
    {"exit", "", false, false},
    {"halt", "", false, false},
    {"dmem", "d,B,L,S", false, false},
    {"dfin", "d,c,i", false, false},
    {"dfout", "d,c,i", false, false},
    {"dlen", "d,r", false, false},
    {"dbase", "d,r", false, false},
    {"daddb", "d,i", false, false},
    {"dstride", "d,r", false, false},
    {"vmov", "d,d", true, false},
    {"vadd", "d,d,d", true, false},
    {"vsub", "d,d,d", true, false},
    {"vmul", "d,d,d", true, false},
    {"vmax", "d,d,d", true, false},
    {"vfmac", "d,d,d,d", true, true},
    {"vaxpy", "d,d,r", true, true},
    {"vmuls", "d,d,r", true, false},
    {"vfill", "d,r", true, false},
    {"vrelu", "d,d", true, false},
    {"vdrelu", "d,d,d", true, false},
    {"vexp", "d,d", true, false},
    {"vrecip", "d,d", true, false},
    {"vcmpgt", "d,d,d", true, false},
    {"vsel", "d,d,d,d", true, false},
    {"vcvt", "d,d", true, true},
    {"vsum", "r,d", true, false},
    {"vlog", "d,d", true, false},
    {"filt", "c,r,r", false, false},
    {"fcnt", "c,r", false, false},
    {"tsc", "r", false, false},
    {"vfmacs", "d,d,d,r", true, false},
    {"ctl", "c", false, false},
    {"swadv", "c", false, false},
    {"drows", "d,r,r", false, false},
};
static_assert(sizeof(kOpInfo) / sizeof(kOpInfo[0]) == static_cast<size_t>(Op::kCount), "op table out of step");

namespace {

uint64_t field(uint64_t v, int lo, int bits) { return (v & ((uint64_t{1} << bits) - 1)) << lo; }
uint64_t get(uint64_t w, int lo, int bits) { return (w >> lo) & ((uint64_t{1} << bits) - 1); }

void check(bool ok, const char* what, const Instr& in) {
  if (!ok) throw std::invalid_argument(std::string("cannot encode ") + op_info(in.op).mnemonic + ": " + what);
}

bool has_imm(Op op) {
  const char* s = op_info(op).signature;
  return std::strpbrk(s, "iFml") != nullptr;
}

}  // namespace

void unknown_opcode(size_t i) { throw std::invalid_argument("unknown opcode " + std::to_string(i)); }

bool find_op(const std::string& mnemonic, Op* op) {
  for (size_t i = 0; i < static_cast<size_t>(Op::kCount); ++i) {
    if (mnemonic == kOpInfo[i].mnemonic) {
      *op = static_cast<Op>(i);
      return true;
    }
  }
  return false;
}

bool Instr::operator==(const Instr& o) const {
  return op == o.op && fmt == o.fmt && fmt2 == o.fmt2 && std::memcmp(reg, o.reg, sizeof reg) == 0 &&
         imm == o.imm && imm2 == o.imm2 && imm3 == o.imm3 && async == o.async && ut == o.ut && done == o.done &&
         done_task == o.done_task;
}

uint64_t encode(const Instr& in) {
  const OpInfo& info = op_info(in.op);
  uint64_t w = field(static_cast<uint64_t>(in.op), 0, 8);
  for (int k = 0; k < 4; ++k) check(in.reg[k] < 64, "register field out of range", in);
  // Fields the op does not have must hold their defaults: the encoding has no room for them, so
  // decode() could not give them back and disassemble() would not show them.
  int slot = 0;
  for (const char* s = info.signature; *s; ++s) {
    if (*s == 'r' || *s == 'm') check(in.reg[slot] < kNumGprs, "GPR beyond r15", in);
    if (*s == 'c') check(in.reg[slot] < kMaxColors, "color beyond 31", in);
    if (std::strchr("rdctm", *s)) ++slot;
  }
  for (int k = slot; k < 4; ++k) check(in.reg[k] == 0, "register field the op does not use", in);
  check(in.fmt <= NumFormat::kBF16 && in.fmt2 <= NumFormat::kBF16, "bad number format", in);
  check(in.done <= DoneAction::kUnblock, "bad completion action", in);
  check(in.ut < kMaxMicrothreads && in.done_task < kMaxTasks, "microthread or task out of range",
        in);
  if (!info.vector) {
    check(in.fmt == NumFormat::kF32 && in.fmt2 == NumFormat::kF32 && !in.async && in.ut == 0 &&
              in.done == DoneAction::kNone && in.done_task == 0,
          "format, async or completion fields on a non-vector op", in);
  } else {
    check(in.async || in.ut == 0, "microthread without async", in);
    check(in.async || in.done == DoneAction::kNone, "completion action without async", in);
    check(in.done != DoneAction::kNone || in.done_task == 0, "completion task without action", in);
  }
  w |= field(in.reg[0], 8, 6) | field(in.reg[1], 14, 6) | field(in.reg[2], 20, 6) | field(in.reg[3], 26, 6);
  if (in.op == Op::kDmem) {
    check(in.imm >= 0 && in.imm < (1 << 20), "base must be in [0, 2^20)", in);
    check(in.imm2 >= 0 && in.imm2 < (1 << 16), "length must be in [0, 65535]", in);
    check(in.imm3 >= -2048 && in.imm3 < 2048, "stride must be in [-2048, 2047]", in);
    check(in.reg[1] == 0 && in.reg[2] == 0 && in.reg[3] == 0, "dmem has one register", in);
    w = field(static_cast<uint64_t>(in.op), 0, 8) | field(in.reg[0], 8, 6) |
        field(static_cast<uint32_t>(in.imm3), 16, 12) | field(static_cast<uint32_t>(in.imm2), 28, 16) |
        field(static_cast<uint32_t>(in.imm), 44, 20);
    return w;
  }
  if (info.vector) {
    check(in.ut < kMaxMicrothreads && in.done_task < kMaxTasks, "microthread or task out of range", in);
    check(in.imm == 0 && in.imm2 == 0 && in.imm3 == 0, "vector ops take no immediate", in);
    check(info.two_fmts || in.fmt2 == in.fmt, "destination format differs from source", in);
    w |= field(static_cast<uint64_t>(in.fmt), 32, 2) | field(static_cast<uint64_t>(in.fmt2), 34, 2) |
         field(in.async ? 1 : 0, 36, 1) | field(in.ut, 37, 3) | field(static_cast<uint64_t>(in.done), 40, 2) |
         field(in.done_task, 42, 6);
    return w;
  }
  check(in.imm2 == 0 && in.imm3 == 0 && !in.async, "stray fields", in);
  if (has_imm(in.op)) w |= field(static_cast<uint32_t>(in.imm), 32, 32);
  else check(in.imm == 0, "no immediate expected", in);
  return w;
}

Instr decode(uint64_t word) {
  Instr in;
  const auto opn = static_cast<size_t>(get(word, 0, 8));
  if (opn >= static_cast<size_t>(Op::kCount)) throw std::invalid_argument("unknown opcode " + std::to_string(opn));
  in.op = static_cast<Op>(opn);
  const OpInfo& info = op_info(in.op);
  if (in.op == Op::kDmem) {
    in.reg[0] = static_cast<uint8_t>(get(word, 8, 6));
    in.imm3 = static_cast<int32_t>(get(word, 16, 12) << 20) >> 20;
    in.imm2 = static_cast<int32_t>(get(word, 28, 16));
    in.imm = static_cast<int32_t>(get(word, 44, 20));
  } else {
    in.reg[0] = static_cast<uint8_t>(get(word, 8, 6));
    in.reg[1] = static_cast<uint8_t>(get(word, 14, 6));
    in.reg[2] = static_cast<uint8_t>(get(word, 20, 6));
    in.reg[3] = static_cast<uint8_t>(get(word, 26, 6));
    if (info.vector) {
      in.fmt = static_cast<NumFormat>(get(word, 32, 2));
      in.fmt2 = static_cast<NumFormat>(get(word, 34, 2));
      in.async = get(word, 36, 1) != 0;
      in.ut = static_cast<uint8_t>(get(word, 37, 3));
      in.done = static_cast<DoneAction>(get(word, 40, 2));
      in.done_task = static_cast<uint8_t>(get(word, 42, 6));
    } else if (has_imm(in.op)) {
      in.imm = static_cast<int32_t>(get(word, 32, 32));
    }
  }
  // A word encode() would not produce (bits in unused fields, a GPR past r15, a completion action
  // without async) is rejected, so a decoded instruction is always one the core can execute and
  // the disassembler can print exactly.
  const auto bad = [word](const std::string& why) {
    std::ostringstream os;
    os << "invalid instruction word 0x" << std::hex << word << ": " << why;
    return std::invalid_argument(os.str());
  };
  uint64_t canonical;
  try {
    canonical = encode(in);
  } catch (const std::invalid_argument& e) {
    throw bad(e.what());
  }
  if (canonical != word) throw bad("bits set in unused fields");
  return in;
}

std::string disassemble(const Instr& in) {
  const OpInfo& info = op_info(in.op);
  std::ostringstream os;
  os << info.mnemonic;
  if (info.vector) {
    os << '.' << format_name(in.fmt);
    if (info.two_fmts) os << '.' << format_name(in.fmt2);
  }
  int r = 0;
  bool first = true;
  for (const char* s = info.signature; *s; ++s) {
    if (*s == ',') continue;
    os << (first ? " " : ", ");
    first = false;
    switch (*s) {
      case 'r': os << 'r' << int(in.reg[r++]); break;
      case 'd': os << 'd' << int(in.reg[r++]); break;
      case 'c': case 't': os << int(in.reg[r++]); break;
      case 'i': case 'B': os << in.imm; break;
      case 'L': os << in.imm2; break;
      case 'S': os << in.imm3; break;
      case 'l': os << '@' << in.imm; break;
      case 'F':  // exact: the assembler takes a hex literal as the bit pattern
        os << "0x" << std::hex << static_cast<uint32_t>(in.imm) << std::dec;
        break;
      case 'm': {
        os << "[r" << int(in.reg[r++]);
        if (in.imm) os << (in.imm < 0 ? "-" : "+") << (in.imm < 0 ? -static_cast<int64_t>(in.imm) : in.imm);
        os << ']';
        break;
      }
      default: break;
    }
  }
  if (info.vector && in.async) {
    os << ", async=" << int(in.ut);
    if (in.done == DoneAction::kActivate) os << ", done=activate:" << int(in.done_task);
    if (in.done == DoneAction::kUnblock) os << ", done=unblock:" << int(in.done_task);
  }
  return os.str();
}

}  // namespace wafersim
