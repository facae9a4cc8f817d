// fold_constants: ops whose inputs are all constants, and Shape of a value whose shape is known,
// are evaluated here and become constants, op after op, and the shapes they decide (a Reshape's
// target, a Slice's bounds) are inferred for the values after them on the way. This is the shape arithmetic torch
// exports (Shape, Gather of a shape, Unsqueeze, Concat, Cast, integer Add/Sub/Mul/Div, Slice of
// a shape) and the float scalars computed from it (an attention scale). Integers are kept as
// v + m N: a value computed from the batch stays symbolic (a multi-head reshape's bsz x heads
// is 2N), so the batch need not be known. Parameters (trained) are never folded.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "compiler/passes/editor.h"
#include "compiler/passes/passes.h"

namespace wafersim::compiler::passes {
namespace {

struct Aff {
  int64_t v = 0, m = 0;  // v + m N
};

// A constant's elements: floats, or integers (each affine in N).
struct Val {
  int elem_type = 0;
  std::vector<int64_t> dims;
  std::vector<float> f;
  std::vector<Aff> i;
  bool is_float() const { return elem_type == kOnnxFloat; }
  size_t size() const { return is_float() ? f.size() : i.size(); }
};

bool is_int_type(int t) { return t == kOnnxInt64 || t == 6 /*int32*/ || t == 9 /*bool*/; }

bool read(const ir::Graph& g, int t, Val* v) {
  if (t < 0) return false;
  const ir::Tensor& x = g.tensors[static_cast<size_t>(t)];
  if (x.kind != ir::TensorKind::kConstant || !x.data) return false;
  const OnnxTensor& d = *x.data;
  const int64_t n = d.numel();
  v->elem_type = d.elem_type;
  v->dims = d.dims;
  if (d.elem_type == kOnnxFloat) {
    if (static_cast<int64_t>(d.f32.size()) != n) return false;
    v->f = d.f32;
    return true;
  }
  if (!is_int_type(d.elem_type) || static_cast<int64_t>(d.i64.size()) != n) return false;
  v->i.resize(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    v->i[static_cast<size_t>(k)].v = d.i64[static_cast<size_t>(k)];
    if (x.batch_multiple.size() == static_cast<size_t>(n)) v->i[static_cast<size_t>(k)].m = x.batch_multiple[static_cast<size_t>(k)];
  }
  return true;
}

void write(Editor& e, int t, const Val& v) {
  OnnxTensor d;
  d.elem_type = v.elem_type;
  d.dims = v.dims;
  std::vector<int64_t> mult;
  if (v.is_float()) {
    d.f32 = v.f;
  } else {
    bool sym = false;
    for (const Aff& a : v.i) sym = sym || a.m != 0;
    for (const Aff& a : v.i) {
      d.i64.push_back(a.v);
      if (sym) mult.push_back(a.m);
    }
  }
  e.make_constant(t, std::move(d), std::move(mult));
}

int64_t numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

// Elementwise binary ops over operands of equal shape or a one-element operand.
bool binary(const std::string& op, const Val& a, const Val& b, Val* r) {
  if (a.is_float() != b.is_float()) return false;
  const size_t na = a.size(), nb = b.size();
  if (na != nb && na != 1 && nb != 1) return false;
  if (na == nb && a.dims != b.dims && na != 1) return false;
  *r = na >= nb ? a : b;
  if (na == nb && a.dims.size() < b.dims.size()) r->dims = b.dims;
  const size_t n = std::max(na, nb);
  if (a.is_float()) {
    r->f.resize(n);
    for (size_t k = 0; k < n; ++k) {
      const float x = a.f[na == 1 ? 0 : k], y = b.f[nb == 1 ? 0 : k];
      if (op == "Add") r->f[k] = x + y;
      else if (op == "Sub") r->f[k] = x - y;
      else if (op == "Mul") r->f[k] = x * y;
      else if (op == "Div") r->f[k] = x / y;
      else if (op == "Pow") r->f[k] = std::pow(x, y);
      else return false;
    }
    return true;
  }
  r->i.resize(n);
  // A result int64 cannot hold is left unfolded (the kernels then name the node), never wrapped.
  bool over = false;
  auto add = [&](int64_t p, int64_t q) { int64_t v = 0; over |= __builtin_add_overflow(p, q, &v); return v; };
  auto sub = [&](int64_t p, int64_t q) { int64_t v = 0; over |= __builtin_sub_overflow(p, q, &v); return v; };
  auto mul = [&](int64_t p, int64_t q) { int64_t v = 0; over |= __builtin_mul_overflow(p, q, &v); return v; };
  for (size_t k = 0; k < n; ++k) {
    const Aff x = a.i[na == 1 ? 0 : k], y = b.i[nb == 1 ? 0 : k];
    Aff z;
    if (op == "Add") z = {add(x.v, y.v), add(x.m, y.m)};
    else if (op == "Sub") z = {sub(x.v, y.v), sub(x.m, y.m)};
    else if (op == "Mul") {
      if (x.m != 0 && y.m != 0) return false;  // N squared
      z = x.m ? Aff{mul(x.v, y.v), mul(x.m, y.v)} : Aff{mul(x.v, y.v), mul(x.v, y.m)};
    } else if (op == "Div") {
      if (y.m != 0 || y.v == 0) return false;
      if (y.v == -1 && (x.v == INT64_MIN || x.m == INT64_MIN)) return false;
      if (x.m != 0 && (x.m % y.v != 0 || x.v % y.v != 0)) return false;
      z = {x.v / y.v, x.m / y.v};  // integer division truncates, as ONNX's
    } else {
      return false;
    }
    if (over) return false;
    r->i[k] = z;
  }
  return true;
}

bool unary(const std::string& op, const Val& a, Val* r) {
  *r = a;
  if (op == "Neg") {
    for (float& x : r->f) x = -x;
    for (Aff& x : r->i) {
      if (x.v == INT64_MIN || x.m == INT64_MIN) return false;  // -x overflows: left unfolded
      x = {-x.v, -x.m};
    }
    return true;
  }
  if (!a.is_float()) return false;
  for (float& x : r->f) {
    if (op == "Sqrt") x = std::sqrt(x);
    else if (op == "Reciprocal") x = 1.0f / x;
    else if (op == "Exp") x = std::exp(x);
    else return false;
  }
  return true;
}

bool cast(const Val& a, int to, Val* r) {
  *r = a;
  r->elem_type = to;
  if (to == kOnnxFloat) {
    if (a.is_float()) return true;
    r->f.clear();
    for (const Aff& x : a.i) {
      if (x.m != 0) return false;
      r->f.push_back(static_cast<float>(x.v));
    }
    r->i.clear();
    return true;
  }
  if (!is_int_type(to)) return false;
  if (!a.is_float()) return true;
  r->i.clear();
  for (float x : a.f) {
    if (!std::isfinite(x) || std::fabs(x) > 9.0e15f) return false;
    r->i.push_back({static_cast<int64_t>(std::trunc(x)), 0});
  }
  r->f.clear();
  return true;
}

// Slice of a constant along one axis with constant bounds and any step (torch reverses its
// padding amounts with a step of -1: F.pad, nn.ZeroPad2d).
bool slice1(const ir::Graph& g, const ir::Op& o, const Val& a, Val* r) {
  if (a.dims.empty()) return false;
  auto ints = [&](const char* key, size_t input, std::vector<int64_t>* v) {
    if (const OnnxAttr* at = o.attr(key); at && at->kind == OnnxAttr::kInts) {
      *v = at->ints;
      return true;
    }
    Val c;
    if (o.inputs.size() <= input || o.inputs[input] < 0) return false;
    if (!read(g, o.inputs[input], &c) || c.is_float()) return false;
    for (const Aff& x : c.i) {
      if (x.m != 0) return false;
      v->push_back(x.v);
    }
    return true;
  };
  std::vector<int64_t> starts, ends, axes{0}, steps{1};
  if (!ints("starts", 1, &starts) || !ints("ends", 2, &ends) || starts.size() != 1 || ends.size() != 1) return false;
  if (std::vector<int64_t> ax; ints("axes", 3, &ax)) axes = ax;
  if (std::vector<int64_t> st; ints("steps", 4, &st)) steps = st;
  const auto rank = static_cast<int64_t>(a.dims.size());
  if (axes.size() != 1 || axes[0] < -rank || axes[0] >= rank || steps.size() != 1 || steps[0] == 0) return false;
  const auto axis = static_cast<size_t>(axes[0] < 0 ? axes[0] + rank : axes[0]);
  const int64_t n = a.dims[axis], step = steps[0];
  // ONNX's clamping: [0, n] for a positive step, [-1, n - 1] for a negative one.
  auto clampi = [&](int64_t v) {
    if (v < 0) v = v < -n ? -n - 1 : v + n;  // (no overflow: |v| may be near INT64_MAX)
    return step > 0 ? std::clamp(v, int64_t{0}, n) : std::clamp(v, int64_t{-1}, n - 1);
  };
  const int64_t b = clampi(starts[0]), e = clampi(ends[0]);
  std::vector<int64_t> take;
  for (int64_t k = b; step > 0 ? k < e : k > e; k += step) take.push_back(k);
  int64_t inner = 1, outer = 1;
  for (size_t d = axis + 1; d < a.dims.size(); ++d) inner *= a.dims[d];
  for (size_t d = 0; d < axis; ++d) outer *= a.dims[d];
  *r = a;
  r->dims[axis] = static_cast<int64_t>(take.size());
  r->f.clear();
  r->i.clear();
  for (int64_t q = 0; q < outer; ++q) {
    for (int64_t k : take) {
      const auto at = static_cast<size_t>((q * n + k) * inner);
      if (a.is_float()) r->f.insert(r->f.end(), a.f.begin() + static_cast<long>(at), a.f.begin() + static_cast<long>(at + static_cast<size_t>(inner)));
      else r->i.insert(r->i.end(), a.i.begin() + static_cast<long>(at), a.i.begin() + static_cast<long>(at + static_cast<size_t>(inner)));
    }
  }
  return true;
}

// Transpose of a constant by `perm` (default: the axes reversed).
bool transpose(const ir::Op& o, const Val& a, Val* r) {
  const size_t rank = a.dims.size();
  std::vector<int64_t> perm;
  if (const OnnxAttr* p = o.attr("perm"); p && p->kind == OnnxAttr::kInts) perm = p->ints;
  else for (size_t d = rank; d-- > 0;) perm.push_back(static_cast<int64_t>(d));
  if (perm.size() != rank) return false;
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= static_cast<int64_t>(rank) || seen[static_cast<size_t>(p)]) return false;
    seen[static_cast<size_t>(p)] = true;
  }
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * a.dims[d];
  *r = a;
  for (size_t d = 0; d < rank; ++d) r->dims[d] = a.dims[static_cast<size_t>(perm[d])];
  const int64_t total = numel(a.dims);
  r->f.clear();
  r->i.clear();
  std::vector<int64_t> idx(rank, 0);  // the output's index, in its axes
  for (int64_t k = 0; k < total; ++k) {
    int64_t src = 0;
    for (size_t d = 0; d < rank; ++d) src += idx[d] * stride[static_cast<size_t>(perm[d])];
    if (a.is_float()) r->f.push_back(a.f[static_cast<size_t>(src)]);
    else r->i.push_back(a.i[static_cast<size_t>(src)]);
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < r->dims[d]) break;
      idx[d] = 0;
    }
  }
  return true;
}

