#include "compiler/ir/graph.h"

#include <algorithm>
#include <numeric>
#include <set>

namespace wafersim::compiler::ir {
namespace {

std::string dims_str(const std::vector<int64_t>& d) { return shape_str(d); }

std::string op_ref(const Op& o) { return "op '" + (o.sources.empty() ? std::string("?") : o.sources.front()) + "' (" + o.kind + ")"; }

int64_t int_attr(const Op& o, const char* key, int64_t dflt) {
  const OnnxAttr* a = o.attr(key);
  return a && a->kind == OnnxAttr::kInt ? a->i : dflt;
}

std::vector<int64_t> ints_attr(const Op& o, const char* key) {
  const OnnxAttr* a = o.attr(key);
  return a && a->kind == OnnxAttr::kInts ? a->ints : std::vector<int64_t>{};
}

// An axis attribute in [-rank, rank) as a dimension index; false if out of range.
bool norm_axis(int64_t axis, size_t rank, size_t* out) {
  const auto r = static_cast<int64_t>(rank);
  if (axis < -r || axis >= r) return false;
  *out = static_cast<size_t>(axis < 0 ? axis + r : axis);
  return true;
}

// Numpy broadcasting of two shapes; the symbolic batch (-1) meets 1 or itself. False where a
// symbolic dimension meets a number other than 1 (its value is not known here).
bool broadcast(const std::vector<int64_t>& a, const std::vector<int64_t>& b, std::vector<int64_t>* out, bool* clash) {
  const size_t n = std::max(a.size(), b.size());
  out->assign(n, 1);
  *clash = false;
  for (size_t i = 0; i < n; ++i) {
    const int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x == y || y == 1) (*out)[i] = x;
    else if (x == 1) (*out)[i] = y;
    else if (x < 0 || y < 0) return false;
    else {
      *clash = true;
      return false;
    }
  }
  return true;
}

// The number of elements of dimensions [from, to): `coeff` times N to the power `sym` (each
// symbolic dimension d < 0 is (-d) N).
struct Count {
  int64_t coeff = 1;
  int sym = 0;
};
Count count(const std::vector<int64_t>& d, size_t from, size_t to) {
  Count c;
  for (size_t i = from; i < to; ++i) {
    if (d[i] < 0) {
      c.coeff *= -d[i];
      ++c.sym;
    } else {
      c.coeff *= d[i];
    }
  }
  return c;
}

// A count of at most one N as a dimension (false: N squared, not a shape the IR tracks).
bool as_dim(const Count& c, int64_t* d) {
  if (c.sym > 1) return false;
  *d = c.sym ? -c.coeff : c.coeff;
  return true;
}

// The integer values of a constant 1-D (or scalar) tensor, each with its batch multiple.
bool const_ints(const Graph& g, int t, std::vector<int64_t>* v, std::vector<int64_t>* mult) {
  if (t < 0) return false;
  const Tensor& x = g.tensors[static_cast<size_t>(t)];
  if (!x.data || x.data->i64.size() != static_cast<size_t>(std::max<int64_t>(x.data->numel(), 0))) return false;
  if (x.data->dims.size() > 1) return false;
  *v = x.data->i64;
  mult->assign(v->size(), 0);
  if (x.batch_multiple.size() == v->size()) *mult = x.batch_multiple;
  return true;
}


const std::set<std::string>& same_shape_ops() {
  static const std::set<std::string> s = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Reciprocal",
                                          "Neg", "Abs", "Identity", "Elu", "Selu", "Softplus", "Softsign", "HardSigmoid",
                                          "HardSwish", "Clip", "Silu", "Mish", "Gelu", "Softmax", "LogSoftmax", "Cast", "Floor", "Ceil", "Not",
                                          "BatchNormalization", "LayerNormalization", "Dropout", "InstanceNormalization",
                                          "LayerNorm"};
  return s;
}

const std::set<std::string>& broadcast_ops() {
  static const std::set<std::string> s = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal", "Less", "Greater",
                                          "LessOrEqual", "GreaterOrEqual", "And", "Or", "Where", "Sum", "Mean"};
  return s;
}

// Output spatial size of a window op along one dimension.
// `pad` both sides' pads, `pad_begin` the first side's. With ceil_mode the last window must
// start inside the input or its first side's padding (torch's rule, and ONNX's since opset 19).
int64_t window_out(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t pad_begin, int64_t dil, bool ceil_mode) {
  const int64_t span = dil * (k - 1) + 1, num = in + pad - span;
  if (num < 0) return -2;  // the window does not fit
  int64_t out = (ceil_mode ? (num + stride - 1) / stride : num / stride) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad_begin) --out;
  return out;
}

}  // namespace

