// Comparisons, logic and selection, as torch exports a mask (`masked_fill(mask == 0, -inf)`:
// Equal, then Where) and casts between types: Equal, Less, Greater, LessOrEqual, GreaterOrEqual,
// And, Or, Not give 1 or 0 per element with broadcasting (no gradient: nothing of the loss flows
// through a comparison); Cast copies (to an integer type: truncated toward zero); Where(c, a, b)
// takes a where c is nonzero, else b. Gradient of Where: WhereGrad(c, dy) gives dy where c
// (side 0) or where not (side 1), zeros elsewhere, in c's and dy's broadcast shape, then summed
// to the operand's shape (SumTo) or into a parameter's momentum.
#include <cmath>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

// ONNX's integer element types (and bool): uint8 2, int8 3, uint16 4, int16 5, int32 6, int64 7,
// bool 9, uint32 12, uint64 13.
bool integer_type(int64_t t) { return (t >= 2 && t <= 7) || t == 9 || t == 12 || t == 13; }

class Select : public OpClass {
 public:
  const char* name() const override { return "select"; }
  std::vector<std::string> kinds() const override {
    return {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Not", "Cast", "Where", "WhereGrad"};
  }

  void gradient(const ir::Op& o, GradContext& c) const override {
    if (o.kind == "Cast") {
      if (c.wants(o.inputs[0])) c.give(o.inputs[0], c.dy());
      return;
    }
    if (o.kind != "Where") return;  // comparisons and logic: nothing flows back
    const auto& sy = c.shape(o.outputs[0]);
    for (int side = 0; side < 2; ++side) {
      const int x = o.inputs[static_cast<size_t>(side) + 1];
      if (!c.wants(x) && !c.is_param(x)) continue;
      give_broadcast(c, x, c.emit("WhereGrad", {o.inputs[0], c.dy()}, sy, {{"side", ir::attr_int(side)}}));
    }
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    auto S = [&](int t) -> const std::vector<int64_t>& { return c.shape[static_cast<size_t>(t)]; };
    auto V = [&](int t) -> const std::vector<float>& { return c.val[static_cast<size_t>(t)]; };
    const int y = o.outputs[0];
    auto& out = c.val[static_cast<size_t>(y)];
    const auto& sy = S(y);
    if (o.kind == "Not" || o.kind == "Cast") {
      const auto& x = V(o.inputs[0]);
      const OnnxAttr* to = o.attr("to");
      const bool trunc = o.kind == "Cast" && to && integer_type(to->i);
      for (size_t e = 0; e < out.size(); ++e) out[e] = o.kind == "Not" ? (x[e] == 0 ? 1.0f : 0.0f) : trunc ? std::trunc(x[e]) : x[e];
      return;
    }
    if (o.kind == "Where" || o.kind == "WhereGrad") {
      const bool grad = o.kind == "WhereGrad";
      const auto& cond = V(o.inputs[0]);
      const OnnxAttr* side = o.attr("side");
      for (size_t e = 0; e < out.size(); ++e) {
        const bool pick = cond[bcast_at(e, sy, S(o.inputs[0]))] != 0;
        if (grad) {
          const float g = V(o.inputs[1])[bcast_at(e, sy, S(o.inputs[1]))];
          out[e] = pick == (side && side->i == 0) ? g : 0.0f;
        } else {
          const int src = pick ? o.inputs[1] : o.inputs[2];
          out[e] = V(src)[bcast_at(e, sy, S(src))];
        }
      }
      return;
    }
    const auto &a = V(o.inputs[0]), &b = V(o.inputs[1]);
    for (size_t e = 0; e < out.size(); ++e) {
      const float p = a[bcast_at(e, sy, S(o.inputs[0]))], q = b[bcast_at(e, sy, S(o.inputs[1]))];
      bool r = false;
      if (o.kind == "Equal") r = p == q;
      else if (o.kind == "Less") r = p < q;
      else if (o.kind == "Greater") r = p > q;
      else if (o.kind == "LessOrEqual") r = p <= q;
      else if (o.kind == "GreaterOrEqual") r = p >= q;
      else if (o.kind == "And") r = p != 0 && q != 0;
      else r = p != 0 || q != 0;
      out[e] = r ? 1.0f : 0.0f;
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_select() { return std::make_unique<Select>(); }

}  // namespace wafersim::compiler::ops
