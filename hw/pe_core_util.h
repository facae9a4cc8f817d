// Helpers shared by the core's scalar side (pe_core.cc) and its vector ops (pe_vector.cc).
#pragma once

#include <cstdint>
#include <cstring>

#include "firmware/isa.h"
#include "hw/number_format.h"

namespace wafersim {
namespace core_detail {

enum : uint8_t { kNoDsd = 0, kMemDsd = 1, kFinDsd = 2, kFoutDsd = 3 };

inline int elem_bytes(NumFormat f) { return f == NumFormat::kF32 ? 4 : 2; }
inline bool is16(NumFormat f) { return f != NumFormat::kF32; }


// Source operands of each vector op, as indices into Instr::reg (destination is reg[0]).
struct VecShape {
  int nsrc;       // descriptor sources
  bool dst_src;   // the destination is also read (vaxpy)
  bool scalar;    // reg[2] (vaxpy, vmuls), reg[3] (vfmacs) or reg[1] (vfill) is a GPR holding an fp32
  bool alu;       // needs the arithmetic datapath (moves and fills do not)
};

// Sources in the destination format: vfmac's accumulator, vaxpy's destination (read back).
inline NumFormat src_format(const Instr& in, int k) {
  return (in.op == Op::kVfmac && k == 2) || (in.op == Op::kVaxpy && k == 1) ? in.fmt2 : in.fmt;
}

inline VecShape shape(Op op) {
  switch (op) {
    case Op::kVmov: return {1, false, false, false};
    case Op::kVadd: case Op::kVsub: case Op::kVmul: case Op::kVmax: case Op::kVdrelu: case Op::kVcmpgt:
      return {2, false, false, true};
    case Op::kVfmac: case Op::kVsel: return {3, false, false, true};
    case Op::kVfmacs: return {2, false, true, true};
    case Op::kVaxpy: return {1, true, true, true};
    case Op::kVmuls: return {1, false, true, true};
    case Op::kVfill: return {0, false, true, false};
    case Op::kVrelu: case Op::kVexp: case Op::kVrecip: case Op::kVlog: case Op::kVcvt: return {1, false, false, true};
    case Op::kVsum: return {1, false, false, true};
    default: return {0, false, false, false};
  }
}

}  // namespace core_detail
}  // namespace wafersim
