// The host reference of a training graph (docs/graph-compiler.md, step 3): it interprets the IR
// op by op on whole minibatches in fp32, every op in a fixed order of operations (documented
// with each op class in compiler/ops/) that the wafer's kernels share, so that tests can hold a
// kernel's firmware to it bit for bit. On a dense chain whose Dense ops carry the tiles of a
// layer-pipelined Plan (set_dense_tiles), it is today's Reference (compiler/reference.cc) bit
// for bit; on other graphs (residual adds, LayerNorm, GELU, LeakyReLU) it agrees with PyTorch
// within fp32 rounding (the test `GraphReference.*`).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "compiler/autodiff.h"
#include "compiler/codegen.h"
#include "compiler/placement.h"

namespace wafersim::compiler {

// The i-th Dense op of g gets the tiles of plan.layers[i] (in_tiles, out_tiles: their
// offsets), the accumulation order of its partial sums on the wafer.
void set_dense_tiles(ir::Graph& g, const Plan& plan);

class GraphReference {
 public:
  GraphReference(const TrainGraph& t, const TrainHyper& h);

  // One minibatch (xs: pointers to samples of the data input's per-sample size); returns the
  // per-sample losses; the parameters and their momenta move on.
  std::vector<float> step(const std::vector<const float*>& xs, const std::vector<int>& labels);
  // The same for a regression graph (loss "mse"): each sample's targets, the output's size.
  std::vector<float> step(const std::vector<const float*>& xs, const std::vector<const float*>& targets);
  // The logits of the samples, row by row.
  std::vector<float> logits(const std::vector<const float*>& xs);
  // A parameter's values (by its name in the graph), and its momentum.
  const std::vector<float>& param(const std::string& name) const;
  const std::vector<float>& momentum(const std::string& name) const;  // SGD's; Adam's: state("exp_avg", name)
  const std::vector<float>& state(const std::string& what, const std::string& name) const;

 private:
  void run(const std::vector<const float*>& xs, const std::vector<int>* labels, const std::vector<const float*>* targets, int until);
  std::vector<float> finish_step();

  const TrainGraph& m_t;
  TrainHyper m_h;
  int m_batch = 0;
  std::vector<std::vector<float>> m_val;        // per tensor
  std::vector<std::vector<int64_t>> m_shape;    // per tensor, the batch as a number
  std::map<int, std::vector<float>> m_pre;      // Dense outputs' pre-activations
  std::vector<int> m_labels;
  int64_t m_step = 0;
};

}  // namespace wafersim::compiler
