// The op classes, one line each (docs/compiler.md, "How to add an op").
#include <stdexcept>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {

std::unique_ptr<OpClass> make_dense();
std::unique_ptr<OpClass> make_activation();
std::unique_ptr<OpClass> make_add();
std::unique_ptr<OpClass> make_layernorm();
std::unique_ptr<OpClass> make_rename();
std::unique_ptr<OpClass> make_softmax();
std::unique_ptr<OpClass> make_optimizer();
std::unique_ptr<OpClass> make_mse();
std::unique_ptr<OpClass> make_conv();
std::unique_ptr<OpClass> make_binary();
std::unique_ptr<OpClass> make_unary();
std::unique_ptr<OpClass> make_reduce();
std::unique_ptr<OpClass> make_movement();
std::unique_ptr<OpClass> make_matmul();
std::unique_ptr<OpClass> make_select();

namespace {

const std::vector<std::unique_ptr<OpClass>>& table() {
  static const std::vector<std::unique_ptr<OpClass>> t = [] {
    std::vector<std::unique_ptr<OpClass>> v;
    v.push_back(make_dense());
    v.push_back(make_activation());
    v.push_back(make_add());
    v.push_back(make_layernorm());
    v.push_back(make_rename());
    v.push_back(make_softmax());
    v.push_back(make_optimizer());
    v.push_back(make_mse());
    v.push_back(make_conv());
    v.push_back(make_binary());
    v.push_back(make_unary());
    v.push_back(make_reduce());
    v.push_back(make_movement());
    v.push_back(make_matmul());
    v.push_back(make_select());
    return v;
  }();
  return t;
}

}  // namespace

const OpClass* find(const std::string& kind) {
  static const std::map<std::string, const OpClass*> by = [] {
    std::map<std::string, const OpClass*> m;
    for (const auto& c : table()) {
      for (const std::string& k : c->kinds()) {
        if (!m.emplace(k, c.get()).second) throw std::logic_error("op kind " + k + " registered twice");
      }
    }
    return m;
  }();
  auto it = by.find(kind);
  return it == by.end() ? nullptr : it->second;
}

std::vector<const OpClass*> all() {
  std::vector<const OpClass*> v;
  for (const auto& c : table()) v.push_back(c.get());
  return v;
}

void OpClass::gradient(const ir::Op& o, GradContext& c) const { c.no_rule(o.kind); }

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

size_t bcast_at(size_t i, const std::vector<int64_t>& so, const std::vector<int64_t>& si) {
  size_t at = 0, stride = 1;
  auto rest = static_cast<int64_t>(i);
  for (size_t k = so.size(); k-- > 0;) {
    const int64_t c = rest % so[k];
    rest /= so[k];
    const size_t off = so.size() - si.size();
    if (k >= off) {
      const int64_t d = si[k - off];
      if (d != 1) at += static_cast<size_t>(c) * stride;
      stride *= static_cast<size_t>(d);
    }
  }
  return at;
}

void give_broadcast(GradContext& c, int x, int full) {
  if (c.wants(x)) c.give(x, c.shape(x) == c.shape(full) ? full : c.emit("SumTo", {full}, c.shape(x)));
  if (c.is_param(x)) c.param_grad(x, "SumToGrad", {full});
}

std::vector<int64_t> ints_operand(const ir::Graph& g, const ir::Op& o, const char* key, size_t input, bool* given) {
  std::vector<int64_t> v;
  bool gv = false;
  if (!ir::ints_of(g, o, key, input, &v, &gv)) {
    throw CompileError(g.path + ": op " + o.kind + " ('" + (o.sources.empty() ? std::string("?") : o.sources.front()) + "'): its " + key +
                       " are not constants");
  }
  if (given) *given = gv;
  return v;
}

size_t axis_of(int64_t a, size_t r, const ir::Op& o) {
  const int64_t n = static_cast<int64_t>(r);
  if (a < -n || a >= n) {
    throw CompileError("op " + o.kind + " ('" + (o.sources.empty() ? std::string("?") : o.sources.front()) + "'): axis " + std::to_string(a) +
                       " outside rank " + std::to_string(r));
  }
  return static_cast<size_t>(a < 0 ? a + n : a);
}

std::string attr_s(const ir::Op& o, const char* key, const char* dflt) {
  const OnnxAttr* a = o.attr(key);
  return a ? a->s : dflt;
}

float attr_f(const ir::Op& o, const char* key, float dflt) {
  const OnnxAttr* a = o.attr(key);
  return a && a->kind == OnnxAttr::kFloat ? a->f : dflt;
}

}  // namespace wafersim::compiler::ops
