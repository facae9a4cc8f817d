// fuse_dense: a matmul against trained weights with its bias and the activation after it
// becomes one Dense op (today's DenseKernel): inputs x, W, bias (-1 if none); attributes transB
// (1: W is [out, in], as Gemm transB=1; 0: [in, out], as MatMul), alpha and beta (Gemm's scales),
// activation ("none", an activation of compiler/activations/ by its name, with activation_alpha
// and activation_beta where it has parameters, or "gelu", "gelu_tanh"). From
//   Gemm(x, W, C) with transA 0 and W a parameter;
//   MatMul(x, W) with W a 2-D parameter, then, if its only reader, Add of a parameter or
//   constant bias of W's output width;
// then, if the result's only reader, an activation (Relu, Sigmoid, Clip, ..., or Gelu after
// fuse_gelu).
// Conv(x, W, B) with W a parameter, and an activation after it, likewise becomes Conv2d (the
// Conv's attributes, plus activation). x may have any rank: Dense acts on its last axis.
#include <algorithm>
#include <string>
#include <vector>

#include "compiler/activation.h"
#include "compiler/ops/op_class.h"
#include "compiler/passes/editor.h"
#include "compiler/passes/passes.h"

namespace wafersim::compiler::passes {
namespace {

bool is_param(const ir::Graph& g, int t) { return t >= 0 && g.tensors[static_cast<size_t>(t)].kind == ir::TensorKind::kParameter; }

int sole_reader(const ir::Graph& g, int t) {
  const auto& c = g.tensors[static_cast<size_t>(t)].consumers;
  return c.size() == 1 && only_use(g, t, c[0]) ? c[0] : -1;
}

// The activation op `op` as a Dense/Conv2d attribute, or "" if it is none of them (an op with
// parameters, Clip's bounds among them, only where they are ones the kernels take).
std::string activation_of(const ir::Graph& g, const ir::Op& o) {
  if (!o.domain.empty()) return "";
  if (o.kind == "Gelu") {
    const OnnxAttr* a = o.attr("approximate");
    return o.inputs.size() == 1 ? (a && a->s == "tanh" ? "gelu_tanh" : "gelu") : "";
  }
  const ActivationDef* d = activation_by_kind(o.kind);
  if (!d || (o.inputs.size() != 1 && o.kind != "Clip")) return "";
  if (d->params) {
    std::string why;
    d->params(ops::act_inputs(g, o), &why);
    if (!why.empty()) return "";
  }
  return d->name;
}

}  // namespace

int fuse_dense(ir::Graph& g) {
  Editor e(g);
  int n = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const ir::Op& o = g.ops[i];
    if (!o.domain.empty() || e.removed(static_cast<int>(i)) || o.outputs.size() != 1 || o.outputs[0] < 0) continue;
    ir::Op f;
    std::vector<int> group = {static_cast<int>(i)};
    if (o.kind == "Gemm") {
      const OnnxAttr* ta = o.attr("transA");
      if ((ta && ta->i != 0) || o.inputs.size() < 2 || !is_param(g, o.inputs[1])) continue;
      f.kind = "Dense";
      f.inputs = {o.inputs[0], o.inputs[1], o.inputs.size() > 2 ? o.inputs[2] : -1};
      f.attrs = o.attrs;
      f.attrs.erase("transA");
      if (!f.attrs.count("transB")) {
        f.attrs["transB"] = ir::attr_int(0);
      }
    } else if (o.kind == "MatMul") {
      if (o.inputs.size() != 2 || !is_param(g, o.inputs[1]) || g.tensors[static_cast<size_t>(o.inputs[1])].shape.size() != 2) continue;
      f.kind = "Dense";
      f.inputs = {o.inputs[0], o.inputs[1], -1};
      f.attrs["transB"] = ir::attr_int(0);
      const int y = o.outputs[0];
      const int64_t width = g.tensors[static_cast<size_t>(o.inputs[1])].shape[1];
      if (const int add = sole_reader(g, y); add >= 0 && g.ops[static_cast<size_t>(add)].kind == "Add") {
        const int b = other_input(g.ops[static_cast<size_t>(add)], y);
        const ir::Tensor* bt = b >= 0 ? &g.tensors[static_cast<size_t>(b)] : nullptr;
        if (bt && is_param_or_const(g, b) && bt->data && bt->data->numel() == width && bt->shape.size() <= 2 && !bt->shape.empty() &&
            bt->shape.back() == width) {
          f.inputs[2] = b;
          group.push_back(add);
        }
      }
    } else if (o.kind == "Conv") {
      if (o.inputs.size() < 2 || !is_param(g, o.inputs[1])) continue;
      f.kind = "Conv2d";
      f.inputs = o.inputs;
      f.inputs.resize(3, -1);
      f.attrs = o.attrs;
    } else {
      continue;
    }
    int y = g.ops[static_cast<size_t>(group.back())].outputs[0];
    std::string act = "none";
    if (const int a = sole_reader(g, y); a >= 0 && !activation_of(g, g.ops[static_cast<size_t>(a)]).empty()) {
      const ir::Op& ao = g.ops[static_cast<size_t>(a)];
      act = activation_of(g, ao);
      if (const ActivationDef* d = activation_by_kind(ao.kind); d && d->params) {
        std::string why;
        const ActParams p = d->params(ops::act_inputs(g, ao), &why);
        f.attrs["activation_alpha"] = ir::attr_float(p.a);
        if (p.b != 0) f.attrs["activation_beta"] = ir::attr_float(p.b);
      }
      group.push_back(a);
      y = ao.outputs[0];
    }
    f.attrs["activation"] = ir::attr_str(act);
    f.outputs = {y};
    e.fuse(group, std::move(f));
    ++n;
  }
  if (n) e.finish();
  return n;
}

}  // namespace wafersim::compiler::passes
