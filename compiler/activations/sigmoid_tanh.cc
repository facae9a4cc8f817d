// Sigmoid and Tanh through e^x and 1 / x: sigma(z) = 1 / (1 + e^-z), tanh(z) = 2 / (1 + e^-2z) - 1;
// backward g (1 - y) y and g (1 - y^2).
#include "compiler/activation.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

extern const ActivationDef kSigmoid{
    Activation::kSigmoid, "sigmoid", "Sigmoid", "Sigmoid", false, 5,
    [](const ActParams&) { return ActProgram().muls(S::kT0, S::kZ, -1.0f).exp(S::kT0, S::kT0).add(S::kT0, S::kT0, S::kOnes).recip(S::kY, S::kT0); },
    [](const ActParams&) { return ActProgram().sub(S::kT0, S::kOnes, S::kY).mul(S::kT0, S::kT0, S::kY).mul(S::kG, S::kG, S::kT0); }, nullptr};

extern const ActivationDef kTanh{
    Activation::kTanh, "tanh", "Tanh", "Tanh", false, 7,
    [](const ActParams&) {
      return ActProgram()
          .muls(S::kT0, S::kZ, -2.0f)
          .exp(S::kT0, S::kT0)
          .add(S::kT0, S::kT0, S::kOnes)
          .recip(S::kT0, S::kT0)
          .muls(S::kT0, S::kT0, 2.0f)
          .sub(S::kY, S::kT0, S::kOnes);
    },
    [](const ActParams&) { return ActProgram().mul(S::kT0, S::kY, S::kY).sub(S::kT0, S::kOnes, S::kT0).mul(S::kG, S::kG, S::kT0); }, nullptr};

}  // namespace wafersim::compiler::act_defs
