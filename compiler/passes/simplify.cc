// simplify: ops that change nothing become renames: Identity, Dropout as it runs in training on
// the wafer (none: it is an identity, as kernel_graph.cc notes), a Cast to the type the value
// has, a Reshape or Flatten to the shape the value has, a Pad of zeros on every side. Their readers read the input instead.
// An op whose output is a graph output stays (the output keeps its name). An Identity of a
// parameter is how torch.onnx.export shares initializers that were equal at export (two zero
// biases, say): each is its own parameter in training, so the output becomes a parameter of
// its own, with the same initial values, under its own (the module's) name.
#include <algorithm>

#include "compiler/passes/editor.h"
#include "compiler/passes/passes.h"

namespace wafersim::compiler::passes {

int simplify(ir::Graph& g) {
  Editor e(g);
  int n = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const ir::Op& o = g.ops[i];
    if (!o.domain.empty() || o.inputs.empty() || o.inputs[0] < 0 || o.outputs.empty() || o.outputs[0] < 0) continue;
    const int in = o.inputs[0], out = o.outputs[0];
    const ir::Tensor &x = g.tensors[static_cast<size_t>(in)], &y = g.tensors[static_cast<size_t>(out)];
    bool noop = false;
    if (o.kind == "Identity") {
      noop = true;
    } else if (o.kind == "Dropout") {
      // Its mask output (if any) must be unread.
      noop = o.outputs.size() < 2 || o.outputs[1] < 0 || g.tensors[static_cast<size_t>(o.outputs[1])].consumers.empty();
    } else if (o.kind == "Cast") {
      const OnnxAttr* to = o.attr("to");
      noop = to && x.elem_type != 0 && to->i == x.elem_type;
    } else if (o.kind == "Reshape" || o.kind == "Flatten") {
      noop = x.shape_known && y.shape_known && x.shape == y.shape;
    } else if (o.kind == "Pad") {
      // All pads 0 (torch writes one before an AvgPool2d), from the attribute (opset < 11) or a
      // constant input.
      const std::vector<int64_t> pads = pad_amounts(g, o);
      noop = !pads.empty() && std::all_of(pads.begin(), pads.end(), [](int64_t p) { return p == 0; });
    }
    if (!noop) continue;
    if (std::find(g.outputs.begin(), g.outputs.end(), out) != g.outputs.end()) continue;
    if (o.outputs.size() > 1 && o.outputs[1] >= 0 && std::find(g.outputs.begin(), g.outputs.end(), o.outputs[1]) != g.outputs.end()) continue;
    if (o.kind == "Identity" && x.kind == ir::TensorKind::kParameter) {
      ir::Tensor& p = g.tensors[static_cast<size_t>(out)];
      p.kind = ir::TensorKind::kParameter;
      p.producer = -1;
      p.data = x.data;
      p.owned = x.owned;
      p.elem_type = x.elem_type;
      p.shape = x.shape;
      p.shape_known = true;
    } else {
      e.rename_uses(out, in);
    }
    e.remove(static_cast<int>(i));
    ++n;
  }
  if (n) e.finish();
  return n;
}

}  // namespace wafersim::compiler::passes
