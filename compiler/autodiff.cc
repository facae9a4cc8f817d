#include "compiler/autodiff.h"

#include <algorithm>
#include <map>
#include <set>

#include "compiler/passes/editor.h"

namespace wafersim::compiler {
namespace {

class Builder {
 public:
  explicit Builder(ir::Graph& g) : m_g(g) {}

  int tensor(const std::string& base, ir::TensorKind kind, const std::vector<int64_t>& shape) {
    std::string name = base;
    for (int k = 1; m_g.by_name.count(name); ++k) name = base + "_" + std::to_string(k);
    ir::Tensor t;
    t.name = name;
    t.kind = kind;
    t.elem_type = kOnnxFloat;
    t.shape = shape;
    t.shape_known = true;
    m_g.tensors.push_back(std::move(t));
    return m_g.by_name[name] = static_cast<int>(m_g.tensors.size()) - 1;
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

OnnxAttr str_attr(const std::string& s) {
  OnnxAttr a;
  a.kind = OnnxAttr::kString;
  a.s = s;
  return a;
}

std::string src(const ir::Op& o) { return o.sources.empty() ? o.kind : o.sources.front(); }

}  // namespace

TrainGraph autodiff(const ir::Graph& forward) {
  TrainGraph t;
  t.g = forward;
  ir::Graph& g = t.g;
  t.forward_ops = static_cast<int>(g.ops.size());
  Builder b(g);
  // The data input: the first float input; the logits: the first output, with a Softmax or
  // LogSoftmax over its last axis absorbed by the loss.
  for (int i : g.inputs) {
    if (g.tensors[static_cast<size_t>(i)].elem_type == kOnnxFloat) {
      t.data = i;
      break;
    }
  }
  if (t.data < 0 || g.outputs.empty()) throw CompileError(g.path + ": autodiff: the graph needs a float input and an output");
  t.logits = g.outputs[0];
  if (const int p = g.tensors[static_cast<size_t>(t.logits)].producer;
      p >= 0 && (g.ops[static_cast<size_t>(p)].kind == "Softmax" || g.ops[static_cast<size_t>(p)].kind == "LogSoftmax") &&
      g.ops[static_cast<size_t>(p)].inputs[0] >= 0) {
    t.logits = g.ops[static_cast<size_t>(p)].inputs[0];
  }
  const ir::Tensor lg = g.tensors[static_cast<size_t>(t.logits)];  // a copy: tensors grow below
  if (!lg.shape_known || lg.shape.size() != 2 || lg.shape[0] != -1 || lg.shape[1] < 1) {
    throw CompileError(g.path + ": autodiff: the loss takes logits of shape [N, classes]; '" + lg.name + "' is " +
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
  t.labels = b.tensor("labels", ir::TensorKind::kInput, {-1});
  g.tensors[static_cast<size_t>(t.labels)].elem_type = kOnnxInt64;
  g.inputs.push_back(t.labels);
  const auto lo = b.op("SoftmaxXent", {t.logits, t.labels}, {{-1}, lg.shape}, ir::Role::kLoss, "loss");
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
  for (int i = t.forward_ops - 1; i >= 0; --i) {
    const ir::Op o = g.ops[static_cast<size_t>(i)];  // a copy: ops grows below
    const int y = o.outputs.empty() ? -1 : o.outputs[0];
    if (y < 0 || !contrib.count(y)) continue;  // nothing of the loss flows through it
    const int dy = grad_of(y, src(o));
    const std::string s = src(o) + "/grad";
    auto give = [&](int x, int dx) { contrib[x].push_back({i, dx}); };
    auto wants = [&](int x) { return x >= 0 && needs[static_cast<size_t>(x)] && g.tensors[static_cast<size_t>(x)].kind == ir::TensorKind::kValue; };
    auto is_param = [&](int x) { return x >= 0 && g.tensors[static_cast<size_t>(x)].kind == ir::TensorKind::kParameter; };
    if (o.kind == "Dense") {
      const OnnxAttr* act = o.attr("activation");
      const std::string a = act ? act->s : "none";
      const OnnxAttr* al = o.attr("alpha");
      const OnnxAttr* be = o.attr("beta");
      if ((al && al->f != 1) || (be && be->f != 1 && o.inputs[2] >= 0)) {
        missing["Dense with Gemm's alpha or beta other than 1"].push_back(src(o));
        if (wants(o.inputs[0])) give(o.inputs[0], dy);
        continue;
      }
      int dz = dy;
      if (a != "none") {
        std::map<std::string, OnnxAttr> at = {{"activation", *act}};
        if (const OnnxAttr* al = o.attr("activation_alpha")) at["activation_alpha"] = *al;
        dz = b.op1("ActivationGrad", {-1, y, dy}, b.shape(y), ir::Role::kBackward, s, at);
      }
      const int x = o.inputs[0], w = o.inputs[1], bias = o.inputs[2];
      std::map<std::string, OnnxAttr> at;
      for (const char* k : {"transB", "in_tiles", "out_tiles"}) {
        if (const OnnxAttr* v = o.attr(k)) at[k] = *v;
      }
      if (wants(x)) give(x, b.op1("DenseGradInput", {dz, w}, b.shape(x), ir::Role::kBackward, s, at));
      if (is_param(w)) pgrad[w].push_back({i, "DenseGradWeight", {dz, x}, at});
      if (is_param(bias)) pgrad[bias].push_back({i, "DenseGradBias", {dz}, {}});
      continue;
    }
    if (o.kind == "Add") {
      for (int k = 0; k < 2; ++k) {
        const int x = o.inputs[static_cast<size_t>(k)];
        if (k == 1 && x == o.inputs[0]) {  // x + x
          if (wants(x)) give(x, dy);
          continue;
        }
        const bool same = b.shape(x) == b.shape(y);
        if (wants(x)) give(x, same ? dy : b.op1("SumTo", {dy}, b.shape(x), ir::Role::kBackward, s));
        if (is_param(x)) pgrad[x].push_back({i, "SumToGrad", {dy}, {}});
      }
      continue;
    }
    if (o.kind == "Relu" || o.kind == "Sigmoid" || o.kind == "Tanh" || o.kind == "LeakyRelu" || o.kind == "Gelu") {
      std::string a = o.kind == "Relu" ? "relu" : o.kind == "Sigmoid" ? "sigmoid" : o.kind == "Tanh" ? "tanh" : o.kind == "LeakyRelu" ? "leaky_relu" : "gelu";
      std::map<std::string, OnnxAttr> at;
      if (o.kind == "Gelu") {
        const OnnxAttr* ap = o.attr("approximate");
        if (ap && ap->s == "tanh") a = "gelu_tanh";
      }
      if (o.kind == "LeakyRelu") {
        OnnxAttr al;
        al.kind = OnnxAttr::kFloat;
        al.f = o.attr("alpha") ? o.attr("alpha")->f : 0.01f;
        at["activation_alpha"] = al;
      }
      at["activation"] = str_attr(a);
      if (wants(o.inputs[0])) give(o.inputs[0], b.op1("ActivationGrad", {o.inputs[0], y, dy}, b.shape(y), ir::Role::kBackward, s, at));
      continue;
    }
    if (o.kind == "LayerNorm") {
      const int x = o.inputs[0], scale = o.inputs[1], bias = o.inputs[2];
      std::map<std::string, OnnxAttr> at = {{"axis", *o.attr("axis")}, {"epsilon", *o.attr("epsilon")}};
      if (wants(x)) give(x, b.op1("LayerNormGrad", {x, scale, dy}, b.shape(x), ir::Role::kBackward, s, at));
      if (is_param(scale)) pgrad[scale].push_back({i, "LayerNormGradScale", {x, dy}, at});
      if (is_param(bias)) pgrad[bias].push_back({i, "LayerNormGradBias", {dy}, at});
      continue;
    }
    if (o.kind == "Flatten" || o.kind == "Reshape" || o.kind == "Identity" || o.kind == "Dropout") {
      if (wants(o.inputs[0])) give(o.inputs[0], b.op1("ReshapeAs", {dy}, b.shape(o.inputs[0]), ir::Role::kBackward, s));
      continue;
    }
    missing[o.kind].push_back(src(o));
    // Go on above it (with a stand-in gradient) so that every op without a rule is named.
    for (int x : o.inputs) {
      if (wants(x)) give(x, dy);
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
    par.state = b.tensor("momentum:" + name, ir::TensorKind::kState, shape);
    int v = par.state;
    auto& list = pgrad[par.value];
    std::stable_sort(list.begin(), list.end(), [](const ParamGrad& x, const ParamGrad& y) { return x.op < y.op; });
    for (const ParamGrad& pg : list) {
      std::vector<int> in = pg.inputs;
      in.push_back(v);
      v = b.op1(pg.kind, in, shape, ir::Role::kBackward, name + "/grad", pg.attrs);
    }
    const auto up = b.op("SgdMomentum", {par.value, v}, {shape, shape}, ir::Role::kUpdate, name + "/update");
    par.new_value = up[0];
    par.new_state = up[1];
    t.params.push_back(par);
  }
  if (t.params.empty()) throw CompileError(g.path + ": autodiff: the model has no parameter to train");
  g.outputs.push_back(t.loss);
  for (const auto& par : t.params) {
    g.outputs.push_back(par.new_value);
    g.outputs.push_back(par.new_state);
  }
  passes::reindex(g);
  ir::verify(g);
  return t;
}

}  // namespace wafersim::compiler
