// The update: SgdMomentum(W, V) -> W' = fma(-lr, V, W), V' = V momentum (V already holds
// momentum x the last step's plus this step's gradients: autodiff.h).
#include <cmath>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

class Sgd : public OpClass {
 public:
  const char* name() const override { return "sgd"; }
  std::vector<std::string> kinds() const override { return {"SgdMomentum"}; }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    const auto &w = c.val[static_cast<size_t>(o.inputs[0])], &v = c.val[static_cast<size_t>(o.inputs[1])];
    auto& out = c.val[static_cast<size_t>(o.outputs[0])];
    auto& nv = c.val[static_cast<size_t>(o.outputs[1])];
    for (size_t e = 0; e < w.size(); ++e) {
      out[e] = std::fma(-c.hyper.lr, v[e], w[e]);
      nv[e] = v[e] * c.hyper.momentum;
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_sgd() { return std::make_unique<Sgd>(); }

}  // namespace wafersim::compiler::ops
