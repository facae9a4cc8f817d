// Elementwise activations: Relu, Sigmoid, Tanh, LeakyRelu (as the PEs compute them:
// compiler/reference.cc; LeakyRelu as max(z, alpha z), a slope in [0, 1]), Gelu (erf and tanh forms), standalone or fused into Dense (its `activation`), and
// ActivationGrad, their gradient from the pre-activation z, the output y and dy.
#include <cmath>

#include "compiler/ops/op_class.h"
#include "compiler/reference.h"

namespace wafersim::compiler::ops {

namespace {
constexpr float kSqrtHalf = 0.70710678118654752f, kGeluC = 0.79788456080286536f, kGeluK = 0.044715f;
}  // namespace

float act_forward(const std::string& a, float z, float alpha) {
  if (a == "relu") return act_fwd(Activation::kRelu, z);
  if (a == "sigmoid") return act_fwd(Activation::kSigmoid, z);
  if (a == "tanh") return act_fwd(Activation::kTanh, z);
  if (a == "leaky_relu") return act_fwd(Activation::kLeakyRelu, z, alpha);
  if (a == "gelu") return 0.5f * z * (1.0f + std::erf(z * kSqrtHalf));
  if (a == "gelu_tanh") return 0.5f * z * (1.0f + std::tanh(kGeluC * (z + kGeluK * z * z * z)));
  return z;
}

float act_backward(const std::string& a, float z, float y, float g, float alpha) {
  if (a == "relu") return act_bwd(Activation::kRelu, y, g);
  if (a == "sigmoid") return act_bwd(Activation::kSigmoid, y, g);
  if (a == "tanh") return act_bwd(Activation::kTanh, y, g);
  if (a == "leaky_relu") return act_bwd(Activation::kLeakyRelu, y, g, alpha);
  if (a == "gelu") {
    const float cdf = 0.5f * (1.0f + std::erf(z * kSqrtHalf));
    const float pdf = std::exp(-0.5f * z * z) * 0.39894228040143268f;
    return g * (cdf + z * pdf);
  }
  if (a == "gelu_tanh") {
    const float t = std::tanh(kGeluC * (z + kGeluK * z * z * z));
    return g * (0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluK * z * z));
  }
  return g;
}

int fused_activation_grad(const ir::Op& o, GradContext& c) {
  const std::string act = attr_s(o, "activation", "none");
  if (act == "none") return c.dy();
  Attrs at = {{"activation", ir::attr_str(act)}};
  if (const OnnxAttr* a = o.attr("activation_alpha")) at["activation_alpha"] = *a;
  return c.emit("ActivationGrad", {-1, o.outputs[0], c.dy()}, c.shape(o.outputs[0]), at);
}

namespace {

// The activation name of a standalone op.
std::string act_of(const ir::Op& o) {
  if (o.kind == "Relu") return "relu";
  if (o.kind == "Sigmoid") return "sigmoid";
  if (o.kind == "Tanh") return "tanh";
  if (o.kind == "LeakyRelu") return "leaky_relu";
  return attr_s(o, "approximate", "none") == "tanh" ? "gelu_tanh" : "gelu";
}

class Activations : public OpClass {
 public:
  const char* name() const override { return "activation"; }
  std::vector<std::string> kinds() const override { return {"Relu", "Sigmoid", "Tanh", "LeakyRelu", "Gelu", "ActivationGrad"}; }

  void gradient(const ir::Op& o, GradContext& c) const override {
    if (o.kind == "ActivationGrad") return c.no_rule(o.kind);
    Attrs at = {{"activation", ir::attr_str(act_of(o))}};
    if (o.kind == "LeakyRelu") at["activation_alpha"] = ir::attr_float(attr_f(o, "alpha", 0.01f));
    if (c.wants(o.inputs[0])) c.give(o.inputs[0], c.emit("ActivationGrad", {o.inputs[0], o.outputs[0], c.dy()}, c.shape(o.outputs[0]), at));
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    auto& out = c.val[static_cast<size_t>(o.outputs[0])];
    if (o.kind == "ActivationGrad") {
      const std::string act = attr_s(o, "activation", "none");
      const float alpha = attr_f(o, "activation_alpha", 0.01f);
      const auto& z = o.inputs[0] >= 0 ? c.val[static_cast<size_t>(o.inputs[0])] : c.pre[o.inputs[1]];
      const auto &y = c.val[static_cast<size_t>(o.inputs[1])], &dy = c.val[static_cast<size_t>(o.inputs[2])];
      for (size_t e = 0; e < out.size(); ++e) out[e] = act_backward(act, z[e], y[e], dy[e], alpha);
      return;
    }
    const std::string act = act_of(o);
    const float alpha = attr_f(o, "alpha", 0.01f);
    const auto& x = c.val[static_cast<size_t>(o.inputs[0])];
    for (size_t e = 0; e < out.size(); ++e) out[e] = act_forward(act, x[e], alpha);
  }
};

}  // namespace

std::unique_ptr<OpClass> make_activation() { return std::make_unique<Activations>(); }

}  // namespace wafersim::compiler::ops
