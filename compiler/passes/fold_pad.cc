// fold_pad: a Pad of zeros around NCHW planes (or NCL sequences) whose only reader is a Conv or an AveragePool
// becomes that op's pads: added to a Conv's, or an AveragePool's (which has none of its own)
// with count_include_pad = 1, since the zeros were counted. torch.onnx.export writes
// AvgPool2d(padding = p) (count_include_pad, its default) so, and F.pad before a convolution.
// A Pad of no width is simplify's; any other Pad stays (reflect or edge modes, a non-zero
// value, pads on the batch or channels, a Pad read by anything else).
#include <algorithm>

#include "compiler/passes/editor.h"
#include "compiler/passes/passes.h"

namespace wafersim::compiler::passes {

namespace {

bool zero_padding(const ir::Graph& g, const ir::Op& o) {
  if (const OnnxAttr* m = o.attr("mode"); m && !m->s.empty() && m->s != "constant") return false;
  if (const OnnxAttr* v = o.attr("value"); v && v->f != 0.0f) return false;
  double v = 0;
  return o.inputs.size() < 3 || o.inputs[2] < 0 || (scalar_value(g, o.inputs[2], &v) && v == 0.0);
}

bool explicit_pads(const ir::Op& o) {
  const OnnxAttr* a = o.attr("auto_pad");
  return !a || a->s.empty() || a->s == "NOTSET";
}

}  // namespace

int fold_pad(ir::Graph& g) {
  Editor e(g);
  int n = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const ir::Op& o = g.ops[i];
    if (o.kind != "Pad" || !o.domain.empty() || o.inputs.empty() || o.inputs[0] < 0 || o.outputs.empty() || o.outputs[0] < 0) continue;
    const int in = o.inputs[0], out = o.outputs[0];
    const std::vector<int64_t> p = pad_amounts(g, o);  // 8: NCHW planes; 6: NCL sequences
    const size_t r = p.size() / 2;
    if ((p.size() != 8 && p.size() != 6) || p[0] || p[1] || p[r] || p[r + 1] || !zero_padding(g, o)) continue;
    if (std::any_of(p.begin(), p.end(), [](int64_t v) { return v < 0; })) continue;
    const std::vector<int>& readers = g.tensors[static_cast<size_t>(out)].consumers;
    if (readers.size() != 1 || !only_use(g, out, readers[0])) continue;
    ir::Op& c = g.ops[static_cast<size_t>(readers[0])];
    if (!c.domain.empty() || c.inputs.empty() || c.inputs[0] != out || !explicit_pads(c)) continue;
    const size_t sp = r - 2;  // spatial axes
    std::vector<int64_t> pads(2 * sp, 0);
    if (const OnnxAttr* a = c.attr("pads"); a && !a->ints.empty()) pads = a->ints;
    if (pads.size() != 2 * sp) continue;
    std::vector<int64_t> add;  // the spatial axes' begins, then their ends (ONNX's order)
    for (size_t k = 2; k < r; ++k) add.push_back(p[k]);
    for (size_t k = 2; k < r; ++k) add.push_back(p[r + k]);
    if (c.kind == "Conv") {
      for (size_t k = 0; k < pads.size(); ++k) pads[k] += add[k];
    } else if (c.kind == "AveragePool" && std::all_of(pads.begin(), pads.end(), [](int64_t v) { return v == 0; })) {
      pads = add;
      c.attrs["count_include_pad"] = ir::attr_int(1);
    } else {
      continue;
    }
    c.attrs["pads"] = ir::attr_ints(pads);
    c.sources.insert(c.sources.begin(), o.sources.begin(), o.sources.end());
    e.rename_uses(out, in);
    e.remove(static_cast<int>(i));
    ++n;
  }
  if (n) e.finish();
  return n;
}

}  // namespace wafersim::compiler::passes
