// Clip to [min, max] (torch's ReLU6 and Hardtanh export it), exactly: max(z, min), then
// min(y, max) = -max(-y, -max); backward g where min < y < max (torch's hardtanh derivative;
// the bounds from the node's constant inputs, or its attributes below opset 11).
#include <limits>

#include "compiler/activation.h"

namespace wafersim::compiler::act_defs {

using S = Slot;

namespace {

// A bound: the constant input i, its attribute below opset 11, or `dflt` when absent.
float bound(const ActInputs& in, size_t i, const char* key, float dflt, std::string* why) {
  if (in.opset < 11) {
    const OnnxAttr* a = in.attr(key);
    return a && a->kind == OnnxAttr::kFloat ? a->f : dflt;
  }
  if (!in.given(i)) return dflt;
  const std::vector<float>* v = in.input(i);
  if (!v || v->size() != 1) {
    *why = std::string("its ") + key + " is not a constant scalar; the kernels clip to constants";
    return dflt;
  }
  return (*v)[0];
}

}  // namespace

extern const ActivationDef kClip{
    Activation::kClip, "clip", "Clip", "Clip", false, 6,
    [](const ActParams& p) {
      return ActProgram().fill(S::kT0, p.a).max(S::kY, S::kZ, S::kT0).fill(S::kT0, -p.b).muls(S::kY, S::kY, -1.0f).max(S::kY, S::kY, S::kT0).muls(S::kY, S::kY, -1.0f);
    },
    [](const ActParams& p) {
      return ActProgram().fill(S::kT0, p.a).cmpgt(S::kT0, S::kY, S::kT0).mul(S::kG, S::kG, S::kT0).fill(S::kT0, p.b).cmpgt(S::kT0, S::kT0, S::kY).mul(S::kG, S::kG, S::kT0);
    },
    [](const ActInputs& in, std::string* why) {
      ActParams p;
      constexpr float kInf = std::numeric_limits<float>::infinity();
      p.a = bound(in, 1, "min", -kInf, why);
      p.b = bound(in, 2, "max", kInf, why);
      if (why->empty() && !(p.a < p.b)) *why = "min " + std::to_string(p.a) + " is not below max " + std::to_string(p.b);
      return p;
    }};

}  // namespace wafersim::compiler::act_defs
