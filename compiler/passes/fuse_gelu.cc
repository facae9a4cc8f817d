// fuse_gelu: GELU as torch 1.13 exports it becomes one Gelu op over x.
//   Erf form (approximate='none'):  0.5 x (1 + erf(x / sqrt 2)), the division also as x * (1/sqrt 2);
//   tanh form (approximate='tanh'): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), the cube as
//   x * (x * x), (x * x) * x or Pow(x, 3).
// The final 0.5 x (1 + f) is taken as Mul(Mul(x, 1 + f), 0.5), in either operand order, or as
// Mul(Mul(x, 0.5), 1 + f). Every intermediate value must be read by the pattern alone.
#include <algorithm>
#include <string>
#include <vector>

#include "compiler/passes/editor.h"
#include "compiler/passes/passes.h"

namespace wafersim::compiler::passes {
namespace {

// Op `i` is a `kind` with a scalar constant operand near `c`: its other operand, or -1.
int with_scalar(const ir::Graph& g, int i, const char* kind, double c) {
  if (i < 0) return -1;
  const ir::Op& o = g.ops[static_cast<size_t>(i)];
  if (o.kind != kind || !o.domain.empty() || o.inputs.size() != 2) return -1;
  for (int k = 0; k < 2; ++k) {
    double v = 0;
    if (kind == std::string("Div") && k == 0) continue;  // x / c only
    if (scalar_value(g, o.inputs[static_cast<size_t>(k)], &v) && near(v, c, 1e-4)) return o.inputs[static_cast<size_t>(1 - k)];
  }
  return -1;
}

// Is t = x^3 (x * (x * x), (x * x) * x, Pow(x, 3)) with single-use intermediates? Adds its ops.
bool cube_of(const ir::Graph& g, int t, int x, std::vector<int>* ops) {
  const int p = producer(g, t);
  if (p < 0) return false;
  const ir::Op& o = g.ops[static_cast<size_t>(p)];
  if (o.kind == "Pow") {
    double v = 0;
    if (o.inputs.size() == 2 && o.inputs[0] == x && scalar_value(g, o.inputs[1], &v) && v == 3) {
      ops->push_back(p);
      return true;
    }
    return false;
  }
  if (o.kind != "Mul" || o.inputs.size() != 2) return false;
  const int sq = other_input(o, x);
  if (sq < 0 || !only_use(g, sq, p)) return false;
  const int q = producer(g, sq);
  if (q < 0) return false;
  const ir::Op& s = g.ops[static_cast<size_t>(q)];
  if (s.kind != "Mul" || s.inputs.size() != 2 || s.inputs[0] != x || s.inputs[1] != x) return false;
  ops->push_back(q);
  ops->push_back(p);
  return true;
}

}  // namespace

int fuse_gelu(ir::Graph& g) {
  Editor e(g);
  int n = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const ir::Op& f = g.ops[i];
    if ((f.kind != "Erf" && f.kind != "Tanh") || !f.domain.empty() || f.inputs.size() != 1 || e.removed(static_cast<int>(i))) continue;
    std::vector<int> group;
    const int u = f.inputs[0];
    if (!only_use(g, u, static_cast<int>(i))) continue;
    int x = -1;
    const int pu = producer(g, u);
    if (f.kind == "Erf") {
      x = with_scalar(g, pu, "Div", 1.41421356);
      if (x < 0) x = with_scalar(g, pu, "Mul", 0.70710678);
      if (x < 0) continue;
      group.push_back(pu);
    } else {
      // u = c_a (x + c_b x^3)
      const int inner = with_scalar(g, pu, "Mul", 0.7978845608);
      if (inner < 0 || !only_use(g, inner, pu)) continue;
      const int pa = producer(g, inner);
      if (pa < 0 || g.ops[static_cast<size_t>(pa)].kind != "Add") continue;
      const ir::Op& add = g.ops[static_cast<size_t>(pa)];
      if (add.inputs.size() != 2) continue;
      bool ok = false;
      for (int k = 0; k < 2 && !ok; ++k) {
        const int cand = add.inputs[static_cast<size_t>(k)], term = add.inputs[static_cast<size_t>(1 - k)];
        if (!only_use(g, term, pa)) continue;
        const int c3 = with_scalar(g, producer(g, term), "Mul", 0.044715);
        std::vector<int> cube;
        if (c3 < 0 || !only_use(g, c3, producer(g, term)) || !cube_of(g, c3, cand, &cube)) continue;
        x = cand;
        group.insert(group.end(), cube.begin(), cube.end());
        group.push_back(producer(g, term));
        group.push_back(pa);
        ok = true;
      }
      if (!ok) continue;
      group.push_back(pu);
    }
    group.push_back(static_cast<int>(i));
    // 1 + f
    const int fo = f.outputs[0];
    if (fo < 0 || g.tensors[static_cast<size_t>(fo)].consumers.size() != 1) continue;
    const int pa1 = g.tensors[static_cast<size_t>(fo)].consumers[0];
    if (with_scalar(g, pa1, "Add", 1.0) != fo) continue;
    group.push_back(pa1);
    const int a = g.ops[static_cast<size_t>(pa1)].outputs[0];
    if (g.tensors[static_cast<size_t>(a)].consumers.size() != 1 || !only_use(g, a, g.tensors[static_cast<size_t>(a)].consumers[0])) continue;
    const int m1 = g.tensors[static_cast<size_t>(a)].consumers[0];
    const ir::Op& mo = g.ops[static_cast<size_t>(m1)];
    if (mo.kind != "Mul") continue;
    const int other = other_input(mo, a);
    int y = -1;
    if (other == x) {  // Mul(Mul(x, 1 + f), 0.5)
      const int t = mo.outputs[0];
      if (g.tensors[static_cast<size_t>(t)].consumers.size() != 1 || !only_use(g, t, g.tensors[static_cast<size_t>(t)].consumers[0])) continue;
      const int m2 = g.tensors[static_cast<size_t>(t)].consumers[0];
      if (with_scalar(g, m2, "Mul", 0.5) != t) continue;
      group.push_back(m1);
      group.push_back(m2);
      y = g.ops[static_cast<size_t>(m2)].outputs[0];
    } else if (other >= 0 && only_use(g, other, m1) && with_scalar(g, producer(g, other), "Mul", 0.5) == x) {  // Mul(Mul(x, 0.5), 1 + f)
      group.push_back(producer(g, other));
      group.push_back(m1);
      y = mo.outputs[0];
    } else {
      continue;
    }
    ir::Op gelu;
    gelu.kind = "Gelu";
    gelu.inputs = {x};
    gelu.outputs = {y};
    gelu.attrs["approximate"] = ir::attr_str(f.kind == "Erf" ? "none" : "tanh");
    e.fuse(group, std::move(gelu));
    ++n;
  }
  if (n) e.finish();
  return n;
}

}  // namespace wafersim::compiler::passes
