// The model's own preprocessing of its input: elementwise Add, Sub, Mul and Div of the model
// input by constants (a scalar, or broadcast per channel or per feature), before any layer, as
// a model that normalises its images itself ((x - mean) / std inside forward()) exports it. No
// parameter takes part and no gradient flows through it, so the input workers apply it as they
// feed each sample (after data.scale, data.mean and data.std), in the order of the graph, with
// the same fp32 operation as ONNX's (docs/compiler.md#input-preprocessing).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace wafersim::compiler {

struct InputPrep {
  enum Kind { kAdd, kSub, kMul, kDiv };
  Kind kind = kAdd;
  bool const_first = false;  // c - x or c / x (the constant is the node's first input)
  std::vector<float> c;      // one value, or one per input feature (broadcast at compile time)
  std::string node;          // the ONNX node

  float apply(float x, size_t feature) const {
    const float k = c.size() == 1 ? c[0] : c[feature];
    const float a = const_first ? k : x, b = const_first ? x : k;
    switch (kind) {
      case kAdd: return a + b;
      case kSub: return a - b;
      case kMul: return a * b;
      case kDiv: return a / b;
    }
    return x;
  }
  const char* symbol() const { return kind == kAdd ? "+" : kind == kSub ? "-" : kind == kMul ? "*" : "/"; }
};

inline float apply_input_prep(const std::vector<InputPrep>& ops, float x, size_t feature) {
  for (const InputPrep& p : ops) x = p.apply(x, feature);
  return x;
}

}  // namespace wafersim::compiler
