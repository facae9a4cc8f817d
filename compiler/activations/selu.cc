// Selu: gamma elu(z) with ONNX's defaults alpha 1.67326 and gamma 1.0507 (torch's nn.SELU);
// backward at the output: t = (y > 0 ? g : 0), u = g - t, then u y + (gamma t + gamma alpha u),
// that is gamma g for z > 0 and g (y + gamma alpha) below.
#include <cmath>

#include "compiler/activation.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

extern const ActivationDef kSelu{
    Activation::kSelu, "selu", "Selu", "Selu", false, 6,
    [](const ActParams& p) {
      return ActProgram()
          .relu(S::kY, S::kZ)
          .sub(S::kT0, S::kZ, S::kY)
          .exp(S::kT0, S::kT0)
          .sub(S::kT0, S::kT0, S::kOnes)
          .muls(S::kT0, S::kT0, p.a)
          .add(S::kY, S::kY, S::kT0)
          .muls(S::kY, S::kY, p.b);
    },
    [](const ActParams& p) {
      return ActProgram()
          .drelu(S::kT0, S::kY, S::kG)
          .sub(S::kG, S::kG, S::kT0)
          .muls(S::kT0, S::kT0, p.b)
          .fmacs(S::kT0, S::kT0, S::kG, p.b * p.a)
          .fmac(S::kG, S::kG, S::kY, S::kT0);
    },
    [](const ActInputs& in, std::string* why) {
      const OnnxAttr* a = in.attr("alpha");
      const OnnxAttr* g = in.attr("gamma");
      ActParams p;
      p.a = a && a->kind == OnnxAttr::kFloat ? a->f : 1.67326319217681884765625f;
      p.b = g && g->kind == OnnxAttr::kFloat ? g->f : 1.05070102214813232421875f;
      // y > 0 must mean z > 0 for the derivative taken at the output.
      if (!(p.a > 0) || !(p.b > 0) || !std::isfinite(p.a * p.b)) *why = "alpha and gamma must be positive";
      return p;
    }};

}  // namespace wafersim::compiler::act_defs
