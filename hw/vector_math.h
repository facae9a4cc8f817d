// The arithmetic of one element of a vector op, in fp32 (docs/core.md, "Numerics"): the core
// computes every element with it, and the compiler's host references of elementwise programs
// (compiler/activation.h) evaluate theirs with it too, so the two agree bit for bit by
// construction. v holds the op's sources in operand order (dA, dB, dC), s its scalar register.
// vmov and vsum are not arithmetic on one element (a bit copy, a running sum) and are not here.
#pragma once

#include <cmath>

#include "firmware/isa.h"

namespace wafersim {

inline float vector_element(Op op, const float* v, float s) {
  switch (op) {
    case Op::kVadd: return v[0] + v[1];
    case Op::kVsub: return v[0] - v[1];
    case Op::kVmul: return v[0] * v[1];
    case Op::kVmax: return std::fmax(v[0], v[1]);
    case Op::kVfmac: return std::fma(v[0], v[1], v[2]);
    case Op::kVaxpy: return std::fma(s, v[0], v[1]);
    case Op::kVfmacs: return std::fma(v[1], s, v[0]);
    case Op::kVmuls: return v[0] * s;
    case Op::kVfill: return s;
    case Op::kVrelu: return (v[0] > 0 || std::isnan(v[0])) ? v[0] : 0.0f;
    case Op::kVdrelu: return v[0] > 0 ? v[1] : 0.0f;
    case Op::kVexp: return std::exp(v[0]);
    case Op::kVrecip: return 1.0f / v[0];
    case Op::kVlog: return std::log(v[0]);
    case Op::kVcmpgt: return v[0] > v[1] ? 1.0f : 0.0f;
    case Op::kVsel: return v[0] != 0 ? v[1] : v[2];
    case Op::kVcvt: return v[0];
    default: return 0;
  }
}

}  // namespace wafersim
