// LeakyRelu with a slope alpha in [0, 1]: max(z, alpha z); backward t = (y > 0 ? g : 0), then
// (g - t) alpha + t.
#include <cmath>

#include "compiler/activation.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

extern const ActivationDef kLeakyRelu{
    Activation::kLeakyRelu, "leaky_relu", "LeakyRelu", "LeakyRelu", false, 2,
    [](const ActParams& p) { return ActProgram().muls(S::kT0, S::kZ, p.a).max(S::kY, S::kZ, S::kT0); },
    [](const ActParams& p) { return ActProgram().drelu(S::kT0, S::kY, S::kG).sub(S::kG, S::kG, S::kT0).muls(S::kG, S::kG, p.a).add(S::kG, S::kG, S::kT0); },
    [](const ActInputs& in, std::string* why) {
      const OnnxAttr* a = in.attr("alpha");
      ActParams p;
      p.a = a && a->kind == OnnxAttr::kFloat ? a->f : 0.01f;
      // max(z, alpha z) is LeakyRelu for a slope in [0, 1] only.
      if (!(p.a >= 0 && p.a <= 1)) *why = "alpha = " + std::to_string(p.a) + "; the kernels take a slope in [0, 1]";
      return p;
    }};

}  // namespace wafersim::compiler::act_defs
