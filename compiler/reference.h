// The host reference of the wafer's training math: the same operations in the same order as
// the generated firmware (partial sums per tile in input order, chains of partial sums in
// placement order, fused multiply-adds where the PEs use vaxpy), so that after any number of
// steps its weights and losses equal the wafer's bit for bit in fp32. Tests compare against it;
// `wafersim train` uses its forward pass to evaluate the read-back weights on the test set.
#pragma once

#include <vector>

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
                                 std::vector<std::vector<float>>* outputs, int stale_sample = -1) const;

  const KernelGraph& m_g;
  Plan m_plan;
  TrainHyper m_h;
  ModelState m_s;
  ModelState m_before;  // the weights and biases before the last update (for stale samples)
};

// An activation and its derivative (given the output y and the gradient g) as the PEs compute them.
// `alpha`: LeakyRelu's slope (max(v, alpha v) forward; backward t = (y > 0 ? g : 0), then
// (g - t) alpha + t, as the PEs compute them).
float act_fwd(Activation a, float v, float alpha = 0);
float act_bwd(Activation a, float y, float g, float alpha = 0);

// Softmax cross-entropy as the loss root computes it: returns the loss and writes the gradient
// (p - onehot) * (1 / batch) into g.
float softmax_xent(const std::vector<float>& logits, int label, int batch, std::vector<float>* g);

}  // namespace wafersim::compiler
