// Pass 5: per-PE firmware and routes as a fabric program. Each tile runs the same task set
// (forward per input wavelet, backward per gradient wavelet, asynchronous sends of partial sums,
// the SGD-with-momentum update at the end of a minibatch); each root adds the bias, applies the
// activation (or, for the last layer, softmax cross-entropy) and its derivative, and updates the
// bias. docs/compiler.md walks through the generated code.
#pragma once

#include <string>
#include <vector>

#include "compiler/kernel_graph.h"
#include "compiler/placement.h"
#include "compiler/routing.h"
#include "firmware/program.h"

namespace wafersim::compiler {

// Trainable state of the model on the host side: per layer, weights and momentum out x in
// (row-major), bias and its momentum.
struct ModelState {
  std::vector<std::vector<float>> w, v, b, vb;
  // Per layer, its LayerNorm's gamma and beta and their momenta (empty without one).
  std::vector<std::vector<float>> lg, lb, lvg, lvb;
  long long step = 0;  // minibatches done

  static ModelState from_graph(const KernelGraph& g);  // initial weights, zero momentum
};

struct TrainHyper {
  float lr = 0.01f;
  float momentum = 0.9f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // Adam's (the graph reference; MemoryX has its own)
};

// The program and where to find each piece of state in it.
struct Compiled {
  FabricProgram program;
  Plan plan;
  Routing routing;
  int input_colors_per_row = 0;
};

Compiled generate(const KernelGraph& g, const Plan& plan, const Routing& r, const ModelState& s, const TrainHyper& h,
                  const AsmTarget& t);

// Output names the loader reads back (firmware/program.h OutputSpec).
std::string out_w(int l, int a, int b);   // tile weights, k-major (in slice x out slice)
std::string out_v(int l, int a, int b);
std::string out_b(int l, int b);
std::string out_vb(int l, int b);
std::string out_ln(const char* what, int l);  // a LayerNorm's "g", "b", "vg", "vb" (its one root)
std::string out_updates(int x, int y);    // minibatches a PE has finished (fp32 count)

}  // namespace wafersim::compiler
