// Mean squared error, the regression loss: MseLoss(y, target) -> loss [N] (per sample, the mean
// over its C outputs of (y - t)^2: the minibatch's mean is torch's MSELoss(reduction='mean')),
// dy = (y - t) (2 / (N C)). Per row: d = y - t, s = fused multiply-adds of d d in order, loss =
// s / C; the gradient d times the scale, rounded once to fp32.
#include <cmath>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

class Mse : public OpClass {
 public:
  const char* name() const override { return "mse"; }
  std::vector<std::string> kinds() const override { return {"MseLoss"}; }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    const auto &y = c.val[static_cast<size_t>(o.inputs[0])], &t = c.val[static_cast<size_t>(o.inputs[1])];
    auto& loss = c.val[static_cast<size_t>(o.outputs[0])];
    auto& dy = c.val[static_cast<size_t>(o.outputs[1])];
    const int64_t C = c.shape[static_cast<size_t>(o.inputs[0])].back();
    const auto scale = static_cast<float>(2.0 / (static_cast<double>(c.batch) * static_cast<double>(C)));
    for (int r = 0; r < c.batch; ++r) {
      float s = 0;
      for (int64_t k = 0; k < C; ++k) {
        const auto e = static_cast<size_t>(r * C + k);
        const float d = y[e] - t[e];
        s = std::fma(d, d, s);
        dy[e] = d * scale;
      }
      loss[static_cast<size_t>(r)] = s / static_cast<float>(C);
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_mse() { return std::make_unique<Mse>(); }

}  // namespace wafersim::compiler::ops
