// Weight-streaming code generation: the firmware of the feature-row PEs and the roots, their
// routes, and the order of every stream through the edge channels (what the host sends and what
// it gets back). docs/weight-streaming.md walks through it.
#pragma once

#include <string>
#include <vector>

#include "compiler/kernel_graph.h"
#include "compiler/ws_plan.h"
#include "firmware/program.h"

namespace wafersim::compiler {

// Colors of the weight-streaming program.
struct WsColors {
  int in = 0;        // West channel -> row: inputs (feature rows); labels and biases (root row)
  int w = 1;         // West channel -> feature row: weights
  int chain[2] = {2, 3};  // south down each column: partial sums, then dy slices; by feature row parity
  int ret = 4;       // north up each column from the root: layer outputs, then the whole dy
  int east[2] = {5, 6};   // west along each row into the West channel: dW (feature rows), loss and db (root row); by column parity
  // The grid layout only (WsPlan::grid): a band's stream from its channel up and down the relay
  // column (x 0); the dW gathered up and down the other relay column (x 1) into the channel
  // row, by distance from it: odd north, odd south, even (and the channel row's, west).
  int gin = 7;
  int gout[3] = {8, 9, 10};
  int count(bool grid = false) const { return grid ? 11 : 7; }
};

struct WsCompiled {
  FabricProgram program;
  WsPlan plan;
  WsColors colors;
  float inv_batch = 1;  // the loss gradient's scale: 1 / global batch
};

// Throws CompileError when the colors do not fit router.colors.
WsCompiled generate_ws(const WsPlan& p, const AsmTarget& t);

// Output name of a PE's step counter (fp32 count of finished minibatches).
std::string ws_out_steps(int x, int y);

}  // namespace wafersim::compiler
