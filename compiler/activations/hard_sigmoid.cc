// HardSigmoid, max(0, min(1, alpha z + beta)) (torch's nn.Hardsigmoid exports alpha 1/6, beta
// 0.5): min(a, 1) = 1 - relu(1 - a); backward at the output: g alpha where 0 < y < 1.
#include <cmath>

#include "compiler/activation.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

extern const ActivationDef kHardSigmoid{
    Activation::kHardSigmoid, "hard_sigmoid", "HardSigmoid", "HardSigmoid", false, 4,
    [](const ActParams& p) {
      return ActProgram()
          .muls(S::kT0, S::kZ, p.a)
          .fmacs(S::kT0, S::kT0, S::kOnes, p.b)
          .sub(S::kY, S::kOnes, S::kT0)
          .relu(S::kY, S::kY)
          .sub(S::kY, S::kOnes, S::kY)
          .relu(S::kY, S::kY);
    },
    [](const ActParams& p) { return ActProgram().drelu(S::kG, S::kY, S::kG).sub(S::kT0, S::kOnes, S::kY).drelu(S::kG, S::kT0, S::kG).muls(S::kG, S::kG, p.a); },
    [](const ActInputs& in, std::string* why) {
      const OnnxAttr* a = in.attr("alpha");
      const OnnxAttr* b = in.attr("beta");
      ActParams p;
      p.a = a && a->kind == OnnxAttr::kFloat ? a->f : 0.2f;
      p.b = b && b->kind == OnnxAttr::kFloat ? b->f : 0.5f;
      if (!std::isfinite(p.a) || !std::isfinite(p.b)) *why = "alpha and beta must be finite";
      return p;
    }};

}  // namespace wafersim::compiler::act_defs
