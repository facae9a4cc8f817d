// Pass 4: the paths between regions, from and to the edge I/O channels, and their colors. Every
// stream of wavelets is a net (a source and the routers it crosses, with their input and output
// ports); nets get colors greedily, in order, so that no router carries two nets on one color.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "compiler/placement.h"

namespace wafersim::compiler {

struct Hop {
  int x = 0, y = 0;
  uint8_t rx = 0, tx = 0;  // port bits (hw/router.h)
};

struct Net {
  std::string name;
  std::vector<Hop> hops;
  int color = -1;
};

// Net ids of each stream, -1 where a stream does not exist.
struct LayerNets {
  std::vector<int> xin;                 // [a]: input slice a into the tiles of line a
  std::vector<std::vector<int>> fchain; // [a][b]: tile (a, b)'s partial sum toward root b
  std::vector<int> dy;                  // [b]: root b's gradient to its tiles
  std::vector<std::vector<int>> dxchain;// [a][b]: tile (a, b)'s input gradient toward the previous root a
  // A residual connection into this layer's outputs (LayerPlan::residual = k): [b] the source's
  // root b (layer k-1's) to this layer's root b, and the sum's gradient back.
  std::vector<int> skip, skip_grad;
};

// A copy's nets (replicas: Plan::replicas copies, each with its own).
struct CopyNets {
  std::vector<LayerNets> layers;
  int label = -1, loss = -1;
};

// A PE's links in its column's gradient sum (replicas; codegen.cc, "The replicas' gradient
// sum"): the northward stream in from the PE south of it and out to the one north of it, the
// southward one the other way (-1 where the PE's copy sends none), and the multicast of the
// sums it takes its own from (copies other than the middle one).
struct SumNets {
  int nin = -1, nout = -1, sin = -1, sout = -1, dist = -1;
};

struct Routing {
  std::vector<Net> nets;
  std::vector<LayerNets> layers;  // copy 0's (copies[0].layers)
  int label = -1, loss = -1;      // copy 0's: channel -> loss root, loss root -> channel
  std::vector<CopyNets> copies;
  std::map<std::pair<int, int>, SumNets> sum;  // by PE, with more than one copy
  int colors_used = 0;

  int color(int net) const { return net < 0 ? -1 : nets[static_cast<size_t>(net)].color; }
};

// Builds every net of the plan (every copy's, and the gradient sum's columns) and assigns colors. Throws CompileError when some router would
// need more than `colors` colors, naming the PE.
Routing route_plan(const Plan& plan, const HwConfig& hw);

}  // namespace wafersim::compiler