bool ints_of(const Graph& g, const Op& o, const char* key, size_t input, std::vector<int64_t>* v, bool* given) {
  *given = false;
  if (const OnnxAttr* a = o.attr(key); a && a->kind == OnnxAttr::kInts) {
    *v = a->ints;
    *given = true;
    return true;
  }
  if (o.inputs.size() > input && o.inputs[input] >= 0) {
    std::vector<int64_t> m;
    if (!const_ints(g, o.inputs[input], v, &m)) return false;
    for (int64_t x : m) {
      if (x != 0) return false;
    }
    *given = true;
  }
  return true;
}

OnnxAttr attr_int(int64_t v) {
  OnnxAttr a;
  a.kind = OnnxAttr::kInt;
  a.i = v;
  return a;
}

OnnxAttr attr_float(float v) {
  OnnxAttr a;
  a.kind = OnnxAttr::kFloat;
  a.f = v;
  return a;
}

OnnxAttr attr_str(const std::string& s) {
  OnnxAttr a;
  a.kind = OnnxAttr::kString;
  a.s = s;
  return a;
}

OnnxAttr attr_ints(std::vector<int64_t> v) {
  OnnxAttr a;
  a.kind = OnnxAttr::kInts;
  a.ints = std::move(v);
  return a;
}

std::string shape_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    s += i ? ", " : "";
    s += d[i] == -1 ? std::string("N") : d[i] < 0 ? std::to_string(-d[i]) + "N" : std::to_string(d[i]);
  }
  return s + "]";
}

const char* tensor_kind_name(TensorKind k) {
  switch (k) {
    case TensorKind::kInput: return "input";
    case TensorKind::kParameter: return "parameter";
    case TensorKind::kConstant: return "constant";
    case TensorKind::kState: return "state";
    default: return "value";
  }
}

