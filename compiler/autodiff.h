// Autodiff in the compiler (docs/graph-compiler.md, step 3): the training graph of a rewritten
// forward graph. The loss (softmax cross-entropy over the classes of the graph's output; a
// Softmax or LogSoftmax that ends the graph is absorbed, as the dense path does) seeds the
// gradient; the forward ops are visited last to first and each op kind's gradient rule adds
// backward ops to the same IR; then one update op per parameter (SGD with momentum).
//
// Order, which the host reference and the wafer must share bit for bit:
// - a value read by several ops gets its gradient as the sum of their contributions in the order
//   of those ops in the forward graph (Add after Add);
// - a parameter's gradient accumulates into its momentum state (kState "momentum:NAME", which
//   holds momentum x the last step's at the start of a step): each op that reads the parameter,
//   in forward order, adds its contribution sample by sample (DenseGradWeight: one fused
//   multiply-add per sample, as the tiles' vaxpy), then SgdMomentum writes W - lr V and
//   momentum V.
//
// Ops autodiff adds (Role kLoss, kBackward, kUpdate):
//   SoftmaxXent(logits, labels) -> loss [N], dlogits (already divided by the batch)
//   ActivationGrad(z or -1, y, dy) -> dz            (attribute activation; Dense's own z: -1)
//   DenseGradInput(dz, W) -> dx                     (transB, and the Dense op's tiles)
//   DenseGradWeight(dz, x, V) -> V', DenseGradBias(dz, V) -> V'
//   LayerNormGrad(x, scale or -1, dy) -> dx, LayerNormGradScale(x, dy, V) -> V', LayerNormGradBias(dy, V) -> V'
//   SumTo(dy) -> the gradient of a broadcast operand (summed over the broadcast dimensions)
//   SumToGrad(dy, V) -> V' (the same into a parameter's momentum)
//   ReshapeAs(dy) -> dy with the input's shape (Flatten, Reshape, Identity, Dropout)
//   SgdMomentum(W, V) -> W', V'
#pragma once

#include <string>
#include <vector>

#include "compiler/ir/graph.h"

namespace wafersim::compiler {

struct TrainGraph {
  ir::Graph g;               // forward ops first, then the loss, the backward ops and the updates
  int forward_ops = 0;       // ops [0, forward_ops) are the forward graph's
  int data = -1, labels = -1, logits = -1, loss = -1;  // labels: the targets of mse
  bool regression = false;                             // loss "mse"
  struct Param {
    int value = -1, state = -1;          // the parameter and its momentum (Adam: exp_avg)
    int new_value = -1, new_state = -1;  // after the step (the update's outputs)
    int state2 = -1, new_state2 = -1;    // Adam's exp_avg_sq
  };
  std::vector<Param> params;  // in the forward graph's tensor order
};

// `optimizer`: "sgd" (with momentum, as above) or "adam" (torch.optim.Adam as MemoryX runs it:
// each parameter's contributions add up from zeros (a Zeros op) into the step's gradient, then
// AdamUpdate(W, G, exp_avg, exp_avg_sq) with states "exp_avg:NAME" and "exp_avg_sq:NAME").
// Throws CompileError naming the op kinds that have no gradient rule yet (grouped), a graph
// output that is not [N, classes], a model with no parameter, or an unknown optimizer.
// `loss`: "softmax_xent" (labels: int64 [N]) or "mse" (targets: float, the output's shape; a
// final Softmax is not absorbed then).
TrainGraph autodiff(const ir::Graph& forward, const std::string& optimizer = "sgd", const std::string& loss = "softmax_xent");

}  // namespace wafersim::compiler
