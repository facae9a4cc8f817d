// GELU in both forms torch exports (the rewrite pass fuse_gelu finds them; compiler/reference.h
// has the constants and the formulas). Forward and backward take the pre-activation Z (`pre`):
//   Erf form: gelu(z) = 0.5 (z + |z| erf(|z| / sqrt 2)), erf(x) = 1 - P(t) e^(-x^2),
//   t = 1 / (1 + p x) (Abramowitz and Stegun 7.1.26); derivative Phi(z) + z phi(z).
//   Tanh form: gelu(z) = z sigma(v), v = 2 c (z + k z^3); derivative sigma(v) + z sigma(v)
//   (1 - sigma(v)) 2 c (1 + 3 k z^2).
#include "compiler/activation.h"
#include "compiler/reference.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

namespace {

// |z| into T0, erf(|z| / sqrt 2) into T1, e^(-z^2 / 2) into T2; T3 scratch.
void parts(ActProgram& p) {
  p.muls(S::kT0, S::kZ, -1.0f).max(S::kT0, S::kZ, S::kT0);
  p.muls(S::kT3, S::kT0, gelu::kP).add(S::kT3, S::kT3, S::kOnes).recip(S::kT3, S::kT3);
  p.muls(S::kT1, S::kT3, gelu::kA5);
  for (const float c : {gelu::kA4, gelu::kA3, gelu::kA2, gelu::kA1}) p.fmacs(S::kT1, S::kT1, S::kOnes, c).mul(S::kT1, S::kT1, S::kT3);
  p.mul(S::kT2, S::kZ, S::kZ).muls(S::kT2, S::kT2, -0.5f).exp(S::kT2, S::kT2);
  p.mul(S::kT1, S::kT1, S::kT2).fmacs(S::kT1, S::kOnes, S::kT1, -1.0f);
}

// sigma(2 c (z + k z^3)) into T0.
void sigma(ActProgram& p) {
  p.mul(S::kT0, S::kZ, S::kZ).muls(S::kT0, S::kT0, gelu::kK).fmacs(S::kT0, S::kT0, S::kOnes, 1.0f).mul(S::kT0, S::kT0, S::kZ);
  p.muls(S::kT0, S::kT0, -gelu::kTwoC).exp(S::kT0, S::kT0).add(S::kT0, S::kT0, S::kOnes).recip(S::kT0, S::kT0);
}

}  // namespace

extern const ActivationDef kGelu{
    Activation::kGelu, "gelu", "", "", true, 28,
    [](const ActParams&) {
      ActProgram p;
      parts(p);
      return p.mul(S::kY, S::kT0, S::kT1).add(S::kY, S::kZ, S::kY).muls(S::kY, S::kY, 0.5f);
    },
    [](const ActParams&) {
      ActProgram p;
      parts(p);
      // sign(z) erf: (z > 0 ? erf : 0) 2 - erf; Phi = 0.5 that + 0.5; z phi = z e / sqrt(2 pi).
      p.drelu(S::kT3, S::kZ, S::kT1).muls(S::kT3, S::kT3, 2.0f).sub(S::kT3, S::kT3, S::kT1).muls(S::kT3, S::kT3, 0.5f);
      p.fmacs(S::kT3, S::kT3, S::kOnes, 0.5f);
      p.mul(S::kT2, S::kZ, S::kT2).muls(S::kT2, S::kT2, gelu::kInvSqrt2Pi).add(S::kT3, S::kT3, S::kT2).mul(S::kG, S::kG, S::kT3);
      return p;
    },
    nullptr};

extern const ActivationDef kGeluTanh{
    Activation::kGeluTanh, "gelu_tanh", "", "", true, 12,
    [](const ActParams&) {
      ActProgram p;
      sigma(p);
      return p.mul(S::kY, S::kZ, S::kT0);
    },
    [](const ActParams&) {
      ActProgram p;
      sigma(p);
      p.mul(S::kT1, S::kZ, S::kZ).muls(S::kT1, S::kT1, gelu::kThreeK).fmacs(S::kT1, S::kT1, S::kOnes, 1.0f).muls(S::kT1, S::kT1, gelu::kTwoC);
      p.sub(S::kT2, S::kOnes, S::kT0).mul(S::kT2, S::kT0, S::kT2).mul(S::kT2, S::kT2, S::kT1).mul(S::kT2, S::kT2, S::kZ);
      return p.add(S::kT2, S::kT0, S::kT2).mul(S::kG, S::kG, S::kT2);
    },
    nullptr};

}  // namespace wafersim::compiler::act_defs
