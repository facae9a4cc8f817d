#include "compiler/autodiff.h"

#include <algorithm>
#include <map>
#include <numeric>
#include <set>

#include "compiler/ops/op_class.h"
#include "compiler/passes/editor.h"

namespace wafersim::compiler {
namespace {

class Builder {
 public:
  explicit Builder(ir::Graph& g) : m_g(g) {}

  int tensor(const std::string& base, ir::TensorKind kind, const std::vector<int64_t>& shape) {
    return passes::new_tensor(m_g, base, kind, shape);
  }
  // An op of `kind` whose outputs have the given shapes; returns the output tensors.
  std::vector<int> op(const std::string& kind, std::vector<int> inputs, const std::vector<std::vector<int64_t>>& shapes, ir::Role role,
                      const std::string& source, std::map<std::string, OnnxAttr> attrs = {}) {
    ir::Op o;
    o.kind = kind;
    o.inputs = std::move(inputs);
    o.attrs = std::move(attrs);
    o.role = role;
    o.sources = {source};
    const int index = static_cast<int>(m_g.ops.size());
    for (size_t k = 0; k < shapes.size(); ++k) {
      const int t = tensor(source + "/" + kind + (shapes.size() > 1 ? "_" + std::to_string(k) : std::string()), ir::TensorKind::kValue, shapes[k]);
      m_g.tensors[static_cast<size_t>(t)].producer = index;
      o.outputs.push_back(t);
    }
    m_g.ops.push_back(std::move(o));
    return m_g.ops.back().outputs;
  }
  int op1(const std::string& kind, std::vector<int> inputs, const std::vector<int64_t>& shape, ir::Role role, const std::string& source,
          std::map<std::string, OnnxAttr> attrs = {}) {
    return op(kind, std::move(inputs), {shape}, role, source, std::move(attrs))[0];
  }
  const std::vector<int64_t>& shape(int t) const { return m_g.tensors[static_cast<size_t>(t)].shape; }

