// The updates autodiff ends a training graph with, one per parameter:
//   SgdMomentum(W, V) -> W' = fma(-lr, V, W), V' = V momentum (V already holds momentum x the
//     last step's plus this step's gradients: autodiff.h);
//   AdamUpdate(W, G, M, S) -> W', M', S': torch.optim.Adam on the step's gradient G, as MemoryX
//     computes it (compiler/optim.h), t the step count after this step;
//   Zeros -> a tensor of zeros (where Adam's gradient of a step starts).
#include <cmath>

#include "compiler/ops/op_class.h"
#include "compiler/optim.h"

namespace wafersim::compiler::ops {
namespace {

class Optimizer : public OpClass {
 public:
  const char* name() const override { return "optimizer"; }
  std::vector<std::string> kinds() const override { return {"SgdMomentum", "AdamUpdate", "Zeros"}; }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    auto V = [&](int t) -> std::vector<float>& { return c.val[static_cast<size_t>(t)]; };
    if (o.kind == "Zeros") return;  // the outputs come zeroed
    const auto& w = V(o.inputs[0]);
    auto& out = V(o.outputs[0]);
    if (o.kind == "SgdMomentum") {
      const auto& v = V(o.inputs[1]);
      auto& nv = V(o.outputs[1]);
      for (size_t e = 0; e < w.size(); ++e) {
        out[e] = std::fma(-c.hyper.lr, v[e], w[e]);
        nv[e] = v[e] * c.hyper.momentum;
      }
      return;
    }
    out = w;
    V(o.outputs[1]) = V(o.inputs[2]);
    V(o.outputs[2]) = V(o.inputs[3]);
    const AdamScalars a = adam_scalars(c.hyper.lr, c.hyper.beta1, c.hyper.beta2, c.hyper.eps, c.step + 1);
    adam_step(a, out.data(), V(o.outputs[1]).data(), V(o.outputs[2]).data(), V(o.inputs[1]).data(), out.size());
  }
};

}  // namespace

std::unique_ptr<OpClass> make_optimizer() { return std::make_unique<Optimizer>(); }

}  // namespace wafersim::compiler::ops
