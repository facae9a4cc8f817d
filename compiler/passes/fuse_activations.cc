// fuse_activations: the activations torch 1.13 exports as several ops become one op of their
// activation's graph-IR kind (compiler/activations/), which fuse_dense then takes like any other:
//   Silu:      Mul(x, Sigmoid(x))                    (nn.SiLU, in either operand order)
//   HardSwish: Mul(x, HardSigmoid(x))                (nn.Hardswish below opset 17; its alpha, beta)
//   Mish:      Mul(x, Tanh(Softplus(x)))             (nn.Mish)
//   Softsign:  Div(x, Add(Abs(x), 1))                (nn.Softsign; the 1 in either operand)
// Every intermediate value must be read by the pattern alone.
#include <string>
#include <vector>

#include "compiler/passes/editor.h"
#include "compiler/passes/passes.h"

namespace wafersim::compiler::passes {
namespace {

// The single-input op of `kind` that produces t (read by `reader` alone), or -1.
int unary_producer(const ir::Graph& g, int t, int reader, const char* kind) {
  const int p = producer(g, t);
  if (p < 0 || !only_use(g, t, reader)) return -1;
  const ir::Op& o = g.ops[static_cast<size_t>(p)];
  return o.kind == kind && o.domain.empty() && o.inputs.size() == 1 ? p : -1;
}

}  // namespace

int fuse_activations(ir::Graph& g) {
  Editor e(g);
  int n = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const ir::Op& m = g.ops[i];
    if (!m.domain.empty() || m.inputs.size() != 2 || m.outputs.size() != 1 || e.removed(static_cast<int>(i))) continue;
    const int self = static_cast<int>(i);
    std::vector<int> group;
    std::string kind;
    int x = -1;
    ir::Op fused;
    if (m.kind == "Mul") {
      for (int k = 0; k < 2 && kind.empty(); ++k) {
        const int a = m.inputs[static_cast<size_t>(k)], f = m.inputs[static_cast<size_t>(1 - k)];
        if (int s = unary_producer(g, f, self, "Sigmoid"); s >= 0 && g.ops[static_cast<size_t>(s)].inputs[0] == a) {
          group = {s, self}, kind = "Silu", x = a;
        } else if (int h = unary_producer(g, f, self, "HardSigmoid"); h >= 0 && g.ops[static_cast<size_t>(h)].inputs[0] == a) {
          group = {h, self}, kind = "HardSwish", x = a;
          for (const char* key : {"alpha", "beta"}) {
            if (const OnnxAttr* v = g.ops[static_cast<size_t>(h)].attr(key)) fused.attrs[key] = *v;
          }
        } else if (int t = unary_producer(g, f, self, "Tanh"); t >= 0) {
          const int sp = unary_producer(g, g.ops[static_cast<size_t>(t)].inputs[0], t, "Softplus");
          if (sp >= 0 && g.ops[static_cast<size_t>(sp)].inputs[0] == a) group = {sp, t, self}, kind = "Mish", x = a;
        }
      }
    } else if (m.kind == "Div") {
      const int a = m.inputs[0], d = m.inputs[1];
      const int add = producer(g, d);
      if (add >= 0 && only_use(g, d, self) && g.ops[static_cast<size_t>(add)].kind == "Add" && g.ops[static_cast<size_t>(add)].inputs.size() == 2) {
        const ir::Op& ad = g.ops[static_cast<size_t>(add)];
        for (int k = 0; k < 2 && kind.empty(); ++k) {
          double one = 0;
          if (!scalar_value(g, ad.inputs[static_cast<size_t>(1 - k)], &one) || one != 1.0) continue;
          const int ab = unary_producer(g, ad.inputs[static_cast<size_t>(k)], add, "Abs");
          if (ab >= 0 && g.ops[static_cast<size_t>(ab)].inputs[0] == a) group = {ab, add, self}, kind = "Softsign", x = a;
        }
      }
    }
    if (kind.empty() || x < 0) continue;
    fused.kind = kind;
    fused.inputs = {x};
    fused.outputs = {m.outputs[0]};
    e.fuse(group, std::move(fused));
    ++n;
  }
  if (n) e.finish();
  return n;
}

}  // namespace wafersim::compiler::passes
