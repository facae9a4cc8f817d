// fuse_layernorm: layer normalisation becomes one LayerNorm op (inputs x, scale, bias; either
// of the last two may be absent: -1; attributes axis, the first normalised axis, negative, and
// epsilon), from
//   LayerNormalization (opset 17; its Mean and InvStdDev outputs unread), or
//   its decomposed form (torch 1.13 below opset 17):
//     m = ReduceMean(x, A); d = Sub(x, m); v = ReduceMean(Pow(d, 2), A); s = Sqrt(Add(v, eps));
//     n = Div(d, s); then optionally Mul(n, scale) and Add(., bias), scale and bias constants or
//     parameters; A the trailing axes, keepdims 1; every intermediate read by the pattern alone
//     (d by the Pow and the Div).
#include <algorithm>
#include <string>
#include <vector>

#include "compiler/passes/editor.h"
#include "compiler/passes/passes.h"

namespace wafersim::compiler::passes {
namespace {

// A ReduceMean over the trailing axes of its input (keepdims 1): the first of them, negative.
bool trailing_mean(const ir::Graph& g, int op, int* first_axis) {
  if (op < 0) return false;
  const ir::Op& o = g.ops[static_cast<size_t>(op)];
  if (o.kind != "ReduceMean" || o.inputs.empty() || o.inputs[0] < 0) return false;
  const OnnxAttr* keep = o.attr("keepdims");
  if (keep && keep->i == 0) return false;
  std::vector<int64_t> axes;
  if (const OnnxAttr* a = o.attr("axes"); a && a->kind == OnnxAttr::kInts) {
    axes = a->ints;
  } else if (o.inputs.size() > 1 && o.inputs[1] >= 0 && g.tensors[static_cast<size_t>(o.inputs[1])].data) {
    axes = g.tensors[static_cast<size_t>(o.inputs[1])].data->i64;
  }
  const ir::Tensor& x = g.tensors[static_cast<size_t>(o.inputs[0])];
  if (axes.empty() || !x.shape_known) return false;
  const auto r = static_cast<int64_t>(x.shape.size());
  for (int64_t& a : axes) a = a < 0 ? a + r : a;
  std::sort(axes.begin(), axes.end());
  for (size_t k = 0; k < axes.size(); ++k) {
    if (axes[k] != r - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(k)) return false;
  }
  *first_axis = -static_cast<int>(axes.size());
  return true;
}

// The single reader of t, if t has exactly one and is no graph output; else -1.
int sole_reader(const ir::Graph& g, int t) {
  const auto& c = g.tensors[static_cast<size_t>(t)].consumers;
  return c.size() == 1 && only_use(g, t, c[0]) ? c[0] : -1;
}

}  // namespace

int fuse_layernorm(ir::Graph& g) {
  Editor e(g);
  int n = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const ir::Op& o = g.ops[i];
    if (!o.domain.empty() || e.removed(static_cast<int>(i))) continue;
    if (o.kind == "LayerNormalization") {
      bool extra = false;
      for (size_t k = 1; k < o.outputs.size(); ++k) {
        const int t = o.outputs[k];
        extra = extra || (t >= 0 && (!g.tensors[static_cast<size_t>(t)].consumers.empty() ||
                                     std::find(g.outputs.begin(), g.outputs.end(), t) != g.outputs.end()));
      }
      if (extra || o.inputs.size() < 2) continue;
      ir::Op ln;
      ln.kind = "LayerNorm";
      ln.inputs = {o.inputs[0], o.inputs[1], o.inputs.size() > 2 ? o.inputs[2] : -1};
      ln.outputs = {o.outputs[0]};
      const OnnxAttr* ax = o.attr("axis");
      const OnnxAttr* ep = o.attr("epsilon");
      const ir::Tensor& x = g.tensors[static_cast<size_t>(o.inputs[0])];
      int64_t axis = ax ? ax->i : -1;
      if (axis >= 0 && x.shape_known) axis -= static_cast<int64_t>(x.shape.size());
      if (axis >= 0) continue;  // rank unknown: cannot say which axes
      ln.attrs["axis"] = ir::attr_int(axis);
      ln.attrs["epsilon"] = ir::attr_float(ep ? ep->f : 1e-5f);
      ln.sources = o.sources;
      g.ops[i] = std::move(ln);
      ++n;
      continue;
    }
    if (o.kind != "Div" || o.inputs.size() != 2) continue;
    const int d = o.inputs[0], s = o.inputs[1];
    const int sub = producer(g, d), sq = producer(g, s);
    if (sub < 0 || sq < 0 || g.ops[static_cast<size_t>(sub)].kind != "Sub" || g.ops[static_cast<size_t>(sq)].kind != "Sqrt") continue;
    const ir::Op& so = g.ops[static_cast<size_t>(sub)];
    const int x = so.inputs[0], m = so.inputs[1];
    const int mean = producer(g, m);
    int axis = 0, axis2 = 0;
    if (!trailing_mean(g, mean, &axis) || g.ops[static_cast<size_t>(mean)].inputs[0] != x || !only_use(g, m, sub)) continue;
    // d is read by the Pow and this Div only.
    const auto& dc = g.tensors[static_cast<size_t>(d)].consumers;
    if (dc.size() != 2 || std::find(g.outputs.begin(), g.outputs.end(), d) != g.outputs.end()) continue;
    const int pw = dc[0] == static_cast<int>(i) ? dc[1] : dc[0];
    double two = 0;
    const ir::Op& po = g.ops[static_cast<size_t>(pw)];
    if (po.kind != "Pow" || po.inputs.size() != 2 || po.inputs[0] != d || !scalar_value(g, po.inputs[1], &two) || two != 2) continue;
    const int var = sole_reader(g, po.outputs[0]);
    if (!trailing_mean(g, var, &axis2) || axis2 != axis) continue;
    const int add = sole_reader(g, g.ops[static_cast<size_t>(var)].outputs[0]);
    if (add < 0 || g.ops[static_cast<size_t>(add)].kind != "Add") continue;
    double eps = 0;
    const int vin = g.ops[static_cast<size_t>(var)].outputs[0];
    if (!scalar_value(g, other_input(g.ops[static_cast<size_t>(add)], vin), &eps) || !(eps >= 0)) continue;
    if (sole_reader(g, g.ops[static_cast<size_t>(add)].outputs[0]) != sq || !only_use(g, s, static_cast<int>(i))) continue;
    std::vector<int> group = {mean, sub, pw, var, add, sq, static_cast<int>(i)};
    int y = o.outputs[0], scale = -1, bias = -1;
    // Optional Mul(scale), then optional Add(bias).
    if (const int mul = sole_reader(g, y); mul >= 0 && g.ops[static_cast<size_t>(mul)].kind == "Mul" &&
                                           is_param_or_const(g, other_input(g.ops[static_cast<size_t>(mul)], y))) {
      scale = other_input(g.ops[static_cast<size_t>(mul)], y);
      group.push_back(mul);
      y = g.ops[static_cast<size_t>(mul)].outputs[0];
    }
    if (const int ab = sole_reader(g, y); ab >= 0 && g.ops[static_cast<size_t>(ab)].kind == "Add" &&
                                          is_param_or_const(g, other_input(g.ops[static_cast<size_t>(ab)], y))) {
      bias = other_input(g.ops[static_cast<size_t>(ab)], y);
      group.push_back(ab);
      y = g.ops[static_cast<size_t>(ab)].outputs[0];
    }
    ir::Op ln;
    ln.kind = "LayerNorm";
    ln.inputs = {x, scale, bias};
    ln.outputs = {y};
    ln.attrs["axis"] = ir::attr_int(axis);
    ln.attrs["epsilon"] = ir::attr_float(static_cast<float>(eps));
    e.fuse(group, std::move(ln));
    ++n;
  }
  if (n) e.finish();
  return n;
}

}  // namespace wafersim::compiler::passes