std::string Graph::summary() const {
  std::map<std::string, int> kinds;
  for (const Op& o : ops) ++kinds[o.kind];
  std::vector<std::pair<std::string, int>> byc(kinds.begin(), kinds.end());
  std::stable_sort(byc.begin(), byc.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string s = std::to_string(ops.size()) + " op" + (ops.size() == 1 ? "" : "s") + " (";
  for (size_t i = 0; i < byc.size(); ++i) s += (i ? ", " : "") + std::to_string(byc[i].second) + " " + byc[i].first;
  int n[5] = {0, 0, 0, 0, 0}, unknown = 0;
  for (const Tensor& t : tensors) {
    ++n[static_cast<int>(t.kind)];
    unknown += t.kind == TensorKind::kValue && !t.shape_known;
  }
  s += "), " + std::to_string(tensors.size()) + " tensors (" + std::to_string(n[0]) + " input" + (n[0] == 1 ? "" : "s") + ", " +
       std::to_string(n[1]) + " parameter" + (n[1] == 1 ? "" : "s") + ", " + std::to_string(n[2]) + " constant" +
       (n[2] == 1 ? "" : "s") + ", " + std::to_string(n[3]) + " value" + (n[3] == 1 ? "" : "s") +
       (n[4] ? ", " + std::to_string(n[4]) + " state" + (n[4] == 1 ? "" : "s") : std::string()) + ")";
  if (unknown) s += "; " + std::to_string(unknown) + " value shape" + (unknown == 1 ? "" : "s") + " known only after constant folding";
  return s;
}

Graph from_onnx(const OnnxModel& m) {
  Graph g;
  g.path = m.path;
  g.opset = m.opset;
  auto add = [&](const std::string& name, TensorKind kind) -> int {
    if (g.by_name.count(name)) throw CompileError(m.path + ": value '" + name + "' is given twice");
    Tensor t;
    t.name = name;
    t.kind = kind;
    g.tensors.push_back(std::move(t));
    return g.by_name[name] = static_cast<int>(g.tensors.size()) - 1;
  };
  // The batch: the data input's first dimension, by the symbol ONNX's inference carries
  // wherever it moves. A value's dimension with that symbol is N; dimension 0 of a graph input,
  // or of any value when the input names no symbol, is N too (as it always was); any other
  // unknown dimension leaves the shape unknown (constant folding gives it).
  std::string batch_sym;
  for (const OnnxValue& v : m.inputs) {
    if (v.elem_type == kOnnxFloat && !v.dims.empty()) {
      batch_sym = v.dim_params.empty() ? "" : v.dim_params[0];
      break;
    }
  }
  auto set_shape = [&](Tensor& t, const OnnxValue& v, bool input) {
    t.elem_type = v.elem_type;
    t.shape = v.dims;
    t.shape_known = v.has_shape;
    for (size_t i = 0; i < v.dims.size(); ++i) {
      if (v.dims[i] >= 0) continue;
      const std::string& p = i < v.dim_params.size() ? v.dim_params[i] : std::string();
      const bool batch = (!batch_sym.empty() && p == batch_sym) || (i == 0 && (input || batch_sym.empty()));
      t.shape[i] = -1;
      t.shape_known = t.shape_known && batch;
    }
  };
  for (const OnnxValue& v : m.inputs) {
    const int i = add(v.name, TensorKind::kInput);
    set_shape(g.tensors[static_cast<size_t>(i)], v, true);
    g.inputs.push_back(i);
  }
  // Initializers, then Constant nodes' values (import_onnx keeps both in `initializers`).
  std::set<std::string> inits(m.initializer_order.begin(), m.initializer_order.end());
  for (const auto& [name, t] : m.initializers) {
    const bool param = inits.count(name) && t.elem_type == kOnnxFloat;
    Tensor& x = g.tensors[static_cast<size_t>(add(name, param ? TensorKind::kParameter : TensorKind::kConstant))];
    x.elem_type = t.elem_type;
    x.shape = t.dims;
    x.shape_known = true;
    x.data = &t;
  }
  std::map<std::string, const OnnxValue*> known;
  for (const auto& [name, v] : m.value_info) known[name] = &v;
  for (const OnnxValue& v : m.outputs) known[v.name] = &v;
  for (const OnnxNode& n : m.nodes) {
    Op o;
    o.kind = n.op_type;
    o.domain = n.domain == "ai.onnx" ? "" : n.domain;
    o.attrs = n.attrs;
    o.sources.push_back(n.name);
    const int index = static_cast<int>(g.ops.size());
    for (const std::string& in : n.inputs) {
      if (in.empty()) {
        o.inputs.push_back(-1);
        continue;
      }
      const int t = g.find(in);
      if (t < 0) throw CompileError(m.path + ": node '" + n.name + "' reads '" + in + "', which no earlier node, input or initializer gives");
      o.inputs.push_back(t);
      auto& c = g.tensors[static_cast<size_t>(t)].consumers;
      if (c.empty() || c.back() != index) c.push_back(index);
    }
    for (const std::string& out : n.outputs) {
      if (out.empty()) {
        o.outputs.push_back(-1);
        continue;
      }
      const int t = add(out, TensorKind::kValue);
      Tensor& x = g.tensors[static_cast<size_t>(t)];
      x.producer = index;
      if (auto it = known.find(out); it != known.end()) set_shape(x, *it->second, false);
      o.outputs.push_back(t);
    }
    g.ops.push_back(std::move(o));
  }
  for (const OnnxValue& v : m.outputs) {
    const int t = g.find(v.name);
    if (t < 0) throw CompileError(m.path + ": graph output '" + v.name + "' is not produced by any node (nor an input or initializer)");
    g.outputs.push_back(t);
  }
  return g;
}

bool infer_output_shape(const Graph& g, const Op& o, int k, std::vector<int64_t>* shape) {
  std::vector<const std::vector<int64_t>*> in;
  for (int t : o.inputs) {
    if (t < 0) {
      in.push_back(nullptr);
      continue;
    }
    const Tensor& x = g.tensors[static_cast<size_t>(t)];
    if (!x.shape_known) return false;
    in.push_back(&x.shape);
  }
  auto need = [&](size_t n) { return in.size() >= n && std::all_of(in.begin(), in.begin() + static_cast<long>(n), [](auto* p) { return p; }); };
  auto bad = [&](const std::string& why) { return CompileError(op_ref(o) + ": " + why); };
  if (!o.domain.empty()) return false;
  const std::string& op = o.kind;
  if (same_shape_ops().count(op)) {
    if (k != 0 || !need(1)) return false;
    *shape = *in[0];
    return true;
  }
  if (broadcast_ops().count(op)) {
    if (k != 0 || in.empty() || !need(in.size())) return false;
    std::vector<int64_t> s = *in[0];
    for (size_t i = 1; i < in.size(); ++i) {
      std::vector<int64_t> r;
      bool clash = false;
      if (!broadcast(s, *in[i], &r, &clash)) {
        if (clash) throw bad("shapes " + dims_str(s) + " and " + dims_str(*in[i]) + " do not broadcast");
        return false;
      }
      s = r;
    }
    *shape = s;
    return true;
  }
  if (op == "Gemm") {
    if (k != 0 || !need(2)) return false;
    const auto &a = *in[0], &b = *in[1];
    if (a.size() != 2 || b.size() != 2) throw bad("Gemm takes 2-D operands, got " + dims_str(a) + " and " + dims_str(b));
    const bool ta = int_attr(o, "transA", 0) != 0, tb = int_attr(o, "transB", 0) != 0;
    const int64_t M = ta ? a[1] : a[0], Ka = ta ? a[0] : a[1], Kb = tb ? b[1] : b[0], N = tb ? b[0] : b[1];
    if (Ka >= 0 && Kb >= 0 && Ka != Kb) throw bad("inner dimensions " + std::to_string(Ka) + " and " + std::to_string(Kb) + " differ");
    *shape = {M, N};
    return true;
  }
  if (op == "MatMul") {
    if (k != 0 || !need(2)) return false;
    std::vector<int64_t> a = *in[0], b = *in[1];
    if (a.empty() || b.empty()) throw bad("MatMul of a scalar");
    const bool va = a.size() == 1, vb = b.size() == 1;
    if (va) a.insert(a.begin(), 1);
    if (vb) b.push_back(1);
    const int64_t Ka = a.back(), Kb = b[b.size() - 2];
    if (Ka >= 0 && Kb >= 0 && Ka != Kb) throw bad("inner dimensions " + std::to_string(Ka) + " and " + std::to_string(Kb) + " differ");
    std::vector<int64_t> batch;
    bool clash = false;
    if (!broadcast({a.begin(), a.end() - 2}, {b.begin(), b.end() - 2}, &batch, &clash)) {
      if (clash) throw bad("batch dimensions of " + dims_str(*in[0]) + " and " + dims_str(*in[1]) + " do not broadcast");
      return false;
    }
    if (!va) batch.push_back(a[a.size() - 2]);
    if (!vb) batch.push_back(b.back());
    *shape = batch;
    return true;
  }
  if (op == "Pad") {  // constant pads (the attribute before opset 11, else input 1): begins, then ends
    if (k != 0 || !need(1)) return false;
    std::vector<int64_t> p;
    if (const OnnxAttr* a = o.attr("pads"); a && a->kind == OnnxAttr::kInts) {
      p = a->ints;
    } else if (o.inputs.size() > 1 && o.inputs[1] >= 0) {
      const Tensor& t = g.tensors[static_cast<size_t>(o.inputs[1])];
      if (!t.data || t.symbolic()) return false;
      p = t.data->i64;
    }
    const auto& d = *in[0];
    if (p.size() != 2 * d.size()) return false;
    std::vector<int64_t> r = d;
    for (size_t i = 0; i < d.size(); ++i) {
      if (p[i] == 0 && p[i + d.size()] == 0) continue;
      if (d[i] < 0) return false;  // a padded batch
      r[i] = d[i] + p[i] + p[i + d.size()];
      if (r[i] < 0) throw bad("pads " + dims_str(p) + " leave nothing of " + dims_str(d));
    }
    *shape = r;
    return true;
  }
  if (op == "Flatten") {
    if (k != 0 || !need(1)) return false;
    size_t axis = 0;
    const auto& d = *in[0];
    const int64_t ax = int_attr(o, "axis", 1);
    if (ax == static_cast<int64_t>(d.size())) axis = d.size();
    else if (!norm_axis(ax, d.size(), &axis)) throw bad("axis " + std::to_string(ax) + " outside the rank " + std::to_string(d.size()));
    int64_t d0 = 0, d1 = 0;
    if (!as_dim(count(d, 0, axis), &d0) || !as_dim(count(d, axis, d.size()), &d1)) return false;
    *shape = {d0, d1};
    return true;
  }
  if (op == "Reshape") {
    if (k != 0 || !need(1) || o.inputs.size() < 2 || o.inputs[1] < 0) return false;
    std::vector<int64_t> target, mult;
    if (!const_ints(g, o.inputs[1], &target, &mult)) return false;  // a computed shape: after constant folding
    const auto& d = *in[0];
    const bool allowzero = int_attr(o, "allowzero", 0) != 0;
    std::vector<int64_t> out(target.size(), 0);
    int infer = -1;
    Count placed;
    std::string target_str = "[";
    for (size_t i = 0; i < target.size(); ++i) {
      target_str += (i ? ", " : "") + (mult[i] ? (target[i] ? std::string("?") : std::to_string(mult[i]) + "N") : std::to_string(target[i]));
      if (mult[i] != 0) {
        if (target[i] != 0 || mult[i] < 0) return false;  // not a dimension: an affine value of the batch
        out[i] = -mult[i];
      } else if (target[i] == 0 && !allowzero) {
        if (i >= d.size()) throw bad("target dimension " + std::to_string(i) + " copies a dimension the input does not have");
        out[i] = d[i];
      } else if (target[i] == -1) {
        if (infer >= 0) throw bad("two -1 in the target shape");
        infer = static_cast<int>(i);
        continue;
      } else if (target[i] < -1) {
        throw bad("target dimension " + std::to_string(target[i]) + " is negative");
      } else {
        out[i] = target[i];
      }
      if (out[i] < 0) {
        placed.coeff *= -out[i];
        ++placed.sym;
      } else {
        placed.coeff *= out[i];
      }
    }
    target_str += "]";
    const Count total = count(d, 0, d.size());
    const bool symbolic = total.sym > 0 || placed.sym > 0;
    if (infer >= 0) {
      const int sym = total.sym - placed.sym;
      if (placed.coeff == 0 || total.coeff % placed.coeff != 0 || sym < 0 || sym > 1) {
        if (symbolic) return false;
        throw bad("cannot reshape " + dims_str(d) + " to " + target_str);
      }
      out[static_cast<size_t>(infer)] = sym ? -(total.coeff / placed.coeff) : total.coeff / placed.coeff;
    } else if (placed.coeff != total.coeff || placed.sym != total.sym) {
      if (symbolic) return false;
      throw bad("cannot reshape " + dims_str(d) + " (" + std::to_string(total.coeff) + " elements) to " + target_str);
    }
    *shape = out;
    return true;
  }
  if (op == "Transpose") {
    if (k != 0 || !need(1)) return false;
    const auto& d = *in[0];
    std::vector<int64_t> perm = ints_attr(o, "perm");
    if (perm.empty()) {
      perm.resize(d.size());
      std::iota(perm.rbegin(), perm.rend(), 0);
    }
    if (perm.size() != d.size()) throw bad("perm of " + std::to_string(perm.size()) + " axes for rank " + std::to_string(d.size()));
    shape->clear();
    for (int64_t p : perm) {
      size_t a = 0;
      if (!norm_axis(p, d.size(), &a)) throw bad("perm axis " + std::to_string(p) + " outside the rank");
      shape->push_back(d[a]);
    }
    return true;
  }
  if (op == "Concat") {
    if (k != 0 || in.empty() || !need(in.size())) return false;
    size_t axis = 0;
    if (!norm_axis(int_attr(o, "axis", 0), in[0]->size(), &axis)) throw bad("axis outside the rank");
    std::vector<int64_t> s = *in[0];
    for (size_t i = 1; i < in.size(); ++i) {
      if (in[i]->size() != s.size()) throw bad("inputs of ranks " + std::to_string(s.size()) + " and " + std::to_string(in[i]->size()));
      if (s[axis] < 0 || (*in[i])[axis] < 0) return false;
      s[axis] += (*in[i])[axis];
    }
    *shape = s;
    return true;
  }
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax" || op == "ReduceMin" || op == "ReduceProd") {
    if (k != 0 || !need(1)) return false;
    std::vector<int64_t> axes = ints_attr(o, "axes");
    if (o.inputs.size() > 1 && o.inputs[1] >= 0) {  // ReduceSum from opset 13: axes as an input
      const Tensor& a = g.tensors[static_cast<size_t>(o.inputs[1])];
      if (!a.data) return false;
      axes = a.data->i64;
    }
    const auto& d = *in[0];
    const bool keep = int_attr(o, "keepdims", 1) != 0;
    std::vector<bool> red(d.size(), axes.empty() && int_attr(o, "noop_with_empty_axes", 0) == 0);
    for (int64_t ax : axes) {
      size_t a = 0;
      if (!norm_axis(ax, d.size(), &a)) throw bad("axis " + std::to_string(ax) + " outside the rank");
      red[a] = true;
    }
    shape->clear();
    for (size_t i = 0; i < d.size(); ++i) {
      if (!red[i]) shape->push_back(d[i]);
      else if (keep) shape->push_back(1);
    }
    return true;
  }
  if (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
    if (k != 0 || !need(1) || in[0]->size() < 3) return false;
    *shape = *in[0];
    for (size_t i = 2; i < shape->size(); ++i) (*shape)[i] = 1;
    return true;
  }
  if (op == "Conv" || op == "MaxPool" || op == "AveragePool") {
    if (k != 0 || !need(op == "Conv" ? 2 : 1)) return false;
    const auto& x = *in[0];
    if (x.size() < 3) throw bad("input " + dims_str(x) + " has no spatial dimensions");
    const size_t sp = x.size() - 2;
    const OnnxAttr* ap = o.attr("auto_pad");
    if (ap && ap->s != "NOTSET" && !ap->s.empty()) return false;
    std::vector<int64_t> kernel = ints_attr(o, "kernel_shape"), strides = ints_attr(o, "strides"), pads = ints_attr(o, "pads"),
                         dil = ints_attr(o, "dilations");
    int64_t channels = x[1];
    if (op == "Conv") {
      const auto& w = *in[1];
      if (w.size() != x.size()) throw bad("weight " + dims_str(w) + " and input " + dims_str(x) + " differ in rank");
      const int64_t group = int_attr(o, "group", 1);
      if (x[1] >= 0 && w[1] * group != x[1]) {
        throw bad("weight " + dims_str(w) + " expects " + std::to_string(w[1] * group) + " input channels, the input has " + std::to_string(x[1]));
      }
      channels = w[0];
      if (kernel.empty()) kernel.assign(w.begin() + 2, w.end());
    }
    if (kernel.size() != sp) return false;
    strides.resize(sp, 1);
    dil.resize(sp, 1);
    pads.resize(2 * sp, 0);
    const bool ceil_mode = int_attr(o, "ceil_mode", 0) != 0;
    *shape = {x[0], channels};
    for (size_t i = 0; i < sp; ++i) {
      if (x[2 + i] < 0) return false;
      const int64_t v = window_out(x[2 + i], kernel[i], strides[i], pads[i] + pads[sp + i], pads[i], dil[i], ceil_mode);
      if (v < 1) throw bad("a window of " + std::to_string(kernel[i]) + " does not fit dimension " + std::to_string(x[2 + i]));
      shape->push_back(v);
    }
    return true;
  }
  if (op == "Conv2d") {  // fused Conv (+ bias + activation): the Conv's rule
    Op c = o;
    c.kind = "Conv";
    return infer_output_shape(g, c, k, shape);
  }
  if (op == "Dense") {  // fused Gemm / MatMul + bias + activation: x[..., K] -> x[..., out]
    if (k != 0 || !need(2)) return false;
    const auto &x = *in[0], &w = *in[1];
    if (x.empty() || w.size() != 2) throw bad("Dense of " + dims_str(x) + " by " + dims_str(w));
    const bool out_in = int_attr(o, "transB", 0) != 0;
    const int64_t K = out_in ? w[1] : w[0], out = out_in ? w[0] : w[1];
    if (x.back() != K) throw bad("input " + dims_str(x) + " against weight " + dims_str(w) + ": inner dimensions differ");
    *shape = x;
    shape->back() = out;
    return true;
  }
  if (op == "Shape") {
    if (k != 0 || !need(1)) return false;
    const auto r = static_cast<int64_t>(in[0]->size());
    int64_t start = int_attr(o, "start", 0), end = int_attr(o, "end", r);
    start = std::clamp(start < 0 ? start + r : start, int64_t{0}, r);
    end = std::clamp(end < 0 ? end + r : end, int64_t{0}, r);
    *shape = {std::max(int64_t{0}, end - start)};
    return true;
  }
  if (op == "Unsqueeze" || op == "Squeeze") {
    if (k != 0 || !need(1)) return false;
    std::vector<int64_t> axes;
    bool given = false;
    if (!ints_of(g, o, "axes", 1, &axes, &given)) return false;
    const auto& d = *in[0];
    if (op == "Unsqueeze") {
      if (!given) throw bad("no axes");
      const size_t rank = d.size() + axes.size();
      std::vector<bool> at(rank, false);
      for (int64_t ax : axes) {
        size_t a = 0;
        if (!norm_axis(ax, rank, &a) || at[a]) throw bad("axis " + std::to_string(ax) + " outside the rank or given twice");
        at[a] = true;
      }
      shape->clear();
      size_t j = 0;
      for (size_t i = 0; i < rank; ++i) shape->push_back(at[i] ? 1 : d[j++]);
      return true;
    }
    std::vector<bool> drop(d.size(), false);
    if (!given) {
      for (size_t i = 0; i < d.size(); ++i) drop[i] = d[i] == 1;
    }
    for (int64_t ax : axes) {
      size_t a = 0;
      if (!norm_axis(ax, d.size(), &a)) throw bad("axis " + std::to_string(ax) + " outside the rank");
      if (d[a] != 1) throw bad("squeezes dimension " + std::to_string(a) + " of " + dims_str(d) + ", which is not 1");
      drop[a] = true;
    }
    shape->clear();
    for (size_t i = 0; i < d.size(); ++i) {
      if (!drop[i]) shape->push_back(d[i]);
    }
    return true;
  }
  if (op == "Gather") {
    if (k != 0 || !need(2)) return false;
    const auto &d = *in[0], &idx = *in[1];
    size_t axis = 0;
    if (!norm_axis(int_attr(o, "axis", 0), d.size(), &axis)) throw bad("axis outside the rank " + std::to_string(d.size()));
    shape->assign(d.begin(), d.begin() + static_cast<long>(axis));
    shape->insert(shape->end(), idx.begin(), idx.end());
    shape->insert(shape->end(), d.begin() + static_cast<long>(axis) + 1, d.end());
    return true;
  }
  if (op == "Slice") {
    if (k != 0 || !need(1)) return false;
    std::vector<int64_t> starts, ends, axes, steps;
    bool gs = false, ge = false, ga = false, gst = false;
    if (!ints_of(g, o, "starts", 1, &starts, &gs) || !ints_of(g, o, "ends", 2, &ends, &ge) || !ints_of(g, o, "axes", 3, &axes, &ga) ||
        !ints_of(g, o, "steps", 4, &steps, &gst) || !gs || !ge) {
      return false;
    }
    const auto& d = *in[0];
    if (!ga) {
      axes.resize(starts.size());
      std::iota(axes.begin(), axes.end(), 0);
    }
    if (!gst) steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
      throw bad("starts, ends, axes and steps differ in length");
    }
    *shape = d;
    for (size_t i = 0; i < starts.size(); ++i) {
      size_t a = 0;
      if (!norm_axis(axes[i], d.size(), &a)) throw bad("axis " + std::to_string(axes[i]) + " outside the rank");
      const int64_t step = steps[i];
      if (step == 0) throw bad("a step of 0");
      const int64_t n = d[a];
      if (n < 0) {  // the batch: only the whole of it
        if (step == 1 && starts[i] == 0 && ends[i] >= (int64_t{1} << 31)) continue;
        return false;
      }
      auto clampi = [&](int64_t v, int64_t lo, int64_t hi) { return std::clamp(v < 0 ? v + n : v, lo, hi); };
      int64_t len = 0;
      if (step > 0) {
        const int64_t b = clampi(starts[i], 0, n), e = clampi(ends[i], 0, n);
        len = e > b ? (e - b + step - 1) / step : 0;
      } else {
        const int64_t b = clampi(starts[i], -1, n - 1), e = clampi(ends[i], -1, n - 1);
        len = b > e ? (b - e + (-step) - 1) / (-step) : 0;
      }
      (*shape)[a] = len;
    }
    return true;
  }
  if (op == "Split") {
    if (!need(1)) return false;
    const auto& d = *in[0];
    size_t axis = 0;
    if (!norm_axis(int_attr(o, "axis", 0), d.size(), &axis)) throw bad("axis outside the rank");
    std::vector<int64_t> parts;
    bool given = false;
    if (!ints_of(g, o, "split", 1, &parts, &given)) return false;
    const auto n = static_cast<int64_t>(o.outputs.size());
    if (!given) {
      if (d[axis] < 0 || d[axis] % n != 0) return false;
      parts.assign(static_cast<size_t>(n), d[axis] / n);
    }
    if (static_cast<int64_t>(parts.size()) != n) throw bad(std::to_string(parts.size()) + " parts for " + std::to_string(n) + " outputs");
    int64_t sum = 0;
    for (int64_t v : parts) sum += v;
    if (d[axis] >= 0 && sum != d[axis]) throw bad("parts add up to " + std::to_string(sum) + ", the axis has " + std::to_string(d[axis]));
    *shape = d;
    (*shape)[axis] = parts[static_cast<size_t>(k)];
    return true;
  }
  if (op == "Expand" || op == "ConstantOfShape") {
    const size_t si = op == "Expand" ? 1 : 0;
    if (k != 0 || o.inputs.size() <= si) return false;
    std::vector<int64_t> v, mult;
    if (!const_ints(g, o.inputs[si], &v, &mult)) return false;
    std::vector<int64_t> target(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      if (mult[i] != 0 && v[i] != 0) return false;
      target[i] = mult[i] ? -mult[i] : v[i];
    }
    if (op == "ConstantOfShape") {
      *shape = target;
      return true;
    }
    if (!need(1)) return false;
    bool clash = false;
    if (!broadcast(*in[0], target, shape, &clash)) {
      if (clash) throw bad("cannot expand " + dims_str(*in[0]) + " to " + dims_str(target));
      return false;
    }
    return true;
  }
  return false;
}

