// Elu (alpha > 0): relu(z) + alpha (e^min(z, 0) - 1), min(z, 0) = z - relu(z); backward at the
// output: t = (y > 0 ? g : 0), u = g - t, then u y + (t + u alpha), that is g for z > 0 and
// g alpha e^z = g (y + alpha) below.
#include "compiler/activation.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

extern const ActivationDef kElu{
    Activation::kElu, "elu", "Elu", "Elu", false, 5,
    [](const ActParams& p) {
      return ActProgram()
          .relu(S::kY, S::kZ)
          .sub(S::kT0, S::kZ, S::kY)
          .exp(S::kT0, S::kT0)
          .sub(S::kT0, S::kT0, S::kOnes)
          .muls(S::kT0, S::kT0, p.a)
          .add(S::kY, S::kY, S::kT0);
    },
    [](const ActParams& p) {
      return ActProgram().drelu(S::kT0, S::kY, S::kG).sub(S::kG, S::kG, S::kT0).fmacs(S::kT0, S::kT0, S::kG, p.a).fmac(S::kG, S::kG, S::kY, S::kT0);
    },
    [](const ActInputs& in, std::string* why) {
      const OnnxAttr* a = in.attr("alpha");
      ActParams p;
      p.a = a && a->kind == OnnxAttr::kFloat ? a->f : 1.0f;
      // y > 0 must mean z > 0 for the derivative taken at the output.
      if (!(p.a > 0) || !(p.a < 1e30f)) *why = "alpha = " + std::to_string(p.a) + "; the kernels take a positive alpha";
      return p;
    }};

}  // namespace wafersim::compiler::act_defs
