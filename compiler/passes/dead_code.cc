// dead_code: ops none of whose outputs is read (by a later op or as a graph output) are
// removed, last to first, so a chain that only fed removed ops goes too; the constants only
// they read go with them (Editor::finish). Parameters stay: they are the model's, trained or not.
#include "compiler/passes/editor.h"
#include "compiler/passes/passes.h"

#include <algorithm>

namespace wafersim::compiler::passes {

int dead_code(ir::Graph& g) {
  Editor e(g);
  std::vector<int> reads(g.tensors.size(), 0);
  for (const ir::Op& o : g.ops) {
    for (int t : o.inputs) {
      if (t >= 0) ++reads[static_cast<size_t>(t)];
    }
  }
  for (int t : g.outputs) ++reads[static_cast<size_t>(t)];
  int n = 0;
  for (size_t i = g.ops.size(); i-- > 0;) {
    const ir::Op& o = g.ops[i];
    const bool used = std::any_of(o.outputs.begin(), o.outputs.end(), [&](int t) { return t >= 0 && reads[static_cast<size_t>(t)] > 0; });
    if (used) continue;
    for (int t : o.inputs) {
      if (t >= 0) --reads[static_cast<size_t>(t)];
    }
    e.remove(static_cast<int>(i));
    ++n;
  }
  if (n) e.finish();
  return n;
}

}  // namespace wafersim::compiler::passes
