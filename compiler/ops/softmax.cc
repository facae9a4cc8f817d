// Softmax and LogSoftmax along an axis (from opset 13 one axis, default the last; before it
// the axis and every one after it flattened, default 1), with their gradient SoftmaxGrad(y, dy):
// per slice along the axis, s = the sum of dy y in order and dx = y (dy - s) (Softmax), or
// s = the sum of dy and dx = dy - exp(y) s (LogSoftmax). Forward per slice: the max by fmax in
// order, the sum of exp(x - max) in order, then exp(x - max) / sum or (x - max) - log(sum). A
// graph's output softmax is absorbed by the loss (autodiff.cc). And SoftmaxXent, the loss: per
// row, reference.cc's softmax_xent (the max by a pairwise tree, the gradient divided by the batch).
#include <cmath>
#include <stdexcept>

#include "compiler/ops/op_class.h"
#include "compiler/reference.h"

namespace wafersim::compiler::ops {
namespace {

// The slices an op works along: outer x n x inner elements, the axis n long (before opset 13,
// or for SoftmaxGrad's attribute coerced = 1, the axis and the ones after it as one, inner 1).
struct Span {
  int64_t outer = 1, n = 1, inner = 1;
};
Span span(const ir::Op& o, const std::vector<int64_t>& d, int64_t opset) {
  const OnnxAttr* ax = o.attr("axis");
  const OnnxAttr* co = o.attr("coerced");
  const bool coerced = co ? co->i != 0 : opset < 13;
  const size_t a = axis_of(ax ? ax->i : coerced ? 1 : -1, d.size(), o);
  Span s;
  for (size_t k = 0; k < d.size(); ++k) (k < a ? s.outer : k == a || coerced ? s.n : s.inner) *= d[k];
  return s;
}

class Softmax : public OpClass {
 public:
  const char* name() const override { return "softmax"; }
  std::vector<std::string> kinds() const override { return {"Softmax", "LogSoftmax", "SoftmaxXent", "SoftmaxGrad"}; }

  void gradient(const ir::Op& o, GradContext& c) const override {
    if (o.kind != "Softmax" && o.kind != "LogSoftmax") return c.no_rule(o.kind);
    const int x = o.inputs[0];
    if (!c.wants(x)) return;
    const auto& d = c.shape(x);
    const OnnxAttr* ax = o.attr("axis");
    const bool coerced = c.graph().opset < 13;
    Attrs at = {{"softmax", ir::attr_str(o.kind)},
                {"axis", ir::attr_int(static_cast<int64_t>(axis_of(ax ? ax->i : coerced ? 1 : -1, d.size(), o)))},
                {"coerced", ir::attr_int(coerced ? 1 : 0)}};
    c.give(x, c.emit("SoftmaxGrad", {o.outputs[0], c.dy()}, d, at));
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    const int y = o.outputs[0];
    auto& out = c.val[static_cast<size_t>(y)];
    const auto& x = c.val[static_cast<size_t>(o.inputs[0])];
    if (o.kind == "SoftmaxXent") {
      // Per row of classes (a sample's, or a token's); the gradient divided by the rows (the
      // mean over every row, torch's cross_entropy over [N, ..., classes]).
      const auto& lab = c.val[static_cast<size_t>(o.inputs[1])];
      const int64_t C = c.shape[static_cast<size_t>(o.inputs[0])].back();
      const auto rows = static_cast<int>(static_cast<int64_t>(x.size()) / C);
      if (lab.size() != static_cast<size_t>(rows)) {
        throw std::invalid_argument("graph reference: " + std::to_string(lab.size()) + " labels for " + std::to_string(rows) + " rows of logits");
      }
      auto& dl = c.val[static_cast<size_t>(o.outputs[1])];
      for (int r = 0; r < rows; ++r) {
        const std::vector<float> row(x.begin() + r * C, x.begin() + (r + 1) * C);
        std::vector<float> g;
        const int label = static_cast<int>(lab[static_cast<size_t>(r)]);
        if (label < 0 || label >= C) throw std::invalid_argument("graph reference: label " + std::to_string(label) + " outside the classes");
        out[static_cast<size_t>(r)] = softmax_xent(row, label, rows, &g);
        std::copy(g.begin(), g.end(), dl.begin() + r * C);
      }
      return;
    }
    const Span sp = span(o, c.shape[static_cast<size_t>(o.inputs[0])], c.graph->opset);
    auto at = [&](int64_t r, int64_t k) { return static_cast<size_t>(((r / sp.inner) * sp.n + k) * sp.inner + r % sp.inner); };
    if (o.kind == "SoftmaxGrad") {
      const auto& dy = c.val[static_cast<size_t>(o.inputs[1])];
      const bool log = attr_s(o, "softmax", "Softmax") == "LogSoftmax";
      for (int64_t r = 0; r < sp.outer * sp.inner; ++r) {
        float s = 0;
        for (int64_t k = 0; k < sp.n; ++k) s += log ? dy[at(r, k)] : dy[at(r, k)] * x[at(r, k)];
        for (int64_t k = 0; k < sp.n; ++k) out[at(r, k)] = log ? dy[at(r, k)] - std::exp(x[at(r, k)]) * s : x[at(r, k)] * (dy[at(r, k)] - s);
      }
      return;
    }
    for (int64_t r = 0; r < sp.outer * sp.inner; ++r) {
      float mx = x[at(r, 0)];
      for (int64_t k = 1; k < sp.n; ++k) mx = std::fmax(mx, x[at(r, k)]);
      float s = 0;
      for (int64_t k = 0; k < sp.n; ++k) s += std::exp(x[at(r, k)] - mx);
      for (int64_t k = 0; k < sp.n; ++k) {
        const float z = x[at(r, k)] - mx;
        out[at(r, k)] = o.kind == "Softmax" ? std::exp(z) / s : z - std::log(s);
      }
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_softmax() { return std::make_unique<Softmax>(); }

}  // namespace wafersim::compiler::ops
