// Pass 4: the paths between regions, from and to the edge I/O channels, and their colors. Every
// stream of wavelets is a net (a source and the routers it crosses, with their input and output
// ports); nets get colors greedily, in order, so that no router carries two nets on one color.
#pragma once

#include <cstdint>
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
};

struct Routing {
  std::vector<Net> nets;
  std::vector<LayerNets> layers;
  int label = -1, loss = -1;  // channel -> loss root, loss root -> channel
  int colors_used = 0;

  int color(int net) const { return net < 0 ? -1 : nets[static_cast<size_t>(net)].color; }
};

// Builds every net of the plan and assigns colors. Throws CompileError when some router would
// need more than `colors` colors, naming the PE.
Routing route_plan(const Plan& plan, const HwConfig& hw);

}  // namespace wafersim::compiler
