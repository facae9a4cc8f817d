// Elementwise activations, standalone or fused into Dense and Conv2d (their `activation`,
// `activation_alpha`, `activation_beta`), and ActivationGrad, their gradient from the
// pre-activation z, the output y and dy. Every activation but the GELUs is evaluated with its
// programs (compiler/activation.h: as the PEs compute it); the GELUs exactly (std::erf, std::tanh),
// as PyTorch does, since the wafer's are approximations checked against this reference.
#include <cmath>

#include "compiler/activation.h"
#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {

namespace {
constexpr float kSqrtHalf = 0.70710678118654752f, kGeluC = 0.79788456080286536f, kGeluK = 0.044715f;

Activation act_named(const std::string& a) {
  const ActivationDef* d = activation_by_name(a);
  return d ? d->act : Activation::kNone;
}
}  // namespace

ActParams act_params(const ir::Op& o) {
  return ActParams{attr_f(o, "activation_alpha", 0.01f), attr_f(o, "activation_beta", 0.0f)};
}

ActInputs act_inputs(const ir::Graph& g, const ir::Op& o) {
  ActInputs in;
  in.attr = [&o](const char* key) { return o.attr(key); };
  in.given = [&o](size_t i) { return i < o.inputs.size() && o.inputs[i] >= 0; };
  in.input = [&g, &o](size_t i) -> const std::vector<float>* {
    if (i >= o.inputs.size() || o.inputs[i] < 0) return nullptr;
    const OnnxTensor* t = g.tensors[static_cast<size_t>(o.inputs[i])].data;
    return t ? &t->f32 : nullptr;
  };
  return in;
}

float act_forward(const std::string& a, float z, const ActParams& p) {
  if (a == "gelu") return 0.5f * z * (1.0f + std::erf(z * kSqrtHalf));
  if (a == "gelu_tanh") return 0.5f * z * (1.0f + std::tanh(kGeluC * (z + kGeluK * z * z * z)));
  return act_fwd(act_named(a), z, p);
}

float act_backward(const std::string& a, float z, float y, float g, const ActParams& p) {
  if (a == "gelu") {
    const float cdf = 0.5f * (1.0f + std::erf(z * kSqrtHalf));
    const float pdf = std::exp(-0.5f * z * z) * 0.39894228040143268f;
    return g * (cdf + z * pdf);
  }
  if (a == "gelu_tanh") {
    const float t = std::tanh(kGeluC * (z + kGeluK * z * z * z));
    return g * (0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluK * z * z));
  }
  return act_grad(act_named(a), y, z, g, p);
}

int fused_activation_grad(const ir::Op& o, GradContext& c) {
  const std::string act = attr_s(o, "activation", "none");
  if (act == "none") return c.dy();
  Attrs at = {{"activation", ir::attr_str(act)}};
  if (const OnnxAttr* a = o.attr("activation_alpha")) at["activation_alpha"] = *a;
  if (const OnnxAttr* b = o.attr("activation_beta")) at["activation_beta"] = *b;
  return c.emit("ActivationGrad", {-1, o.outputs[0], c.dy()}, c.shape(o.outputs[0]), at);
}

namespace {

// The activation name of a standalone op.
std::string act_of(const ir::Op& o) {
  if (o.kind == "Gelu") return attr_s(o, "approximate", "none") == "tanh" ? "gelu_tanh" : "gelu";
  const ActivationDef* d = activation_by_kind(o.kind);
  return d ? d->name : "none";
}

// A standalone op's parameters, as the kernel graph reads them (ActivationDef::params).
ActParams standalone_params(const ir::Graph& g, const ir::Op& o) {
  const ActivationDef* d = activation_by_kind(o.kind);
  if (!d || !d->params) return {};
  std::string why;
  return d->params(act_inputs(g, o), &why);
}

class Activations : public OpClass {
 public:
  const char* name() const override { return "activation"; }
  std::vector<std::string> kinds() const override {
    std::vector<std::string> k = {"Gelu", "ActivationGrad"};
    for (const ActivationDef* d : activations()) {
      if (*d->kind) k.push_back(d->kind);
    }
    return k;
  }

  void gradient(const ir::Op& o, GradContext& c) const override {
    if (o.kind == "ActivationGrad") return c.no_rule(o.kind);
    Attrs at = {{"activation", ir::attr_str(act_of(o))}};
    const ActParams p = standalone_params(c.graph(), o);
    at["activation_alpha"] = ir::attr_float(p.a);
    at["activation_beta"] = ir::attr_float(p.b);
    if (c.wants(o.inputs[0])) c.give(o.inputs[0], c.emit("ActivationGrad", {o.inputs[0], o.outputs[0], c.dy()}, c.shape(o.outputs[0]), at));
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    auto& out = c.val[static_cast<size_t>(o.outputs[0])];
    if (o.kind == "ActivationGrad") {
      const std::string act = attr_s(o, "activation", "none");
      const ActParams p = act_params(o);
      const auto& z = o.inputs[0] >= 0 ? c.val[static_cast<size_t>(o.inputs[0])] : c.pre[o.inputs[1]];
      const auto &y = c.val[static_cast<size_t>(o.inputs[1])], &dy = c.val[static_cast<size_t>(o.inputs[2])];
      for (size_t e = 0; e < out.size(); ++e) out[e] = act_backward(act, z[e], y[e], dy[e], p);
      return;
    }
    const std::string act = act_of(o);
    // The op's own parameters: attributes, and Clip's bounds from its (constant) inputs.
    ActParams p;
    if (const ActivationDef* d = activation_by_kind(o.kind); d && d->params) {
      ActInputs in;
      in.attr = [&o](const char* key) { return o.attr(key); };
      in.given = [&o](size_t i) { return i < o.inputs.size() && o.inputs[i] >= 0; };
      in.input = [&o, &c](size_t i) -> const std::vector<float>* {
        return i < o.inputs.size() && o.inputs[i] >= 0 ? &c.val[static_cast<size_t>(o.inputs[i])] : nullptr;
      };
      std::string why;
      p = d->params(in, &why);
    }
    const auto& x = c.val[static_cast<size_t>(o.inputs[0])];
    for (size_t e = 0; e < out.size(); ++e) out[e] = act_forward(act, x[e], p);
  }
};

}  // namespace

std::unique_ptr<OpClass> make_activation() { return std::make_unique<Activations>(); }

}  // namespace wafersim::compiler::ops