void verify(const Graph& g) {
  auto fail = [&](const std::string& why) { return CompileError(g.path + ": IR check: " + why); };
  const int T = static_cast<int>(g.tensors.size());
  for (const auto& [name, i] : g.by_name) {
    if (i < 0 || i >= T || g.tensors[static_cast<size_t>(i)].name != name) throw fail("tensor index of '" + name + "' is stale");
  }
  if (g.by_name.size() != g.tensors.size()) throw fail("tensors and their names differ in number");
  std::vector<int> made(static_cast<size_t>(T), 0);
  for (int i : g.inputs) made[static_cast<size_t>(i)] = 1;
  for (int t = 0; t < T; ++t) {
    if (g.tensors[static_cast<size_t>(t)].kind == TensorKind::kState) made[static_cast<size_t>(t)] = 1;
  }
  for (int t = 0; t < T; ++t) {
    const Tensor& x = g.tensors[static_cast<size_t>(t)];
    if (x.kind == TensorKind::kParameter || x.kind == TensorKind::kConstant) {
      if (!x.data) throw fail(std::string(tensor_kind_name(x.kind)) + " '" + x.name + "' has no data");
      made[static_cast<size_t>(t)] = 1;
    }
    if ((x.kind == TensorKind::kValue) != (x.producer >= 0)) throw fail("tensor '" + x.name + "' is a value without a producer or the reverse");
  }
  for (int i = 0; i < static_cast<int>(g.ops.size()); ++i) {
    const Op& o = g.ops[static_cast<size_t>(i)];
    if (std::none_of(o.outputs.begin(), o.outputs.end(), [](int t) { return t >= 0; })) throw fail(op_ref(o) + " has no output");
    for (int t : o.inputs) {
      if (t < 0) continue;
      if (t >= T) throw fail(op_ref(o) + " reads a tensor that does not exist");
      const Tensor& x = g.tensors[static_cast<size_t>(t)];
      if (!made[static_cast<size_t>(t)]) throw fail(op_ref(o) + " reads '" + x.name + "' before it is produced (not in topological order)");
      if (std::find(x.consumers.begin(), x.consumers.end(), i) == x.consumers.end()) {
        throw fail(op_ref(o) + " reads '" + x.name + "', which does not list it as a consumer");
      }
    }
    for (int t : o.outputs) {
      if (t < 0) continue;
      if (t >= T) throw fail(op_ref(o) + " writes a tensor that does not exist");
      const Tensor& x = g.tensors[static_cast<size_t>(t)];
      if (x.producer != i) throw fail(op_ref(o) + " writes '" + x.name + "', whose producer is another op");
      if (made[static_cast<size_t>(t)]) throw fail("'" + x.name + "' is produced twice");
      made[static_cast<size_t>(t)] = 1;
    }
    for (size_t k = 0; k < o.outputs.size(); ++k) {
      const int t = o.outputs[k];
      if (t < 0) continue;
      const Tensor& x = g.tensors[static_cast<size_t>(t)];
      std::vector<int64_t> s;
      if (!x.shape_known || !infer_output_shape(g, o, static_cast<int>(k), &s)) continue;
      bool same = s.size() == x.shape.size();
      for (size_t d = 0; same && d < s.size(); ++d) same = s[d] == x.shape[d] || ((s[d] < 0) != (x.shape[d] < 0));
      if (!same) throw fail(op_ref(o) + " gives '" + x.name + "' shape " + dims_str(x.shape) + ", its shape rule " + dims_str(s));
    }
  }
  for (int t = 0; t < T; ++t) {
    const Tensor& x = g.tensors[static_cast<size_t>(t)];
    for (int c : x.consumers) {
      if (c < 0 || c >= static_cast<int>(g.ops.size())) throw fail("'" + x.name + "' lists a consumer that does not exist");
      const auto& ins = g.ops[static_cast<size_t>(c)].inputs;
      if (std::find(ins.begin(), ins.end(), t) == ins.end()) throw fail("'" + x.name + "' lists " + op_ref(g.ops[static_cast<size_t>(c)]) + ", which does not read it");
    }
  }
  for (int t : g.outputs) {
    if (t < 0 || t >= T || !made[static_cast<size_t>(t)]) throw fail("a graph output is not produced");
  }
}

}  // namespace wafersim::compiler::ir
