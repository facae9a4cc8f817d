// The gated activations y = z f(z), which torch exports as patterns (the rewrite pass
// fuse_activations finds them) or, for HardSwish at opset 17, as one op: SiLU z sigma(z), HardSwish
// z hardsigmoid(z), Mish z tanh(softplus(z)). Their derivatives are taken at the pre-activation
// (`pre`): f(z) recomputed into T0, then f(z) + z f'(z).
#include <cmath>

#include "compiler/activation.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

namespace {

// sigma(z) into d (scratch: d).
void sigmoid_of_z(ActProgram& p, Slot d) { p.muls(d, S::kZ, -1.0f).exp(d, d).add(d, d, S::kOnes).recip(d, d); }

// hardsigmoid(z) = max(0, min(1, alpha z + beta)) into T0 (scratch T1).
void hard_sigmoid_of_z(ActProgram& p, const ActParams& q) {
  p.muls(S::kT0, S::kZ, q.a).fmacs(S::kT0, S::kT0, S::kOnes, q.b);
  p.sub(S::kT1, S::kOnes, S::kT0).relu(S::kT1, S::kT1).sub(S::kT0, S::kOnes, S::kT1).relu(S::kT0, S::kT0);
}

// tanh(softplus(z)) into T0 (scratch T1): softplus as relu(z) + log(1 + e^-|z|), tanh as
// 2 / (1 + e^-2x) - 1.
void tanh_softplus_of_z(ActProgram& p) {
  p.relu(S::kT0, S::kZ).sub(S::kT1, S::kZ, S::kT0).sub(S::kT1, S::kT1, S::kT0).exp(S::kT1, S::kT1).add(S::kT1, S::kT1, S::kOnes);
  p.log(S::kT1, S::kT1).add(S::kT0, S::kT0, S::kT1);
  p.muls(S::kT0, S::kT0, -2.0f).exp(S::kT0, S::kT0).add(S::kT0, S::kT0, S::kOnes).recip(S::kT0, S::kT0).muls(S::kT0, S::kT0, 2.0f);
  p.sub(S::kT0, S::kT0, S::kOnes);
}

}  // namespace

// SiLU (Swish): z sigma(z); derivative sigma(z) (1 + z (1 - sigma(z))).
extern const ActivationDef kSilu{
    Activation::kSilu, "silu", "", "Silu", true, 6,
    [](const ActParams&) {
      ActProgram p;
      sigmoid_of_z(p, S::kT0);
      return p.mul(S::kY, S::kZ, S::kT0);
    },
    [](const ActParams&) {
      ActProgram p;
      sigmoid_of_z(p, S::kT0);
      p.sub(S::kT1, S::kOnes, S::kT0).mul(S::kT1, S::kT1, S::kZ).add(S::kT1, S::kT1, S::kOnes).mul(S::kT1, S::kT1, S::kT0);
      return p.mul(S::kG, S::kG, S::kT1);
    },
    nullptr};

// HardSwish: z hardsigmoid(z) (ONNX's alpha 1/6, beta 0.5, or the HardSigmoid's of the pattern);
// derivative hardsigmoid(z) + z alpha where 0 < alpha z + beta < 1.
extern const ActivationDef kHardSwish{
    Activation::kHardSwish, "hard_swish", "HardSwish", "HardSwish", true, 8,
    [](const ActParams& q) {
      ActProgram p;
      hard_sigmoid_of_z(p, q);
      return p.mul(S::kY, S::kZ, S::kT0);
    },
    [](const ActParams& q) {
      ActProgram p;
      hard_sigmoid_of_z(p, q);
      p.drelu(S::kT1, S::kT0, S::kOnes).sub(S::kT2, S::kOnes, S::kT0).drelu(S::kT1, S::kT2, S::kT1);
      p.mul(S::kT1, S::kT1, S::kZ).muls(S::kT1, S::kT1, q.a).add(S::kT1, S::kT1, S::kT0);
      return p.mul(S::kG, S::kG, S::kT1);
    },
    [](const ActInputs& in, std::string* why) {
      // The op (no attributes: 1/6 and 0.5), or the pattern's HardSigmoid (alpha, beta).
      const OnnxAttr* a = in.attr("alpha");
      const OnnxAttr* b = in.attr("beta");
      ActParams p;
      p.a = a && a->kind == OnnxAttr::kFloat ? a->f : 1.0f / 6;
      p.b = b && b->kind == OnnxAttr::kFloat ? b->f : 0.5f;
      if (!std::isfinite(p.a) || !std::isfinite(p.b)) *why = "alpha and beta must be finite";
      return p;
    }};

// Mish: z tanh(softplus(z)); derivative t + z (1 - t^2) sigma(z), t = tanh(softplus(z)).
extern const ActivationDef kMish{
    Activation::kMish, "mish", "", "Mish", true, 14,
    [](const ActParams&) {
      ActProgram p;
      tanh_softplus_of_z(p);
      return p.mul(S::kY, S::kZ, S::kT0);
    },
    [](const ActParams&) {
      ActProgram p;
      tanh_softplus_of_z(p);
      sigmoid_of_z(p, S::kT1);
      p.mul(S::kT2, S::kT0, S::kT0).sub(S::kT2, S::kOnes, S::kT2).mul(S::kT2, S::kT2, S::kT1).mul(S::kT2, S::kT2, S::kZ);
      return p.add(S::kT2, S::kT2, S::kT0).mul(S::kG, S::kG, S::kT2);
    },
    nullptr};

}  // namespace wafersim::compiler::act_defs
