// The identity and ReLU (activation.h): an activation is two programs of vector ops, forward
// (Z -> Y) and backward (G -> G).
#include "compiler/activation.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

// No activation (the last layer's, before the loss): Y = Z, the gradient unchanged.
extern const ActivationDef kNone{Activation::kNone, "none", "", "", false, 1,
                                 [](const ActParams&) { return ActProgram().mov(S::kY, S::kZ); },
                                 [](const ActParams&) { return ActProgram(); }, nullptr};

// max(z, 0) (a NaN passes, as torch's); backward g where y > 0.
extern const ActivationDef kRelu{Activation::kRelu, "relu", "Relu", "Relu", false, 1,
                                 [](const ActParams&) { return ActProgram().relu(S::kY, S::kZ); },
                                 [](const ActParams&) { return ActProgram().drelu(S::kG, S::kY, S::kG); }, nullptr};

}  // namespace wafersim::compiler::act_defs
