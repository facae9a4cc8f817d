// Elu (alpha > 0) and Selu (gamma Elu, ONNX's defaults alpha 1.67326, gamma 1.0507: torch's
// nn.SELU): relu(z) + alpha (e^min(z, 0) - 1), min(z, 0) = z - relu(z), times gamma. Backward at
// the output: t = (y > 0 ? g : 0), u = g - t, then u y + (gamma t + gamma alpha u), that is
// gamma g for z > 0 and g (y + gamma alpha) below (gamma 1: Elu).
#include <cmath>

#include "compiler/activation.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

namespace {

ActProgram forward(float alpha, float gamma) {
  ActProgram p;
  p.relu(S::kY, S::kZ).sub(S::kT0, S::kZ, S::kY).exp(S::kT0, S::kT0).sub(S::kT0, S::kT0, S::kOnes).muls(S::kT0, S::kT0, alpha);
  p.add(S::kY, S::kY, S::kT0);
  if (gamma != 1) p.muls(S::kY, S::kY, gamma);
  return p;
}

ActProgram backward(float alpha, float gamma) {
  ActProgram p;
  p.drelu(S::kT0, S::kY, S::kG).sub(S::kG, S::kG, S::kT0);
  if (gamma != 1) p.muls(S::kT0, S::kT0, gamma);
  return p.fmacs(S::kT0, S::kT0, S::kG, gamma * alpha).fmac(S::kG, S::kG, S::kY, S::kT0);
}

// A float attribute `key`, or `dflt`.
float attr_or(const ActInputs& in, const char* key, float dflt) {
  const OnnxAttr* a = in.attr(key);
  return a && a->kind == OnnxAttr::kFloat ? a->f : dflt;
}

}  // namespace

extern const ActivationDef kElu{
    Activation::kElu, "elu", "Elu", "Elu", false, 5, [](const ActParams& p) { return forward(p.a, 1.0f); },
    [](const ActParams& p) { return backward(p.a, 1.0f); },
    [](const ActInputs& in, std::string* why) {
      ActParams p;
      p.a = attr_or(in, "alpha", 1.0f);
      // y > 0 must mean z > 0 for the derivative taken at the output.
      if (!(p.a > 0) || !(p.a < 1e30f)) *why = "alpha = " + std::to_string(p.a) + "; the kernels take a positive alpha";
      return p;
    }};

extern const ActivationDef kSelu{
    Activation::kSelu, "selu", "Selu", "Selu", false, 6, [](const ActParams& p) { return forward(p.a, p.b); },
    [](const ActParams& p) { return backward(p.a, p.b); },
    [](const ActInputs& in, std::string* why) {
      ActParams p;
      p.a = attr_or(in, "alpha", 1.67326319217681884765625f);
      p.b = attr_or(in, "gamma", 1.05070102214813232421875f);
      if (!(p.a > 0) || !(p.b > 0) || !std::isfinite(p.a * p.b)) *why = "alpha and gamma must be positive";
      return p;
    }};

}  // namespace wafersim::compiler::act_defs
