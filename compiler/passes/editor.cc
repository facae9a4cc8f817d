#include "compiler/passes/editor.h"

#include <algorithm>
#include <cmath>

namespace wafersim::compiler::passes {

void Editor::rename_uses(int from, int to) {
  for (size_t i = 0; i < m_g.ops.size(); ++i) {
    if (m_dead[i]) continue;
    for (int& t : m_g.ops[i].inputs) {
      if (t == from) t = to;
    }
  }
  for (int& t : m_g.outputs) {
    if (t == from) t = to;
  }
}

int Editor::add_tensor(const std::string& base, ir::TensorKind kind, const std::vector<int64_t>& shape) {
  return new_tensor(m_g, base, kind, shape);
}

int new_tensor(ir::Graph& g, const std::string& base, ir::TensorKind kind, const std::vector<int64_t>& shape) {
  std::string name = base;
  for (int k = 1; g.by_name.count(name); ++k) name = base + "_" + std::to_string(k);
  ir::Tensor t;
  t.name = name;
  t.kind = kind;
  t.elem_type = kOnnxFloat;
  t.shape = shape;
  t.shape_known = true;
  g.tensors.push_back(std::move(t));
  return g.by_name[name] = static_cast<int>(g.tensors.size()) - 1;
}

void Editor::make_constant(int t, OnnxTensor value, std::vector<int64_t> batch_multiple) {
  ir::Tensor& x = m_g.tensors[static_cast<size_t>(t)];
  const int op = x.producer;
  value.name = x.name;
  x.kind = ir::TensorKind::kConstant;
  x.elem_type = value.elem_type;
  x.shape = value.dims;
  x.shape_known = true;
  x.producer = -1;
  x.owned = std::make_shared<const OnnxTensor>(std::move(value));
  x.data = x.owned.get();
  x.batch_multiple = std::move(batch_multiple);
  if (op < 0) return;
  const auto& outs = m_g.ops[static_cast<size_t>(op)].outputs;
  if (std::all_of(outs.begin(), outs.end(), [&](int o) { return o < 0 || m_g.tensors[static_cast<size_t>(o)].kind != ir::TensorKind::kValue; })) {
    remove(op);
  }
}

void Editor::fuse(std::vector<int> group, ir::Op fused) {
  std::sort(group.begin(), group.end());
  fused.sources.clear();
  for (int op : group) {
    const auto& src = m_g.ops[static_cast<size_t>(op)].sources;
    fused.sources.insert(fused.sources.end(), src.begin(), src.end());
    if (op != group.back()) remove(op);
  }
  m_g.ops[static_cast<size_t>(group.back())] = std::move(fused);
}

void Editor::finish() {
  ir::Graph& g = m_g;
  std::vector<ir::Op> ops;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    if (!m_dead[i]) ops.push_back(std::move(g.ops[i]));
  }
  g.ops = std::move(ops);
  // Which tensors stay: inputs, parameters, what a live op writes or reads, the outputs.
  const size_t T = g.tensors.size();
  std::vector<bool> keep(T, false);
  for (size_t t = 0; t < T; ++t) {
    const ir::TensorKind k = g.tensors[t].kind;
    keep[t] = k == ir::TensorKind::kInput || k == ir::TensorKind::kParameter || k == ir::TensorKind::kState;
  }
  for (const ir::Op& o : g.ops) {
    for (int t : o.inputs) {
      if (t >= 0) keep[static_cast<size_t>(t)] = true;
    }
    for (int t : o.outputs) {
      if (t >= 0) keep[static_cast<size_t>(t)] = true;
    }
  }
  for (int t : g.outputs) keep[static_cast<size_t>(t)] = true;
  std::vector<int> index(T, -1);
  std::vector<ir::Tensor> tensors;
  for (size_t t = 0; t < T; ++t) {
    if (!keep[t]) continue;
    index[t] = static_cast<int>(tensors.size());
    tensors.push_back(std::move(g.tensors[t]));
  }
  g.tensors = std::move(tensors);
  auto map = [&](int& t) {
    if (t >= 0) t = index[static_cast<size_t>(t)];
  };
  for (ir::Op& o : g.ops) {
    for (int& t : o.inputs) map(t);
    for (int& t : o.outputs) map(t);
  }
  for (int& t : g.inputs) map(t);
  for (int& t : g.outputs) map(t);
  reindex(g);
  m_dead.assign(g.ops.size(), false);
}

void reindex(ir::Graph& g) {
  g.by_name.clear();
  for (size_t t = 0; t < g.tensors.size(); ++t) {
    ir::Tensor& x = g.tensors[t];
    g.by_name[x.name] = static_cast<int>(t);
    x.consumers.clear();
    x.producer = -1;
  }
  for (size_t i = 0; i < g.ops.size(); ++i) {
    const int op = static_cast<int>(i);
    for (int t : g.ops[i].inputs) {
      if (t < 0) continue;
      auto& c = g.tensors[static_cast<size_t>(t)].consumers;
      if (c.empty() || c.back() != op) c.push_back(op);
    }
    for (int t : g.ops[i].outputs) {
      if (t >= 0) g.tensors[static_cast<size_t>(t)].producer = op;
    }
  }
}

int producer(const ir::Graph& g, int t) { return t < 0 ? -1 : g.tensors[static_cast<size_t>(t)].producer; }

bool only_use(const ir::Graph& g, int t, int op) {
  if (t < 0) return false;
  const auto& c = g.tensors[static_cast<size_t>(t)].consumers;
  return c.size() == 1 && c[0] == op && std::find(g.outputs.begin(), g.outputs.end(), t) == g.outputs.end();
}

bool is_param_or_const(const ir::Graph& g, int t) {
  if (t < 0) return false;
  const ir::TensorKind k = g.tensors[static_cast<size_t>(t)].kind;
  return k == ir::TensorKind::kParameter || k == ir::TensorKind::kConstant;
}

bool scalar_value(const ir::Graph& g, int t, double* v) {
  if (t < 0) return false;
  const ir::Tensor& x = g.tensors[static_cast<size_t>(t)];
  if (!x.data || x.symbolic()) return false;
  if (x.data->f32.size() == 1) {
    *v = x.data->f32[0];
    return true;
  }
  if (x.data->f32.empty() && x.data->i64.size() == 1) {
    *v = static_cast<double>(x.data->i64[0]);
    return true;
  }
  return false;
}

bool near(double a, double b, double rel) { return std::fabs(a - b) <= rel * std::max(std::fabs(a), std::fabs(b)); }

int other_input(const ir::Op& o, int t) {
  if (o.inputs.size() != 2) return -1;
  if (o.inputs[0] == t && o.inputs[1] != t) return o.inputs[1];
  if (o.inputs[1] == t && o.inputs[0] != t) return o.inputs[0];
  return -1;
}

std::vector<int64_t> pad_amounts(const ir::Graph& g, const ir::Op& o) {
  if (const OnnxAttr* a = o.attr("pads"); a && a->kind == OnnxAttr::kInts) return a->ints;  // opset < 11
  if (o.inputs.size() < 2 || o.inputs[1] < 0) return {};
  const ir::Tensor& t = g.tensors[static_cast<size_t>(o.inputs[1])];
  if (!t.data || t.symbolic()) return {};
  return t.data->i64;
}

}  // namespace wafersim::compiler::passes