 private:
  ir::Graph& m_g;
};

std::string src(const ir::Op& o) { return o.sources.empty() ? o.kind : o.sources.front(); }

}  // namespace

TrainGraph autodiff(const ir::Graph& forward, const std::string& optimizer, const std::string& loss) {
  if (loss != "softmax_xent" && loss != "mse") throw CompileError("autodiff: loss '" + loss + "' is unknown (softmax_xent or mse)");
  if (optimizer != "sgd" && optimizer != "adam") throw CompileError("autodiff: optimizer '" + optimizer + "' is unknown (sgd or adam)");
  TrainGraph t;
  t.g = forward;
  ir::Graph& g = t.g;
  t.forward_ops = static_cast<int>(g.ops.size());
  Builder b(g);
  // The data input: the first float input, or else the first integer one (token ids, which an
  // embedding's Gather reads); the logits: the first output, with a Softmax or LogSoftmax over its
  // last axis absorbed by the loss.
  for (int i : g.inputs) {
    if (g.tensors[static_cast<size_t>(i)].elem_type == kOnnxFloat) {
      t.data = i;
      break;
    }
  }
  for (int i : g.inputs) {
    const int e = g.tensors[static_cast<size_t>(i)].elem_type;
    if (t.data < 0 && (e == kOnnxInt64 || e == kOnnxInt32)) t.data = i;
  }
  if (t.data < 0 || g.outputs.empty()) throw CompileError(g.path + ": autodiff: the graph needs a float or integer input and an output");
  t.logits = g.outputs[0];
  t.regression = loss == "mse";
  if (const int p = g.tensors[static_cast<size_t>(t.logits)].producer;
      !t.regression && p >= 0 && (g.ops[static_cast<size_t>(p)].kind == "Softmax" || g.ops[static_cast<size_t>(p)].kind == "LogSoftmax") &&
      g.ops[static_cast<size_t>(p)].inputs[0] >= 0) {
    t.logits = g.ops[static_cast<size_t>(p)].inputs[0];
  }
  // Logits [N, ..., classes]: the loss per row of classes (a token's, for [N, S, vocabulary]),
  // its labels [N, ...]; their mean over every row is the minibatch's loss.
  const ir::Tensor lg = g.tensors[static_cast<size_t>(t.logits)];  // a copy: tensors grow below
  bool static_rows = lg.shape_known && lg.shape.size() >= 2 && lg.shape[0] == -1 && lg.shape.back() >= 1;
  for (size_t k = 1; static_rows && k < lg.shape.size(); ++k) static_rows = lg.shape[k] >= 1;
  if (!static_rows) {
    throw CompileError(g.path + ": autodiff: the loss takes logits of shape [N, ..., classes]; '" + lg.name + "' is " +
                       (lg.shape_known ? ir::shape_str(lg.shape) : std::string("of unknown shape")));
  }
  // Which values depend on a parameter (only they need gradients).
  std::vector<bool> needs(g.tensors.size(), false);
  for (size_t i = 0; i < g.tensors.size(); ++i) needs[i] = g.tensors[i].kind == ir::TensorKind::kParameter;
  for (const ir::Op& o : g.ops) {
    const bool any = std::any_of(o.inputs.begin(), o.inputs.end(), [&](int x) { return x >= 0 && needs[static_cast<size_t>(x)]; });
    for (int y : o.outputs) {
      if (y >= 0) needs[static_cast<size_t>(y)] = any;
    }
  }
  // The loss.
  std::vector<int64_t> rows(lg.shape.begin(), lg.shape.end() - 1);  // [N, ...]
  int64_t per = 1;
  for (size_t k = 1; k < rows.size(); ++k) per *= rows[k];
  t.labels = b.tensor(t.regression ? "targets" : "labels", ir::TensorKind::kInput, t.regression ? lg.shape : rows);
  g.tensors[static_cast<size_t>(t.labels)].elem_type = t.regression ? kOnnxFloat : kOnnxInt64;
  g.inputs.push_back(t.labels);
  // The loss per row (N rows of classes: per sample; [N, S, classes]: per token, S N of them).
  const auto lo = b.op(t.regression ? "MseLoss" : "SoftmaxXent", {t.logits, t.labels}, {{t.regression ? -1 : -per}, lg.shape}, ir::Role::kLoss, "loss");
  t.loss = lo[0];
  // Gradient contributions per value: (forward op, gradient tensor); per parameter: the ops that
  // will add into its momentum.
  std::map<int, std::vector<std::pair<int, int>>> contrib;
  struct ParamGrad {
    int op;  // the forward op
    std::string kind;
    std::vector<int> inputs;
    std::map<std::string, OnnxAttr> attrs;
  };
  std::map<int, std::vector<ParamGrad>> pgrad;
  contrib[t.logits].push_back({static_cast<int>(g.ops.size()) - 1, lo[1]});
  auto grad_of = [&](int v, const std::string& source) {
    auto& c = contrib[v];
    std::stable_sort(c.begin(), c.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
    int sum = c.front().second;
    for (size_t k = 1; k < c.size(); ++k) sum = b.op1("Add", {sum, c[k].second}, b.shape(v), ir::Role::kBackward, source + "/grad_sum");
    return sum;
  };
  std::map<std::string, std::vector<std::string>> missing;  // op kind -> nodes without a rule
  // The context each op class's gradient rule works through (compiler/ops/op_class.h).
  class Context : public ops::GradContext {
   public:
    Context(ir::Graph& g, Builder& b, const std::vector<bool>& needs, std::map<int, std::vector<std::pair<int, int>>>& contrib,
            std::map<int, std::vector<ParamGrad>>& pgrad, std::map<std::string, std::vector<std::string>>& missing)
        : m_g(g), m_b(b), m_needs(needs), m_contrib(contrib), m_pgrad(pgrad), m_missing(missing) {}
    void at(int op, std::vector<int> dys, const std::string& source, const std::string& node) {
      m_op = op;
      m_dys = std::move(dys);
      m_dy = m_dys.empty() ? -1 : m_dys[0];
      m_source = source;
      m_node = node;
    }
    const ir::Graph& graph() const override { return m_g; }
    int dy() const override { return m_dy; }
    int dy_at(size_t k) const override { return k < m_dys.size() ? m_dys[k] : -1; }
    bool wants(int t) const override {
      return t >= 0 && m_needs[static_cast<size_t>(t)] && m_g.tensors[static_cast<size_t>(t)].kind == ir::TensorKind::kValue;
    }
    bool is_param(int t) const override { return t >= 0 && m_g.tensors[static_cast<size_t>(t)].kind == ir::TensorKind::kParameter; }
    std::vector<int64_t> shape(int t) const override { return m_b.shape(t); }
    int emit(const std::string& kind, std::vector<int> inputs, const std::vector<int64_t>& shape, ops::Attrs attrs) override {
      return m_b.op1(kind, std::move(inputs), shape, ir::Role::kBackward, m_source, std::move(attrs));
    }
    void give(int t, int grad) override { m_contrib[t].push_back({m_op, grad}); }
    void param_grad(int p, const std::string& kind, std::vector<int> inputs, ops::Attrs attrs) override {
      m_pgrad[p].push_back({m_op, kind, std::move(inputs), std::move(attrs)});
    }
    void no_rule(const std::string& what) override { m_missing[what].push_back(m_node); }

   private:
    ir::Graph& m_g;
    Builder& m_b;
    const std::vector<bool>& m_needs;
    std::map<int, std::vector<std::pair<int, int>>>& m_contrib;
    std::map<int, std::vector<ParamGrad>>& m_pgrad;
    std::map<std::string, std::vector<std::string>>& m_missing;
    int m_op = -1, m_dy = -1;
    std::vector<int> m_dys;
    std::string m_source, m_node;
  };
  Context ctx(g, b, needs, contrib, pgrad, missing);
  for (int i = t.forward_ops - 1; i >= 0; --i) {
    const ir::Op o = g.ops[static_cast<size_t>(i)];  // a copy: ops grows below
    // The gradient of each output the loss depends on (-1 for the others: a Split's unused part).
    std::vector<int> dys(o.outputs.size(), -1);
    int dy = -1;
    for (size_t k = 0; k < o.outputs.size(); ++k) {
      const int y = o.outputs[k];
      if (y < 0 || !contrib.count(y)) continue;
      dys[k] = grad_of(y, src(o));
      if (dy < 0) dy = dys[k];
    }
    if (dy < 0) continue;  // nothing of the loss flows through it
    ctx.at(i, dys, src(o) + "/grad", src(o));
    const size_t before = missing.size() + std::accumulate(missing.begin(), missing.end(), size_t{0}, [](size_t n, const auto& m) { return n + m.second.size(); });
    if (const ops::OpClass* c = o.domain.empty() ? ops::find(o.kind) : nullptr) c->gradient(o, ctx);
    else ctx.no_rule(o.kind);
    const size_t after = missing.size() + std::accumulate(missing.begin(), missing.end(), size_t{0}, [](size_t n, const auto& m) { return n + m.second.size(); });
    if (after != before) {
      // Go on above it (with a stand-in gradient) so that every op without a rule is named.
      for (int x : o.inputs) {
        if (ctx.wants(x)) ctx.give(x, dy);
      }
    }
  }
  if (!missing.empty()) {
    std::string msg = g.path + ": autodiff: no gradient rule yet for";
    bool first = true;
    for (const auto& [kind, nodes] : missing) {
      msg += (first ? " " : "; ") + kind + " (" + std::to_string(nodes.size()) + ": '" + nodes.front() + "'" + (nodes.size() > 1 ? ", ..." : "") + ")";
      first = false;
    }
    throw CompileError(msg);
  }
  // Each parameter: its contributions into its momentum in forward order, then its update.
  for (size_t p = 0; p < forward.tensors.size(); ++p) {
    if (forward.tensors[p].kind != ir::TensorKind::kParameter) continue;
    TrainGraph::Param par;
    par.value = static_cast<int>(p);
    const std::string name = g.tensors[p].name;  // a copy: tensors grow below
    const std::vector<int64_t> shape = g.tensors[p].shape;
    const bool adam = optimizer == "adam";
    par.state = b.tensor((adam ? "exp_avg:" : "momentum:") + name, ir::TensorKind::kState, shape);
    if (adam) par.state2 = b.tensor("exp_avg_sq:" + name, ir::TensorKind::kState, shape);
    int v = adam ? b.op1("Zeros", {}, shape, ir::Role::kBackward, name + "/grad") : par.state;
    auto& list = pgrad[par.value];
    std::stable_sort(list.begin(), list.end(), [](const ParamGrad& x, const ParamGrad& y) { return x.op < y.op; });
    for (const ParamGrad& pg : list) {
      std::vector<int> in = pg.inputs;
      in.push_back(v);
      v = b.op1(pg.kind, in, shape, ir::Role::kBackward, name + "/grad", pg.attrs);
    }
    const auto up = adam ? b.op("AdamUpdate", {par.value, v, par.state, par.state2}, {shape, shape, shape}, ir::Role::kUpdate, name + "/update")
                         : b.op("SgdMomentum", {par.value, v}, {shape, shape}, ir::Role::kUpdate, name + "/update");
    par.new_value = up[0];
    par.new_state = up[1];
    if (adam) par.new_state2 = up[2];
    t.params.push_back(par);
  }
  if (t.params.empty()) throw CompileError(g.path + ": autodiff: the model has no parameter to train");
  g.outputs.push_back(t.loss);
  for (const auto& par : t.params) {
    g.outputs.push_back(par.new_value);
    g.outputs.push_back(par.new_state);
    if (par.new_state2 >= 0) g.outputs.push_back(par.new_state2);
  }
  passes::reindex(g);
  ir::verify(g);
  return t;
}

}  // namespace wafersim::compiler
