// Optimizer arithmetic shared by MemoryX (tlm/memoryx.cc, weight streaming) and the graph
// compiler's host reference (compiler/ops/sgd.cc): torch.optim.Adam (no weight decay, no
// amsgrad) as PyTorch 1.13's _single_tensor_adam and CPU kernels round it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wafersim::compiler {

// The double a float hyperparameter stands for: the shortest decimal that rounds to it
// (0.9f -> 0.9). PyTorch computes Adam's per-step scalars in Python doubles from the values the
// user wrote; from these, a config of 0.9 reproduces torch.optim.Adam(betas=(0.9, ...)) bit for
// bit, where double(0.9f) = 0.89999997... would drift by several ulps within a few steps.
double decimal_value(float x);

// With t the tensor's step count after this step and b1, b2, lr the decimal values of the config
// floats, the scalars are computed in double, then rounded once to fp32:
//   a1 = fl32(1 - b1)   a2 = fl32(1 - b2)   neg_step = fl32(-lr / (1 - b1^t))
//   s2 = fl32(sqrt(1 - b2^t))   and eps, b1, b2 as fp32
struct AdamScalars {
  float a1 = 0, a2 = 0, neg_step = 0, s2 = 0, beta1 = 0, beta2 = 0, eps = 0;
};
AdamScalars adam_scalars(float lr, float beta1, float beta2, float eps, int64_t t);

// Per element, fp32 (no product here feeds a plain add, so no contraction can change it):
//   m = fma(a1, g, fl(m * b1))           exp_avg.mul_(beta1).add_(grad, alpha=1-beta1)
//   v = fma(fl(a2 * g), g, fl(v * b2))   exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1-beta2)
//   d = fl(fl(fl(sqrt(v)) / s2) + eps)   denom = (exp_avg_sq.sqrt() / bc2_sqrt).add_(eps)
//   w = fl(w + fl(fl(neg_step * m) / d)) param.addcdiv_(exp_avg, denom, value=-step_size)
// That is w -= lr * mhat / (sqrt(vhat) + eps) with mhat = m / (1 - b1^t), vhat = v / (1 - b2^t),
// factored the way PyTorch factors it (bias corrections folded into the step size and s2).
void adam_step(const AdamScalars& s, float* w, float* m, float* v, const float* g, size_t n);

}  // namespace wafersim::compiler
