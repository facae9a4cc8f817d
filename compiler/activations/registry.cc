// Every activation of the dense kernels, one line each (compiler/activation.h; docs/compiler.md,
// "How to add an activation").
#include "compiler/activation.h"

namespace wafersim::compiler {

namespace act_defs {
extern const ActivationDef kNone, kRelu, kLeakyRelu, kSigmoid, kTanh, kGelu, kGeluTanh, kElu, kSelu, kSoftplus, kSoftsign, kHardSigmoid, kClip, kSilu, kHardSwish, kMish, kChain;
}  // namespace act_defs

const std::vector<const ActivationDef*>& activations() {
  using namespace act_defs;
  static const std::vector<const ActivationDef*> all = {
      &kNone, &kRelu, &kLeakyRelu, &kSigmoid, &kTanh, &kGelu, &kGeluTanh, &kElu, &kSelu, &kSoftplus, &kSoftsign, &kHardSigmoid, &kClip, &kSilu, &kHardSwish, &kMish, &kChain,
  };
  return all;
}

}  // namespace wafersim::compiler
