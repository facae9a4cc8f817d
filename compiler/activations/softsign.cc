// Softsign, z / (1 + |z|); backward at the output: (1 - |y|)^2.
#include "compiler/activation.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

extern const ActivationDef kSoftsign{
    Activation::kSoftsign, "softsign", "Softsign", "Softsign", false, 5,
    [](const ActParams&) {
      return ActProgram().muls(S::kT0, S::kZ, -1.0f).max(S::kT0, S::kZ, S::kT0).add(S::kT0, S::kT0, S::kOnes).recip(S::kT0, S::kT0).mul(S::kY, S::kZ, S::kT0);
    },
    [](const ActParams&) {
      return ActProgram().muls(S::kT0, S::kY, -1.0f).max(S::kT0, S::kY, S::kT0).sub(S::kT0, S::kOnes, S::kT0).mul(S::kT0, S::kT0, S::kT0).mul(S::kG, S::kG, S::kT0);
    },
    nullptr};

}  // namespace wafersim::compiler::act_defs
