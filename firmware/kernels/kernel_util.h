// Building blocks of the kernel generators: a per-PE assembly writer that hands out queues and
// descriptor registers, a route table that merges multicast branches, and reduction trees over
// a line of PEs. Internal to firmware/kernels/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "firmware/program.h"
#include "hw/number_format.h"

namespace wafersim::kernels {

// One PE's program as text. Queues and descriptor registers are allocated in order of use.
class PeAsm {
 public:
  // The input/output queue bound to `color`, declared on first use: queue `q`, or (-1) the
  // lowest free one (queues differ in depth: core.inq_depths, core.outq_depths).
  int inq(int color, int q = -1);
  int outq(int color, int q = -1);
  // A fresh descriptor register name ("d7").
  std::string dsd();
  // A fabric input/output descriptor of `len` elements on `color` (declares the queue).
  std::string fin(int color, uint32_t len);
  std::string fout(int color, uint32_t len);
  // A memory descriptor over a data symbol.
  std::string mem(const std::string& symbol, uint32_t len, int stride = 1);
  // Descriptor register d (from dsd() or mem()) set to a memory descriptor over a data symbol
  // from here on: code that walks many shapes in turn needs no register per shape.
  void mem(const std::string& d, const std::string& symbol, uint32_t len, int stride = 1);
  void task(const std::string& decl) { m_head << ".task " << decl << "\n"; }
  void data(const std::string& decl) { m_data << decl << "\n"; }
  void equ(const std::string& name, int64_t v) { m_head << ".equ " << name << ", " << v << "\n"; }
  // Code; a line ending in ':' is a label.
  PeAsm& operator<<(const std::string& line);
  std::string text() const;

 private:
  std::map<int, int> m_inq, m_outq;
  int m_next_dsd = 0;
  std::ostringstream m_head, m_data, m_code;
};

// Routes being built: each (PE, color) gets the union of the input and output ports given to it,
// so multicast trees can be added branch by branch.
class RouteTable {
 public:
  void add(int x, int y, int color, uint8_t rx, uint8_t tx);
  // A path of wavelets from (x0,y0) to (x1,y1) along one row or column: the source takes
  // from its ramp, the PEs in between pass it on, the destination hands it to its ramp.
  void path(int x0, int y0, int x1, int y1, int color);
  // A route with switch positions (a color taken by nothing else at that PE).
  void add_switched(int x, int y, int color, const ColorRoute& r);
  void emit(FabricProgram& prog) const;

 private:
  std::map<std::tuple<int, int, int>, std::pair<uint8_t, uint8_t>> m_routes;
  std::map<std::tuple<int, int, int>, ColorRoute> m_switched;
};

// A reduction over a line of n PEs toward `root` (an index into the line). Every non-root
// position sends once to its parent; `children` lists who sends to each position, in the order
// the position adds them. chain: neighbours, 2 colors per side; tree: an in-order binary tree
// (a position has at most one child on each side), 2 colors per level.
// two-phase: chains inside groups of consecutive positions toward each group's leader (its
// middle; the root in the root's group), then a chain across the leaders toward the root, each
// of its edges a path of `group` hops through the PEs between (Luczynski et al.'s two-phase
// reduce; WaferLLM's K-tree with K = 2); 8 colors.
// binomial: Luczynski et al.'s tree. On each side of the root, numbered from the far end
// (v = 0 farthest, m the root), position v with t trailing one bits sends to min(v + 2^t, m):
// a binomial tree whose children of one parent share a color and arrive nearest first, each
// nearer one forwarding the farther ones' data through its router once its own has left (a
// switch position that holds). 2 colors per side that has positions, whatever n; one-shot (the
// switches stay).
enum class ReduceAlgo { kChain, kTree, kTwoPhase, kBinomial };
const char* reduce_algo_name(ReduceAlgo a);
ReduceAlgo parse_reduce_algo(const std::string& s);  // throws ConfigError

struct LinePlan {
  std::vector<int> parent;                 // -1 at the root
  std::vector<std::vector<int>> children;  // in adding order
  std::vector<int> color;                  // color of the edge to the parent (-1 at the root)
  int colors = 0;                          // colors used, from color_base
  // binomial: after its send a position advances its router (swadv), or, the last child of its
  // parent, sends a control wavelet that also moves the parent's router on to forward.
  bool switched = false;
  // Luczynski et al.'s cycle model of this plan for vectors of `len` elements:
  // max(C, E / N + L) + (2 T_R + 1) D, C the most vectors one position takes, E the wavelet-hops,
  // N the links used, L the farthest position's distance, D the depth (docs/validation.md).
  double model_cycles(uint32_t len, int t_r = 2) const;
  int root = 0;
  int color_base = 0;
};
// `group`: positions per group of the two-phase reduction (0: ceil(sqrt(n))).
LinePlan plan_line_reduce(int n, int root, ReduceAlgo algo, int color_base, int group = 0);

// The code of one position of a line reduction. `acc` is a memory descriptor holding this PE's
// contribution, which the code may overwrite: the sum of the subtree ends in `acc` at the root;
// elsewhere it goes to the parent (the last child's partial sum streams fabric to fabric, added
// on the way). A position adds its children in order: acc = in + acc. `fmt` is the add format.
void emit_line_reduce(PeAsm& a, const LinePlan& plan, int pos, uint32_t len, const std::string& fmt,
                      const std::string& acc);

// Routes of a line reduction whose positions sit at `xy` (one row or one column).
void route_line_reduce(RouteTable& routes, const LinePlan& plan, const std::vector<std::pair<int, int>>& xy);

// An fp32 value as the assembler's raw-bits literal ("0x3f800000"): exact, whatever the value.
std::string f32_literal(float v);

// The value of `v` rounded to `fmt` and widened back (what a PE holds after loading it).
float round_to(NumFormat fmt, float v, int cb16_bias);
// Bytes of `v` in `fmt`, little-endian, for data patches.
std::vector<uint8_t> encode(NumFormat fmt, const std::vector<float>& v, int cb16_bias);

// Returns the index of an image with this exact source, assembling it (named prefix_N) if new.
int intern_image(FabricProgram& prog, const std::string& prefix, const std::string& source, const AsmTarget& t);

// Throws ConfigError unless `colors_needed` colors from `base` fit the target.
void need_colors(const char* kernel, int base, int colors_needed, const AsmTarget& t);

}  // namespace wafersim::kernels
