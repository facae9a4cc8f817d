// LayerNorm over the trailing axes from `axis` (fuse_layernorm's op), and its gradients. Per row
// of D elements: mean = (sum in order) / D; var = (sum of (x - mean)^2 by fused multiply-adds) / D;
// rstd = 1 / sqrt(var + eps); n = (x - mean) rstd; y = n scale + bias. LayerNormGrad:
// dn = dy scale, dx = rstd (dn - mean(dn) - n mean(dn n)); LayerNormGradScale adds dy n (fused
// multiply-add) and LayerNormGradBias dy into the momenta, row after row.
#include <cmath>

#include "compiler/ops/op_class.h"

namespace wafersim::compiler::ops {
namespace {

class LayerNorm : public OpClass {
 public:
  const char* name() const override { return "layernorm"; }
  std::vector<std::string> kinds() const override { return {"LayerNorm", "LayerNormGrad", "LayerNormGradScale", "LayerNormGradBias"}; }

  void gradient(const ir::Op& o, GradContext& c) const override {
    if (o.kind != "LayerNorm") return c.no_rule(o.kind);
    const int x = o.inputs[0], scale = o.inputs[1], bias = o.inputs[2];
    const Attrs at = {{"axis", *o.attr("axis")}, {"epsilon", *o.attr("epsilon")}};
    if (c.wants(x)) c.give(x, c.emit("LayerNormGrad", {x, scale, c.dy()}, c.shape(x), at));
    if (c.is_param(scale)) c.param_grad(scale, "LayerNormGradScale", {x, c.dy()}, at);
    if (c.is_param(bias)) c.param_grad(bias, "LayerNormGradBias", {c.dy()}, at);
  }

  void evaluate(const ir::Op& o, EvalContext& c) const override {
    auto V = [&](int t) -> std::vector<float>& { return c.val[static_cast<size_t>(t)]; };
    const std::string& k = o.kind;
    auto& out = V(o.outputs[0]);
    const int xi = k == "LayerNormGradBias" ? -1 : o.inputs[0];
    const auto& shape = c.shape[static_cast<size_t>(k == "LayerNormGradBias" ? o.inputs[0] : xi)];
    const int64_t axis = o.attr("axis")->i + static_cast<int64_t>(shape.size());
    int64_t D = 1;
    for (auto d = static_cast<size_t>(axis); d < shape.size(); ++d) D *= shape[d];
    const int64_t rows = numel(shape) / D;
    const float eps = o.attr("epsilon")->f;
    if (k == "LayerNormGradScale" || k == "LayerNormGradBias") out = V(o.inputs.back());
    const int scale = k == "LayerNorm" || k == "LayerNormGrad" ? o.inputs[1] : -1;
    const int dyi = k == "LayerNormGrad" ? o.inputs[2] : k == "LayerNormGradScale" ? o.inputs[1] : k == "LayerNormGradBias" ? o.inputs[0] : -1;
    const std::vector<float>* sc = scale >= 0 ? &V(scale) : nullptr;
    std::vector<float> n(static_cast<size_t>(D)), dn(static_cast<size_t>(D));
    for (int64_t r = 0; r < rows; ++r) {
      const auto base = static_cast<size_t>(r * D);
      float rstd = 0;
      if (xi >= 0) {
        const auto& x = V(xi);
        float s = 0;
        for (int64_t e = 0; e < D; ++e) s += x[base + static_cast<size_t>(e)];
        const float mean = s / static_cast<float>(D);
        float s2 = 0;
        for (int64_t e = 0; e < D; ++e) {
          const float d = x[base + static_cast<size_t>(e)] - mean;
          n[static_cast<size_t>(e)] = d;
          s2 = std::fma(d, d, s2);
        }
        rstd = 1.0f / std::sqrt(s2 / static_cast<float>(D) + eps);
        for (float& v : n) v = v * rstd;
      }
      if (k == "LayerNorm") {
        const std::vector<float>* bi = o.inputs[2] >= 0 ? &V(o.inputs[2]) : nullptr;
        for (int64_t e = 0; e < D; ++e) {
          float v = n[static_cast<size_t>(e)];
          if (sc) v = v * (*sc)[static_cast<size_t>(e)];
          if (bi) v = v + (*bi)[static_cast<size_t>(e)];
          out[base + static_cast<size_t>(e)] = v;
        }
      } else if (k == "LayerNormGrad") {
        const auto& dy = V(dyi);
        float m1 = 0, m2 = 0;
        for (int64_t e = 0; e < D; ++e) {
          const float v = dy[base + static_cast<size_t>(e)] * (sc ? (*sc)[static_cast<size_t>(e)] : 1.0f);
          dn[static_cast<size_t>(e)] = v;
          m1 += v;
          m2 = std::fma(v, n[static_cast<size_t>(e)], m2);
        }
        m1 = m1 / static_cast<float>(D);
        m2 = m2 / static_cast<float>(D);
        for (int64_t e = 0; e < D; ++e) out[base + static_cast<size_t>(e)] = rstd * (dn[static_cast<size_t>(e)] - m1 - n[static_cast<size_t>(e)] * m2);
      } else if (k == "LayerNormGradScale") {
        const auto& dy = V(dyi);
        for (int64_t e = 0; e < D; ++e) {
          float& v = out[static_cast<size_t>(e)];
          v = std::fma(dy[base + static_cast<size_t>(e)], n[static_cast<size_t>(e)], v);
        }
      } else {
        const auto& dy = V(dyi);
        for (int64_t e = 0; e < D; ++e) out[static_cast<size_t>(e)] = out[static_cast<size_t>(e)] + dy[base + static_cast<size_t>(e)];
      }
    }
  }
};

}  // namespace

std::unique_ptr<OpClass> make_layernorm() { return std::make_unique<LayerNorm>(); }

}  // namespace wafersim::compiler::ops
