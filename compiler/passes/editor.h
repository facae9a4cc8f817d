// Editing the graph IR for the rewrite passes: ops are removed or replaced in place (a fused op
// takes the place of the last op of its group, so the order stays topological), uses of a
// tensor are moved to another, new constants are added; `finish` then drops the removed ops,
// the values only they produced and the constants nothing reads any more, and rebuilds every
// index (producers, consumers, names).
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/graph.h"

namespace wafersim::compiler::passes {

class Editor {
 public:
  explicit Editor(ir::Graph& g) : m_g(g), m_dead(g.ops.size(), false) {}

  ir::Graph& graph() { return m_g; }
  bool removed(int op) const { return m_dead[static_cast<size_t>(op)]; }
  void remove(int op) { m_dead[static_cast<size_t>(op)] = true; }
  // Every op input and graph output that reads `from` reads `to` instead.
  void rename_uses(int from, int to);
  // A new tensor named after `base` (made unique), of the given kind and shape.
  int add_tensor(const std::string& base, ir::TensorKind kind, const std::vector<int64_t>& shape);
  // Op `op`'s output `t` becomes a constant of `value` (with its batch multiples); the op is removed
  // once every output is a constant.
  void make_constant(int t, OnnxTensor value, std::vector<int64_t> batch_multiple = {});
  // The ops of `group` become `fused` (its sources: theirs, in op order), at the place of the
  // last of them; the others are removed.
  void fuse(std::vector<int> group, ir::Op fused);
  // Compacts the graph (see above).
  void finish();

 private:
  ir::Graph& m_g;
  std::vector<bool> m_dead;
};

// A new tensor in g named after `base` (made unique: base_1, base_2, ...), of the given kind and
// shape (fp32, the shape known).
int new_tensor(ir::Graph& g, const std::string& base, ir::TensorKind kind, const std::vector<int64_t>& shape);

// Producers, consumers and names rebuilt from the ops, dropping nothing (for a graph built op by
// op, such as autodiff's).
void reindex(ir::Graph& g);

// Pattern helpers over the IR.
int producer(const ir::Graph& g, int t);                       // the op producing t, or -1
bool only_use(const ir::Graph& g, int t, int op);              // t is read by op alone (and is no graph output)
bool is_param_or_const(const ir::Graph& g, int t);
bool scalar_value(const ir::Graph& g, int t, double* v);       // a float or int constant of one element
bool near(double a, double b, double rel = 1e-5);
int other_input(const ir::Op& o, int t);                       // of a two-input op: the input that is not t (-1 if neither or both)
std::vector<int64_t> pad_amounts(const ir::Graph& g, const ir::Op& pad);  // a Pad's constant pads (attribute or input 1), or {}

}  // namespace wafersim::compiler::passes
