// Elementwise binary ops with broadcasting beside Add (add.cc): Sub, Mul, Div and Pow (its
// exponent a constant), between two activations, an activation and a constant, or an activation
// and a parameter (a learned scale). Per element of the output in row-major order, each operand's
// element under broadcasting (bcast_at), one rounding: a - b, a * b, a / b, powf(a, b).
// Gradients (each summed over the dimensions its operand was broadcast along, SumTo, or added
// into a parameter's momentum, SumToGrad): Sub dy and Neg(dy); Mul dy * b and dy * a; Div
// dy / b and Neg((dy * y) / b); Pow PowGrad(a, b, dy) = dy * b * powf(a, b - 1).
#include <cmath>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

class Binary : public OpClass {
 public:
  const char* name() const override { return "binary"; }
  std::vector<std::string> kinds() const override { return {"Sub", "Mul", "Div", "Pow", "PowGrad"}; }

  void gradient(const ir::Op& o, GradContext& c) const override {
    if (o.kind == "PowGrad") return c.no_rule(o.kind);
    const int a = o.inputs[0], b = o.inputs[1], y = o.outputs[0], dy = c.dy();
    const auto& sy = c.shape(y);
    const bool need_a = c.wants(a) || c.is_param(a), need_b = c.wants(b) || c.is_param(b);
    if (o.kind == "Pow") {
      if (need_b) return c.no_rule("Pow with a trained exponent");
      if (need_a) give_broadcast(c, a, c.emit("PowGrad", {a, b, dy}, sy));
      return;
    }
    if (o.kind == "Sub") {
      if (need_a) give_broadcast(c, a, dy);
      if (need_b) give_broadcast(c, b, c.emit("Neg", {dy}, sy));
      return;
    }
    if (o.kind == "Mul") {
      if (need_a) give_broadcast(c, a, c.emit("Mul", {dy, b}, sy));
      if (need_b) give_broadcast(c, b, c.emit("Mul", {dy, a}, sy));
      return;
    }
    // Div
    if (need_a) give_broadcast(c, a, c.emit("Div", {dy, b}, sy));
    if (need_b) give_broadcast(c, b, c.emit("Neg", {c.emit("Div", {c.emit("Mul", {dy, y}, sy), b}, sy)}, sy));
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    auto S = [&](int t) -> const std::vector<int64_t>& { return c.shape[static_cast<size_t>(t)]; };
    const int y = o.outputs[0];
    auto& out = c.val[static_cast<size_t>(y)];
    const auto &a = c.val[static_cast<size_t>(o.inputs[0])], &b = c.val[static_cast<size_t>(o.inputs[1])];
    const auto &sy = S(y), &sa = S(o.inputs[0]), &sb = S(o.inputs[1]);
    if (o.kind == "PowGrad") {
      const auto& dy = c.val[static_cast<size_t>(o.inputs[2])];
      for (size_t e = 0; e < out.size(); ++e) {
        const float av = a[bcast_at(e, sy, sa)], bv = b[bcast_at(e, sy, sb)];
        out[e] = dy[e] * bv * std::pow(av, bv - 1.0f);
      }
      return;
    }
    for (size_t e = 0; e < out.size(); ++e) {
      const float av = a[bcast_at(e, sy, sa)], bv = b[bcast_at(e, sy, sb)];
      out[e] = o.kind == "Sub" ? av - bv : o.kind == "Mul" ? av * bv : o.kind == "Div" ? av / bv : std::pow(av, bv);
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_binary() { return std::make_unique<Binary>(); }

}  // namespace wafersim::compiler::ops