int64_t int_attr(const ir::Op& o, const char* key, int64_t dflt) {
  const OnnxAttr* a = o.attr(key);
  return a && a->kind == OnnxAttr::kInt ? a->i : dflt;
}

// The value of op `o`'s output 0, if it can be computed here.
bool evaluate(const ir::Graph& g, const ir::Op& o, Val* r) {
  if (!o.domain.empty() || o.outputs.empty() || o.outputs[0] < 0) return false;
  if (std::count_if(o.outputs.begin(), o.outputs.end(), [](int t) { return t >= 0; }) != 1) return false;
  const std::string& op = o.kind;
  if (op == "Shape") {
    if (o.inputs.empty() || o.inputs[0] < 0) return false;
    const ir::Tensor& x = g.tensors[static_cast<size_t>(o.inputs[0])];
    if (!x.shape_known) return false;
    const auto rank = static_cast<int64_t>(x.shape.size());
    int64_t start = int_attr(o, "start", 0), end = int_attr(o, "end", rank);
    start = std::clamp(start < 0 ? start + rank : start, int64_t{0}, rank);
    end = std::clamp(end < 0 ? end + rank : end, start, rank);
    r->elem_type = kOnnxInt64;
    for (int64_t d = start; d < end; ++d) {
      const int64_t s = x.shape[static_cast<size_t>(d)];
      r->i.push_back(s < 0 ? Aff{0, -s} : Aff{s, 0});
    }
    r->dims = {static_cast<int64_t>(r->i.size())};
    return true;
  }
  std::vector<Val> in;
  for (int t : o.inputs) {
    if (t < 0) {
      in.emplace_back();
      continue;
    }
    Val v;
    if (!read(g, t, &v)) return false;
    in.push_back(std::move(v));
  }
  if (in.empty()) return false;
  if (op == "Identity" || op == "Reshape" || op == "Flatten" || op == "Unsqueeze" || op == "Squeeze") {
    std::vector<int64_t> dims;
    if (!ir::infer_output_shape(g, o, 0, &dims)) return false;
    for (int64_t d : dims) {
      if (d < 0) return false;
    }
    if (numel(dims) != static_cast<int64_t>(in[0].size())) return false;
    *r = in[0];
    r->dims = dims;
    return true;
  }
  if (op == "Cast") {
    const OnnxAttr* to = o.attr("to");
    return to && to->kind == OnnxAttr::kInt && cast(in[0], static_cast<int>(to->i), r);
  }
  if (op == "Gather") {
    if (in.size() != 2 || in[0].dims.size() != 1 || in[1].is_float() || int_attr(o, "axis", 0) != 0) return false;
    const auto n = static_cast<int64_t>(in[0].size());
    *r = in[0];
    r->dims = in[1].dims;
    r->f.clear();
    r->i.clear();
    for (const Aff& k : in[1].i) {
      if (k.m != 0 || k.v < -n || k.v >= n) return false;
      const auto at = static_cast<size_t>(k.v < 0 ? k.v + n : k.v);
      if (in[0].is_float()) r->f.push_back(in[0].f[at]);
      else r->i.push_back(in[0].i[at]);
    }
    return true;
  }
  if (op == "Concat") {
    *r = in[0];
    if (in[0].dims.size() != 1) return false;
    for (size_t k = 1; k < in.size(); ++k) {
      if (in[k].dims.size() != 1 || in[k].is_float() != r->is_float()) return false;
      r->f.insert(r->f.end(), in[k].f.begin(), in[k].f.end());
      r->i.insert(r->i.end(), in[k].i.begin(), in[k].i.end());
    }
    r->dims = {static_cast<int64_t>(r->size())};
    return true;
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow") return in.size() == 2 && binary(op, in[0], in[1], r);
  if (op == "Neg" || op == "Sqrt" || op == "Reciprocal" || op == "Exp") return unary(op, in[0], r);
  if (op == "Slice") return slice1(g, o, in[0], r);
  if (op == "Transpose") return transpose(o, in[0], r);
  if (op == "ConstantOfShape") {
    // A small tensor of the `value` attribute's one element (default: a float 0).
    if (in[0].is_float() || in[0].dims.size() != 1) return false;
    std::vector<int64_t> dims;
    for (const Aff& x : in[0].i) {
      if (x.m != 0 || x.v < 0 || x.v > 4096) return false;
      dims.push_back(x.v);
    }
    if (dims.size() > 4 || numel(dims) > 4096) return false;  // shape arithmetic, not data
    const OnnxAttr* v = o.attr("value");
    r->elem_type = kOnnxFloat;
    float fv = 0;
    int64_t iv = 0;
    if (v) {
      if (v->tensor_type == 0 || v->floats.size() + v->ints.size() != 1) return false;
      r->elem_type = v->tensor_type;
      if (v->tensor_type == kOnnxFloat) fv = v->floats[0];
      else iv = v->ints[0];
    }
    if (!r->is_float() && !is_int_type(r->elem_type)) return false;
    r->dims = dims;
    const auto n = static_cast<size_t>(numel(dims));
    if (r->is_float()) r->f.assign(n, fv);
    else r->i.assign(n, Aff{iv, 0});
    return true;
  }
  return false;
}

}  // namespace

int fold_constants(ir::Graph& g) {
  Editor e(g);
  int folded = 0, inferred = 0;
  for (size_t i = 0; i < g.ops.size(); ++i) {
    // First the shapes this op's outputs take now that the values before it are folded (a
    // Reshape's computed target; a Shape of its output is then folded further on).
    const ir::Op& o = g.ops[i];
    for (size_t k = 0; k < o.outputs.size(); ++k) {
      const int t = o.outputs[k];
      if (t < 0 || g.tensors[static_cast<size_t>(t)].shape_known) continue;
      std::vector<int64_t> s;
      if (!ir::infer_output_shape(g, o, static_cast<int>(k), &s)) continue;
      ir::Tensor& x = g.tensors[static_cast<size_t>(t)];
      x.shape = s;
      x.shape_known = true;
      ++inferred;
    }
    Val v;
    if (!evaluate(g, o, &v)) continue;
    const int out = *std::find_if(o.outputs.begin(), o.outputs.end(), [](int t) { return t >= 0; });
    write(e, out, v);
    ++folded;
  }
  if (folded) e.finish();
  return folded + inferred;
}

}  // namespace wafersim::compiler::passes
