// Data movement: ops that copy elements without arithmetic (Flatten, Reshape, Squeeze and
// Unsqueeze are renames: rename.cc). Transpose (perm), Concat (axis), Split (axis, the parts an
// attribute or a constant input; equal parts without), Slice (starts, ends, axes, steps as
// attributes before opset 10, constant inputs after; clamped as ONNX says), Gather (axis, constant
// indices of any shape, negative ones from the end). Gradients: Transpose by the inverse perm;
// Concat a Slice of dy per input; Split a Concat of its outputs' gradients (zeros for a part the
// loss does not read); Slice a SliceGrad (dy into zeros of the input's shape); Gather a
// GatherGrad (dy added into zeros, index after index in row-major order, so repeated indices sum
// in that order), or into a parameter's momentum (an embedding table).
#include <algorithm>
#include <numeric>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

std::vector<int64_t> strides(const std::vector<int64_t>& d) {
  std::vector<int64_t> s(d.size(), 1);
  for (size_t k = d.size(); k-- > 1;) s[k - 1] = s[k] * d[k];
  return s;
}

// Visits every element of shape d in row-major order with its coordinates.
template <class F>
void each(const std::vector<int64_t>& d, F f) {
  const int64_t n = numel(d);
  std::vector<int64_t> coord(d.size(), 0);
  for (int64_t e = 0; e < n; ++e) {
    f(static_cast<size_t>(e), coord);
    for (size_t k = d.size(); k-- > 0;) {
      if (++coord[k] < d[k]) break;
      coord[k] = 0;
    }
  }
}

// A Slice's begin and step per axis of input shape d (ONNX's clamping), from its operands.
struct SliceSpec {
  std::vector<int64_t> begin, step;
};
SliceSpec slice_spec(const ir::Graph& g, const ir::Op& o, const std::vector<int64_t>& d) {
  bool ga = false, gs = false;
  const std::vector<int64_t> starts = ints_operand(g, o, "starts", 1), ends = ints_operand(g, o, "ends", 2);
  std::vector<int64_t> axes = ints_operand(g, o, "axes", 3, &ga), steps = ints_operand(g, o, "steps", 4, &gs);
  if (!ga) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), 0);
  }
  if (!gs) steps.assign(starts.size(), 1);
  SliceSpec s{std::vector<int64_t>(d.size(), 0), std::vector<int64_t>(d.size(), 1)};
  for (size_t i = 0; i < starts.size() && i < axes.size() && i < steps.size(); ++i) {
    const size_t a = axis_of(axes[i], d.size(), o);
    const int64_t n = d[a], st = steps[i];
    int64_t b = starts[i] < 0 ? starts[i] + n : starts[i];
    b = st > 0 ? std::clamp<int64_t>(b, 0, n) : std::clamp<int64_t>(b, -1, n - 1);
    s.begin[a] = b;
    s.step[a] = st;
  }
  return s;
}

std::vector<int64_t> perm_of(const ir::Op& o, size_t r) {
  const OnnxAttr* p = o.attr("perm");
  std::vector<int64_t> perm(r);
  if (p && p->kind == OnnxAttr::kInts && p->ints.size() == r) perm = p->ints;
  else std::iota(perm.rbegin(), perm.rend(), 0);
  for (int64_t& v : perm) v = static_cast<int64_t>(axis_of(v, r, o));
  return perm;
}

int64_t axis_attr(const ir::Op& o, int64_t dflt) {
  const OnnxAttr* a = o.attr("axis");
  return a && a->kind == OnnxAttr::kInt ? a->i : dflt;
}

class Movement : public OpClass {
 public:
  const char* name() const override { return "movement"; }
  std::vector<std::string> kinds() const override { return {"Transpose", "Concat", "Split", "Slice", "Gather", "SliceGrad", "GatherGrad"}; }

