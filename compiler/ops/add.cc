// Add with broadcasting (the residual add of two activations, a bias added on its own) and the
// reductions its gradient needs: SumTo (dy summed over the dimensions an operand was broadcast
// along, in element order) and SumToGrad (the same into a parameter's momentum).
#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

class Add : public OpClass {
 public:
  const char* name() const override { return "add"; }
  std::vector<std::string> kinds() const override { return {"Add", "SumTo", "SumToGrad"}; }

  void gradient(const ir::Op& o, GradContext& c) const override {
    if (o.kind != "Add") return c.no_rule(o.kind);
    const int y = o.outputs[0];
    for (int k = 0; k < 2; ++k) {
      const int x = o.inputs[static_cast<size_t>(k)];
      if (k == 1 && x == o.inputs[0]) {  // x + x: a second contribution of dy
        if (c.wants(x)) c.give(x, c.dy());
        continue;
      }
      const bool same = c.shape(x) == c.shape(y);
      if (c.wants(x)) c.give(x, same ? c.dy() : c.emit("SumTo", {c.dy()}, c.shape(x)));
      if (c.is_param(x)) c.param_grad(x, "SumToGrad", {c.dy()});
    }
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    auto S = [&](int t) -> const std::vector<int64_t>& { return c.shape[static_cast<size_t>(t)]; };
    const int y = o.outputs[0];
    auto& out = c.val[static_cast<size_t>(y)];
    if (o.kind == "Add") {
      const auto &a = c.val[static_cast<size_t>(o.inputs[0])], &b = c.val[static_cast<size_t>(o.inputs[1])];
      for (size_t e = 0; e < out.size(); ++e) out[e] = a[bcast_at(e, S(y), S(o.inputs[0]))] + b[bcast_at(e, S(y), S(o.inputs[1]))];
      return;
    }
    const auto& dy = c.val[static_cast<size_t>(o.inputs[0])];
    if (o.kind == "SumToGrad") out = c.val[static_cast<size_t>(o.inputs[1])];
    for (size_t e = 0; e < dy.size(); ++e) {
      float& v = out[bcast_at(e, S(o.inputs[0]), S(y))];
      v = v + dy[e];
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_add() { return std::make_unique<Add>(); }

}  // namespace wafersim::compiler::ops
