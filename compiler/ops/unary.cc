// Elementwise unary math that is not a layer's activation (activation.cc has those): Neg, Exp,
// Log, Sqrt, Reciprocal, Abs, each one rounding of the C library's function per element.
// Gradient: UnaryGrad(x, y, dy), per element: Neg -dy; Exp dy * y; Log dy / x; Sqrt
// dy / (2 y); Reciprocal -(dy * (y * y)); Abs dy * sign(x) (0 at 0), as torch's rules.
#include <cmath>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

class Unary : public OpClass {
 public:
  const char* name() const override { return "unary"; }
  std::vector<std::string> kinds() const override { return {"Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Abs", "UnaryGrad"}; }

  void gradient(const ir::Op& o, GradContext& c) const override {
    if (o.kind == "UnaryGrad") return c.no_rule(o.kind);
    const int x = o.inputs[0];
    if (!c.wants(x)) return;
    if (o.kind == "Neg") return c.give(x, c.emit("Neg", {c.dy()}, c.shape(x)));
    c.give(x, c.emit("UnaryGrad", {x, o.outputs[0], c.dy()}, c.shape(x), {{"op", ir::attr_str(o.kind)}}));
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    auto& out = c.val[static_cast<size_t>(o.outputs[0])];
    const auto& x = c.val[static_cast<size_t>(o.inputs[0])];
    if (o.kind == "UnaryGrad") {
      const std::string op = attr_s(o, "op", "");
      const auto &y = c.val[static_cast<size_t>(o.inputs[1])], &dy = c.val[static_cast<size_t>(o.inputs[2])];
      for (size_t e = 0; e < out.size(); ++e) {
        const float g = dy[e];
        out[e] = op == "Exp" ? g * y[e] : op == "Log" ? g / x[e] : op == "Sqrt" ? g / (2.0f * y[e])
               : op == "Reciprocal" ? -(g * (y[e] * y[e])) : (x[e] > 0 ? g : x[e] < 0 ? -g : 0.0f);
      }
      return;
    }
    for (size_t e = 0; e < out.size(); ++e) {
      const float v = x[e];
      out[e] = o.kind == "Neg" ? -v : o.kind == "Exp" ? std::exp(v) : o.kind == "Log" ? std::log(v) : o.kind == "Sqrt" ? std::sqrt(v)
             : o.kind == "Reciprocal" ? 1.0f / v : std::fabs(v);
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_unary() { return std::make_unique<Unary>(); }

}  // namespace wafersim::compiler::ops