  void gradient(const ir::Op& o, GradContext& c) const override {
    if (o.kind == "SliceGrad" || o.kind == "GatherGrad") return c.no_rule(o.kind);
    const int x = o.inputs[0];
    if (o.kind == "Transpose") {
      if (!c.wants(x)) return;
      const std::vector<int64_t> perm = perm_of(o, c.shape(x).size());
      std::vector<int64_t> inv(perm.size());
      for (size_t k = 0; k < perm.size(); ++k) inv[static_cast<size_t>(perm[k])] = static_cast<int64_t>(k);
      return c.give(x, c.emit("Transpose", {c.dy()}, c.shape(x), {{"perm", ir::attr_ints(inv)}}));
    }
    if (o.kind == "Concat") {
      const auto& sy = c.shape(o.outputs[0]);
      const auto axis = static_cast<int64_t>(axis_of(axis_attr(o, 0), sy.size(), o));
      int64_t off = 0;
      for (int in : o.inputs) {
        const int64_t len = c.shape(in)[static_cast<size_t>(axis)];
        if (c.wants(in) || c.is_param(in)) {
          if (len < 0) return c.no_rule("Concat along the batch");
          const Attrs at = {{"starts", ir::attr_ints({off})}, {"ends", ir::attr_ints({off + len})}, {"axes", ir::attr_ints({axis})}};
          give_broadcast(c, in, c.emit("Slice", {c.dy()}, c.shape(in), at));
        }
        off += len;
      }
      return;
    }
    if (o.kind == "Split") {
      if (!c.wants(x)) return;
      std::vector<int> parts;
      for (size_t k = 0; k < o.outputs.size(); ++k) {
        const int y = o.outputs[k];
        parts.push_back(c.dy_at(k) >= 0 ? c.dy_at(k) : c.emit("Zeros", {}, c.shape(y)));
      }
      const auto axis = static_cast<int64_t>(axis_of(axis_attr(o, 0), c.shape(x).size(), o));
      return c.give(x, c.emit("Concat", parts, c.shape(x), {{"axis", ir::attr_int(axis)}}));
    }
    if (o.kind == "Slice") {
      if (!c.wants(x)) return;
      Attrs at;
      for (const auto& [key, in] : std::vector<std::pair<const char*, size_t>>{{"starts", 1}, {"ends", 2}, {"axes", 3}, {"steps", 4}}) {
        bool given = false;
        const std::vector<int64_t> v = ints_operand(c.graph(), o, key, in, &given);
        if (given) at[key] = ir::attr_ints(v);
      }
      return c.give(x, c.emit("SliceGrad", {c.dy()}, c.shape(x), at));
    }
    // Gather
    const Attrs at = {{"axis", ir::attr_int(axis_attr(o, 0))}};
    if (c.wants(x)) c.give(x, c.emit("GatherGrad", {c.dy(), o.inputs[1]}, c.shape(x), at));
    if (c.is_param(x)) c.param_grad(x, "GatherGrad", {c.dy(), o.inputs[1]}, at);
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    auto V = [&](int t) -> std::vector<float>& { return c.val[static_cast<size_t>(t)]; };
    auto S = [&](int t) -> const std::vector<int64_t>& { return c.shape[static_cast<size_t>(t)]; };
    const int x = o.inputs[0], y = o.outputs[0];
    if (o.kind == "Transpose") {
      const auto& sx = S(x);
      const std::vector<int64_t> perm = perm_of(o, sx.size()), st = strides(sx);
      const auto& in = V(x);
      auto& out = V(y);
      each(S(y), [&](size_t e, const std::vector<int64_t>& co) {
        int64_t at = 0;
        for (size_t k = 0; k < co.size(); ++k) at += co[k] * st[static_cast<size_t>(perm[k])];
        out[e] = in[static_cast<size_t>(at)];
      });
      return;
    }
    if (o.kind == "Concat" || o.kind == "Split") {
      // Both walk the joined tensor's elements with the part each belongs to.
      const bool concat = o.kind == "Concat";
      const int whole = concat ? y : x;
      const std::vector<int>& parts = concat ? o.inputs : o.outputs;
      const auto& sw = S(whole);
      const size_t axis = axis_of(axis_attr(o, 0), sw.size(), o);
      std::vector<int64_t> off = {0};
      for (int p : parts) off.push_back(off.back() + (p >= 0 ? S(p)[axis] : 0));
      std::vector<size_t> next(parts.size(), 0);
      each(sw, [&](size_t e, const std::vector<int64_t>& co) {
        const auto k = static_cast<size_t>(std::upper_bound(off.begin(), off.end(), co[axis]) - off.begin() - 1);
        if (parts[k] < 0) return;
        const size_t at = next[k]++;
        if (concat) V(y)[e] = V(parts[k])[at];
        else V(parts[k])[at] = V(x)[e];
      });
      return;
    }
    if (o.kind == "Slice" || o.kind == "SliceGrad") {
      const bool grad = o.kind == "SliceGrad";
      const auto& big = S(grad ? y : x);
      const SliceSpec sp = slice_spec(*c.graph, o, big);
      const std::vector<int64_t> st = strides(big);
      const auto& in = V(x);
      auto& out = V(y);
      each(S(grad ? x : y), [&](size_t e, const std::vector<int64_t>& co) {
        int64_t at = 0;
        for (size_t k = 0; k < co.size(); ++k) at += (sp.begin[k] + co[k] * sp.step[k]) * st[k];
        if (grad) out[static_cast<size_t>(at)] = in[e];
        else out[e] = in[static_cast<size_t>(at)];
      });
      return;
    }
    // Gather and GatherGrad: (outer, index, inner) of the data's shape.
    const bool grad = o.kind == "GatherGrad";
    const auto& sd = S(grad ? y : x);
    const size_t axis = axis_of(axis_attr(o, 0), sd.size(), o);
    int64_t outer = 1, inner = 1;
    for (size_t k = 0; k < sd.size(); ++k) (k < axis ? outer : inner) *= k == axis ? 1 : sd[k];
    const auto& idx = V(o.inputs[1]);
    const int64_t n = sd[axis];
    auto& out = V(y);
    if (grad && o.inputs.size() > 2) out = V(o.inputs[2]);
    const auto& in = V(x);
    for (int64_t a = 0; a < outer; ++a) {
      for (size_t i = 0; i < idx.size(); ++i) {
        auto j = static_cast<int64_t>(idx[i]);
        if (j < 0) j += n;
        if (j < 0 || j >= n) throw CompileError("graph reference: Gather index " + std::to_string(static_cast<int64_t>(idx[i])) + " outside 0.." + std::to_string(n - 1));
        for (int64_t b = 0; b < inner; ++b) {
          const auto d = static_cast<size_t>((a * n + j) * inner + b), g = static_cast<size_t>((a * static_cast<int64_t>(idx.size()) + static_cast<int64_t>(i)) * inner + b);
          if (grad) out[d] = out[d] + in[g];
          else out[g] = in[d];
        }
      }
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_movement() { return std::make_unique<Movement>(); }

}  // namespace wafersim::compiler::ops
