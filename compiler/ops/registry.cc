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

std::string attr_s(const ir::Op& o, const char* key, const char* dflt) {
  const OnnxAttr* a = o.attr(key);
  return a ? a->s : dflt;
}

float attr_f(const ir::Op& o, const char* key, float dflt) {
  const OnnxAttr* a = o.attr(key);
  return a && a->kind == OnnxAttr::kFloat ? a->f : dflt;
}

}  // namespace wafersim::compiler::ops
