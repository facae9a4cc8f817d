// Softplus, log(1 + e^z), as relu(z) + log(1 + e^-|z|) (no overflow; -|z| = min(z, 0) - relu(z));
// backward at the output: sigma(z) = 1 - e^-y.
#include "compiler/activation.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

extern const ActivationDef kSoftplus{
    Activation::kSoftplus, "softplus", "Softplus", "Softplus", false, 6,
    [](const ActParams&) {
      return ActProgram()
          .relu(S::kY, S::kZ)
          .sub(S::kT0, S::kZ, S::kY)
          .sub(S::kT0, S::kT0, S::kY)
          .exp(S::kT0, S::kT0)
          .add(S::kT0, S::kT0, S::kOnes)
          .log(S::kT0, S::kT0)
          .add(S::kY, S::kY, S::kT0);
    },
    [](const ActParams&) { return ActProgram().muls(S::kT0, S::kY, -1.0f).exp(S::kT0, S::kT0).sub(S::kT0, S::kOnes, S::kT0).mul(S::kG, S::kG, S::kT0); },
    nullptr};

}  // namespace wafersim::compiler::act_defs
