// The host reference of weight-streaming training: one system's gradients for its shard, with
// every fp32 operation in the order the weight-streaming firmware performs it (partial sums per
// feature row chained down the columns, the bias at the root, dx accumulated over outputs in
// stream order, dW and db summed over a column's samples and then chained west over the
// columns). The wafer's gradients equal these bit for bit.
#pragma once

#include <vector>

#include "compiler/kernel_graph.h"
#include "compiler/ws_plan.h"

namespace wafersim::compiler {

struct WsGrads {
  std::vector<std::vector<float>> dw;  // per layer, out x in
  std::vector<std::vector<float>> db;  // per layer, out
  std::vector<std::vector<float>> dg, dbeta;  // per layer with a LayerNorm: its scale's and bias's (else empty)
  float loss_sum = 0;                  // sum of the shard's losses, in column order
};

// The LayerNorms' scales and biases per layer (empty vectors for a layer without one; an empty
// list for a model without any).
struct WsNorms {
  std::vector<std::vector<float>> g, b;
};

// xs: the shard's normalised samples (plan.shard of them), labels alike; w and b the current
// weights (out x in) and biases per layer.
WsGrads ws_reference_grads(const WsPlan& p, const std::vector<std::vector<float>>& w,
                           const std::vector<std::vector<float>>& b, const std::vector<const float*>& xs,
                           const std::vector<int>& labels, const WsNorms& norms = {});

// Logits of one sample with the weight-streaming forward order.
std::vector<float> ws_reference_forward(const WsPlan& p, const std::vector<std::vector<float>>& w,
                                        const std::vector<std::vector<float>>& b, const float* x, const WsNorms& norms = {});

// Logits of many samples, each bit-identical to ws_reference_forward of that sample; the
// samples are processed side by side, so the loops vectorise across them, on `threads` host
// threads (the evaluation of a large model on the test set).
std::vector<std::vector<float>> ws_reference_forward_batch(const WsPlan& p, const std::vector<std::vector<float>>& w,
                                                           const std::vector<std::vector<float>>& b,
                                                           const std::vector<const float*>& xs, int threads = 1,
                                                           const WsNorms& norms = {});

}  // namespace wafersim::compiler
