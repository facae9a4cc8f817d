#include "compiler/graph_reference.h"

#include <algorithm>
#include <stdexcept>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler {
namespace {

using ops::numel;

}  // namespace

void set_dense_tiles(ir::Graph& g, const Plan& plan) {
  size_t l = 0;
  for (ir::Op& o : g.ops) {
    if (o.kind != "Dense") continue;
    if (l >= plan.layers.size()) throw std::logic_error("set_dense_tiles: more Dense ops than the plan's layers");
    o.attrs["in_tiles"] = ir::attr_ints({plan.layers[l].in_off.begin(), plan.layers[l].in_off.end()});
    o.attrs["out_tiles"] = ir::attr_ints({plan.layers[l].out_off.begin(), plan.layers[l].out_off.end()});
    ++l;
  }
}

GraphReference::GraphReference(const TrainGraph& t, const TrainHyper& h) : m_t(t), m_h(h) {
  const ir::Graph& g = t.g;
  m_val.resize(g.tensors.size());
  m_shape.resize(g.tensors.size());
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    const ir::Tensor& x = g.tensors[i];
    if (x.kind == ir::TensorKind::kState) m_val[i].assign(static_cast<size_t>(numel(x.shape)), 0.0f);
    if ((x.kind == ir::TensorKind::kParameter || x.kind == ir::TensorKind::kConstant) && x.data) {
      if (!x.data->f32.empty()) m_val[i] = x.data->f32;
      else m_val[i].assign(x.data->i64.begin(), x.data->i64.end());
      const bool fixed = x.shape_known && std::all_of(x.shape.begin(), x.shape.end(), [](int64_t d) { return d >= 0; });
      if (fixed && static_cast<int64_t>(m_val[i].size()) != numel(x.shape)) {
        throw CompileError("graph reference: constant '" + x.name + "' of dtype " + onnx_elem_type_name(x.elem_type) + " holds " +
                           std::to_string(m_val[i].size()) + " values for its shape " + ir::shape_str(x.shape));
      }
    }
  }
}

const std::vector<float>& GraphReference::param(const std::string& name) const { return m_val[static_cast<size_t>(m_t.g.find(name))]; }

const std::vector<float>& GraphReference::momentum(const std::string& name) const { return state("momentum", name); }

const std::vector<float>& GraphReference::state(const std::string& what, const std::string& name) const {
  const int t = m_t.g.find(what + ":" + name);
  if (t < 0) throw std::invalid_argument("GraphReference: no state '" + what + ":" + name + "'");
  return m_val[static_cast<size_t>(t)];
}

std::vector<float> GraphReference::logits(const std::vector<const float*>& xs) {
  run(xs, nullptr, nullptr, m_t.forward_ops);
  return m_val[static_cast<size_t>(m_t.logits)];
}

std::vector<float> GraphReference::step(const std::vector<const float*>& xs, const std::vector<int>& labels) {
  if (m_t.regression) throw std::invalid_argument("GraphReference: a regression graph takes targets, not labels");
  run(xs, &labels, nullptr, static_cast<int>(m_t.g.ops.size()));
  return finish_step();
}

std::vector<float> GraphReference::step(const std::vector<const float*>& xs, const std::vector<const float*>& targets) {
  if (!m_t.regression) throw std::invalid_argument("GraphReference: a classification graph takes labels, not targets");
  run(xs, nullptr, &targets, static_cast<int>(m_t.g.ops.size()));
  return finish_step();
}

std::vector<float> GraphReference::finish_step() {
  for (const auto& p : m_t.params) {
    m_val[static_cast<size_t>(p.value)] = m_val[static_cast<size_t>(p.new_value)];
    m_val[static_cast<size_t>(p.state)] = m_val[static_cast<size_t>(p.new_state)];
    if (p.state2 >= 0) m_val[static_cast<size_t>(p.state2)] = m_val[static_cast<size_t>(p.new_state2)];
  }
  ++m_step;
  return m_val[static_cast<size_t>(m_t.loss)];
}

// Each op as its class evaluates it (compiler/ops/: the order of operations is written there).
void GraphReference::run(const std::vector<const float*>& xs, const std::vector<int>* labels, const std::vector<const float*>* targets,
                         int until) {
  const ir::Graph& g = m_t.g;
  const int B = static_cast<int>(xs.size());
  if (B < 1) throw std::invalid_argument("GraphReference: an empty minibatch");
  m_batch = B;
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    m_shape[i] = g.tensors[i].shape;
    for (int64_t& d : m_shape[i]) d = d < 0 ? -d * B : d;
  }
  {
    const size_t per = static_cast<size_t>(numel(m_shape[static_cast<size_t>(m_t.data)]) / B);
    auto& x = m_val[static_cast<size_t>(m_t.data)];
    x.clear();
    for (const float* s : xs) x.insert(x.end(), s, s + per);
  }
  if (labels) {
    auto& l = m_val[static_cast<size_t>(m_t.labels)];
    l.assign(labels->begin(), labels->end());
  }
  if (targets) {
    const size_t per = static_cast<size_t>(numel(m_shape[static_cast<size_t>(m_t.labels)]) / B);
    auto& l = m_val[static_cast<size_t>(m_t.labels)];
    l.clear();
    for (const float* s : *targets) l.insert(l.end(), s, s + per);
  }
  ops::EvalContext ctx{m_val, m_shape, m_pre, m_h, B, m_step, &g};
  for (int i = 0; i < until; ++i) {
    const ir::Op& o = g.ops[static_cast<size_t>(i)];
    for (int y : o.outputs) {
      if (y >= 0) m_val[static_cast<size_t>(y)].assign(static_cast<size_t>(numel(m_shape[static_cast<size_t>(y)])), 0.0f);
    }
    const ops::OpClass* c = o.domain.empty() ? ops::find(o.kind) : nullptr;
    if (!c) {
      throw CompileError("graph reference: op " + o.kind + " ('" + (o.sources.empty() ? std::string("?") : o.sources.front()) +
                         "') is not interpreted yet");
    }
    c->evaluate(o, ctx);
  }
}

}  // namespace wafersim::compiler
