// The host reference of the wafer's training math: the same operations in the same order as
// the generated firmware (partial sums per tile in input order, chains of partial sums in
// placement order, fused multiply-adds where the PEs use vaxpy), so that after any number of
// steps its weights and losses equal the wafer's bit for bit in fp32. Tests compare against it;
// `wafersim train` uses its forward pass to evaluate the read-back weights on the test set.
#pragma once

#include <vector>

#include "compiler/activation.h"
#include "compiler/codegen.h"
#include "compiler/kernel_graph.h"
#include "compiler/placement.h"

namespace wafersim::compiler {

class Reference {
 public:
  Reference(const KernelGraph& g, const Plan& plan, const TrainHyper& h, ModelState s);

  // Logits of one (normalised) sample.
  std::vector<float> forward(const float* x) const;
  // One minibatch; returns the per-sample losses. xs: batch pointers to normalised samples.
  // With replicas (Plan::replicas > 1), copy c's samples c, c + R, ... add their gradients up
  // in the copy's own buffers; their sums over the copies, in the order the wafer's column
  // streams add them (reference.cc), then go into the momentum before the update.
  // `after_lookahead`: with two minibatches in flight, the previous step did not drain, so the
  // first Plan::lookahead(l) samples passed layer l forward with the weights and biases before
  // the previous update; their backward passes use the current ones with those activations.
  std::vector<float> step(const std::vector<const float*>& xs, const std::vector<int>& labels, bool after_lookahead = false);
  const ModelState& state() const { return m_s; }

 private:
  // Forward through every layer; keeps inputs and outputs per layer. Returns logits.
  // `stale_sample` >= 0: the sample's position in a minibatch after a lookahead (layers whose
  // lookahead covers it use the weights before the last update).
  std::vector<float> run_forward(const float* x, std::vector<std::vector<float>>* inputs,
                                 std::vector<std::vector<float>>* outputs, int stale_sample = -1,
                                 std::vector<std::vector<float>>* pres = nullptr,
                                 std::vector<std::vector<float>>* xhats = nullptr, std::vector<float>* rstds = nullptr) const;

  const KernelGraph& m_g;
  Plan m_plan;
  TrainHyper m_h;
  ModelState m_s;
  ModelState m_before;  // the weights and biases before the last update (for stale samples)
};

// The activations as the PEs compute them: compiler/activation.h (act_fwd, act_bwd, act_grad).

// A LayerNorm as its root computes it (codegen.cc root_source): z in place to u = gamma x^ +
// beta, x^ and r = 1 / sqrt(var + eps) kept; and backward, g (the gradient at u) to the
// gradient at z, with vg += g x^ (fused) and vb += g.
void layer_norm(std::vector<float>* z, const std::vector<float>& gamma, const std::vector<float>& beta, float eps,
                std::vector<float>* xhat, float* r);
void layer_norm_grad(std::vector<float>* g, const std::vector<float>& xhat, float r, const std::vector<float>& gamma,
                     std::vector<float>* vg, std::vector<float>* vb);

// GELU as the PEs compute it (codegen.cc emit_gelu_fwd/emit_gelu_bwd; the same operations in
// the same order here, each rounded to fp32).
//   Erf form: gelu(z) = 0.5 (z + |z| erf(|z| / sqrt 2)), with erf(x) = 1 - P(t) e^(-x^2),
//   t = 1 / (1 + p x), P(t) = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) (Abramowitz and Stegun
//   7.1.26, |error| <= 1.5e-7); its derivative Phi(z) + z phi(z), Phi(z) = 0.5 + 0.5 sign(z)
//   erf(|z| / sqrt 2), phi(z) = e^(-z^2 / 2) / sqrt(2 pi).
//   Tanh form: gelu(z) = z sigma(v), v = 2 c (z + k z^3), c = sqrt(2 / pi), k = 0.044715 (that is
//   0.5 z (1 + tanh(v / 2))); its derivative sigma(v) + z sigma(v) (1 - sigma(v)) 2 c (1 + 3 k z^2).
namespace gelu {
constexpr float kP = 0.3275911f * 0.70710678118654752f;  // p / sqrt 2: t = 1 / (1 + p |z| / sqrt 2)
constexpr float kA1 = 0.254829592f, kA2 = -0.284496736f, kA3 = 1.421413741f, kA4 = -1.453152027f, kA5 = 1.061405429f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kK = 0.044715f;
constexpr float kTwoC = 2.0f * 0.79788456080286536f;  // 2 sqrt(2 / pi)
constexpr float kThreeK = 3.0f * 0.044715f;
}  // namespace gelu

// Softmax cross-entropy as the loss root computes it: returns the loss and writes the gradient
// (p - onehot) * (1 / batch) into g.
float softmax_xent(const std::vector<float>& logits, int label, int batch, std::vector<float>* g);

}  // namespace wafersim::compiler
