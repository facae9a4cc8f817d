// Reductions along axes: ReduceSum, ReduceMean, ReduceMax, ReduceMin (axes an attribute, or
// ReduceSum's constant input from opset 13; keepdims; every axis when none are given, unless
// noop_with_empty_axes). Order: the input's elements in row-major order, each added to (or
// compared with) its output element's running value; Mean divides the sum by the count once.
// Gradient: ReduceGrad(x, y, dy) with the reduction and its axes as attributes: each input
// element gets its output element's dy (Sum), dy / count (Mean), or for Max and Min dy / ties
// where it equals the result and 0 elsewhere (torch's amax and amin share it among ties).
#include <cmath>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

// The reduced axes of op `o` over rank r.
std::vector<bool> reduced(const ir::Graph& g, const ir::Op& o, size_t r) {
  bool given = false;
  const std::vector<int64_t> axes = o.kind == "ReduceGrad" ? ints_operand(g, o, "axes", 99, &given) : ints_operand(g, o, "axes", 1, &given);
  const OnnxAttr* noop = o.attr("noop_with_empty_axes");
  std::vector<bool> red(r, axes.empty() && !(noop && noop->i != 0));
  for (int64_t a : axes) red[axis_of(a, r, o)] = true;
  return red;
}

// For each element of shape d (row-major), the index of its output element.
std::vector<size_t> out_index(const std::vector<int64_t>& d, const std::vector<bool>& red) {
  std::vector<size_t> ostride(d.size(), 0);
  size_t s = 1;
  for (size_t k = d.size(); k-- > 0;) {
    if (!red[k]) {
      ostride[k] = s;
      s *= static_cast<size_t>(d[k]);
    }
  }
  std::vector<size_t> at(static_cast<size_t>(numel(d)));
  std::vector<int64_t> coord(d.size(), 0);
  for (size_t e = 0; e < at.size(); ++e) {
    size_t o = 0;
    for (size_t k = 0; k < d.size(); ++k) o += static_cast<size_t>(coord[k]) * ostride[k];
    at[e] = o;
    for (size_t k = d.size(); k-- > 0;) {
      if (++coord[k] < d[k]) break;
      coord[k] = 0;
    }
  }
  return at;
}

class Reduce : public OpClass {
 public:
  const char* name() const override { return "reduce"; }
  std::vector<std::string> kinds() const override { return {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceGrad"}; }

  void gradient(const ir::Op& o, GradContext& c) const override {
    if (o.kind == "ReduceGrad") return c.no_rule(o.kind);
    const int x = o.inputs[0];
    if (!c.wants(x)) return;
    const std::vector<bool> red = reduced(c.graph(), o, c.shape(x).size());
    std::vector<int64_t> axes;
    for (size_t k = 0; k < red.size(); ++k) {
      if (red[k]) axes.push_back(static_cast<int64_t>(k));
    }
    Attrs at = {{"reduce", ir::attr_str(o.kind)}, {"axes", ir::attr_ints(axes)}, {"noop_with_empty_axes", ir::attr_int(1)}};
    c.give(x, c.emit("ReduceGrad", {x, o.outputs[0], c.dy()}, c.shape(x), at));
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    const auto& sx = c.shape[static_cast<size_t>(o.inputs[0])];
    const auto& x = c.val[static_cast<size_t>(o.inputs[0])];
    auto& out = c.val[static_cast<size_t>(o.outputs[0])];
    const std::vector<size_t> at = out_index(sx, reduced(*c.graph, o, sx.size()));
    const std::string kind = o.kind == "ReduceGrad" ? attr_s(o, "reduce", "") : o.kind;
    const size_t count = out.empty() ? 0 : at.size() / (o.kind == "ReduceGrad" ? c.val[static_cast<size_t>(o.inputs[1])].size() : out.size());
    if (o.kind == "ReduceGrad") {
      const auto &y = c.val[static_cast<size_t>(o.inputs[1])], &dy = c.val[static_cast<size_t>(o.inputs[2])];
      if (kind == "ReduceSum" || kind == "ReduceMean") {
        for (size_t e = 0; e < at.size(); ++e) out[e] = kind == "ReduceSum" ? dy[at[e]] : dy[at[e]] / static_cast<float>(count);
        return;
      }
      std::vector<float> ties(y.size(), 0.0f);
      for (size_t e = 0; e < at.size(); ++e) ties[at[e]] += x[e] == y[at[e]] ? 1.0f : 0.0f;
      for (size_t e = 0; e < at.size(); ++e) out[e] = x[e] == y[at[e]] ? dy[at[e]] / ties[at[e]] : 0.0f;
      return;
    }
    std::vector<bool> seen(out.size(), false);
    for (size_t e = 0; e < at.size(); ++e) {
      float& v = out[at[e]];
      if (kind == "ReduceSum" || kind == "ReduceMean") v = v + x[e];
      else if (!seen[at[e]] || std::isnan(x[e]) || (kind == "ReduceMax" ? x[e] > v : x[e] < v)) v = x[e];
      seen[at[e]] = true;
    }
    if (kind == "ReduceMean") {
      for (float& v : out) v = v / static_cast<float>(count);
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_reduce() { return std::make_unique<Reduce>(); }

}  // namespace wafersim::compiler::ops
