// Softmax and LogSoftmax over the last axis (a graph's output softmax, which the loss absorbs:
// no gradient rule of their own yet), and SoftmaxXent, the loss: per row, reference.cc's
// softmax_xent (the max by a pairwise tree, the gradient divided by the batch).
#include <cmath>
#include <stdexcept>

#include "compiler/ops/op_class.h"
#include "compiler/reference.h"

namespace wafersim::compiler::ops {
namespace {

class Softmax : public OpClass {
 public:
  const char* name() const override { return "softmax"; }
  std::vector<std::string> kinds() const override { return {"Softmax", "LogSoftmax", "SoftmaxXent"}; }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    const int y = o.outputs[0];
    auto& out = c.val[static_cast<size_t>(y)];
    const auto& x = c.val[static_cast<size_t>(o.inputs[0])];
    if (o.kind == "SoftmaxXent") {
      const auto& lab = c.val[static_cast<size_t>(o.inputs[1])];
      const int64_t C = c.shape[static_cast<size_t>(o.inputs[0])].back();
      auto& dl = c.val[static_cast<size_t>(o.outputs[1])];
      for (int r = 0; r < c.batch; ++r) {
        const std::vector<float> row(x.begin() + r * C, x.begin() + (r + 1) * C);
        std::vector<float> g;
        const int label = static_cast<int>(lab[static_cast<size_t>(r)]);
        if (label < 0 || label >= C) throw std::invalid_argument("graph reference: label " + std::to_string(label) + " outside the classes");
        out[static_cast<size_t>(r)] = softmax_xent(row, label, c.batch, &g);
        std::copy(g.begin(), g.end(), dl.begin() + r * C);
      }
      return;
    }
    const int64_t C = c.shape[static_cast<size_t>(y)].back(), rows = numel(c.shape[static_cast<size_t>(y)]) / C;
    for (int64_t r = 0; r < rows; ++r) {
      float mx = x[static_cast<size_t>(r * C)];
      for (int64_t k = 1; k < C; ++k) mx = std::fmax(mx, x[static_cast<size_t>(r * C + k)]);
      float s = 0;
      for (int64_t k = 0; k < C; ++k) s += std::exp(x[static_cast<size_t>(r * C + k)] - mx);
      for (int64_t k = 0; k < C; ++k) {
        const float z = x[static_cast<size_t>(r * C + k)] - mx;
        out[static_cast<size_t>(r * C + k)] = o.kind == "Softmax" ? std::exp(z) / s : z - std::log(s);
      }
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_softmax() { return std::make_unique<Softmax>(); }

}  // namespace wafersim::compiler::ops
