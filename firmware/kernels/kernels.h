// The kernel library: parameterised generators of PE images, routes and initial data, added to
// a FabricProgram. The compiler places these; tests prove them against plain C++ references
// (testbench/system/kernel_test.cc); docs/kernels.md describes each one's code and colors.
//
//   FabricProgram prog;
//   kernels::GemvParams g;  g.rect = {0, 1, 4, 4};  g.m = g.n = 256;
//   kernels::add_gemv(prog, g, a, x, asm_target(hw));
//   Fabric f(hw);  load_program(f, prog);  ... run ...  read_outputs(f, prog);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "firmware/kernels/kernel_util.h"
#include "firmware/program.h"
#include "hw/number_format.h"

namespace wafersim::kernels {

// A rectangle of PEs: x0..x0+w-1, y0..y0+h-1.
struct Rect {
  int x0 = 0, y0 = 0, w = 1, h = 1;
};

// Row broadcast: the westmost PE of each row of `rect` sends data[row] (len elements) east to
// every PE of its row (column broadcast: the northmost PE of each column sends south). Every PE
// of the rectangle ends with the vector in "buf" (outputs "bcast.ROW" / "bcast.COL" per line).
struct BroadcastParams {
  Rect rect;
  bool columns = false;
  uint32_t len = 16;
  NumFormat fmt = NumFormat::kF32;
  int color = 0;
};
void add_broadcast(FabricProgram& prog, const BroadcastParams& p, const std::vector<std::vector<float>>& data,
                   const AsmTarget& t);

// Reduce / allreduce over a rectangle: every PE holds data[(y-y0)*w + (x-x0)] (len elements) in
// "v". Each row reduces toward the root's column, then the root's column toward the root; with
// `all`, the root multicasts the sum back over the rectangle. The sum ends in "sum" at the root
// (output "sum") or at every PE (outputs "sum" at the root, "sum.X.Y" elsewhere). Colors:
// color_base onward (returned). Default root: the centre PE.
struct ReduceParams {
  Rect rect;
  uint32_t len = 1;
  NumFormat fmt = NumFormat::kF32;
  ReduceAlgo algo = ReduceAlgo::kChain;
  int root_x = -1, root_y = -1;  // absolute; -1 = centre (x0 + w/2, y0 + h/2)
  bool all = true;
  // The partial sums overwrite v instead of a copy of it (no vmov before the reduction, as the
  // published reduce implementations do); the sum is then read from v.
  bool in_place = false;
  // Each PE reads the cycle counter before its first reduction op and after its last one
  // (outputs "t.X.Y": start, end), as the published measurements time a collective:
  // max(end) - min(start).
  bool timed = false;
  int group = 0;  // two-phase: positions per group (0: ceil(sqrt(line)))
  int color_base = 0;
};
int add_reduce(FabricProgram& prog, const ReduceParams& p, const std::vector<std::vector<float>>& data,
               const AsmTarget& t);

// y = A x with A (m x n, row-major) tiled over rect (w x h PEs: PE (i, j) holds rows
// j*m/h.. and columns i*n/w.. of A, column-major, in `fmt`). The row above the rectangle holds
// feeder PEs that send x's segments south, one wavelet per element (fp32 bits of x rounded to
// `fmt`); each column multicasts its segment to its PEs, whose data task does
// y_tile += A[:, k] * x_k per wavelet (vaxpy, accumulated in `acc`). Partial sums are then
// reduced along each row toward the east column (chain or tree), which keeps y's segment
// (outputs "y", in row order). reps > 1 repeats the product (for benchmarks). Colors: color_base
// (x) and the reduction's from color_base + 1.
struct GemvParams {
  Rect rect;  // rect.y0 >= 1: the feeders run on row y0 - 1
  uint32_t m = 256, n = 256;
  NumFormat fmt = NumFormat::kF32;
  NumFormat acc = NumFormat::kF32;  // fp32, or the same as fmt
  ReduceAlgo algo = ReduceAlgo::kChain;
  uint32_t reps = 1;
  int color_base = 0;
};
void add_gemv(FabricProgram& prog, const GemvParams& p, const std::vector<float>& a, const std::vector<float>& x,
              const AsmTarget& t);

// c = op(a, b) on every PE of rect, len elements in `fmt`: op is one of add, sub, mul, max,
// cmpgt (binary) or relu, exp, recip (unary; b unused). data_a / data_b: one vector per PE in
// row-major PE order. Outputs "c.X.Y".
struct ElementwiseParams {
  Rect rect;
  std::string op = "add";
  uint32_t len = 16;
  NumFormat fmt = NumFormat::kF32;
};
void add_elementwise(FabricProgram& prog, const ElementwiseParams& p, const std::vector<std::vector<float>>& data_a,
                     const std::vector<std::vector<float>>& data_b, const AsmTarget& t);
bool elementwise_binary(const std::string& op);  // throws ConfigError for an unknown op

// MeshGEMV (WaferLLM, OSDI 2025): out[1, n] = x[1, m] W[m, n] on rect (w x h PEs). PE (i, j)
// holds W's rows j*m/h.. and columns i*n/w.. (row-major) and x's segment j (every PE of row j,
// in fmt, held as fp32 for the scalar operand); it computes its partial out segment with m/h
// vfmacs over its tile's rows (res = res + W[k, :] * x_k, rounded to fmt each time), the
// columns reduce them toward the middle row (two-phase: groups of `group` rows, then their
// leaders; 16-bit adds in fmt) and the root broadcasts the sum back up and down its column.
// Every PE of column i ends with out's segment i (outputs "out.X.Y"); `timed`: outputs "t.X.Y"
// (cycle counter before the local GEMV and after the broadcast). Colors: color_base .. +8.
struct MeshGemvParams {
  Rect rect;
  uint32_t m = 256, n = 256;
  NumFormat fmt = NumFormat::kF16;
  int group = 0;
  bool timed = true;
  uint32_t warmup = 0, reps = 1;  // untimed repeats, then timed ones (t spans the timed ones)
  int color_base = 0;
};
void add_meshgemv(FabricProgram& prog, const MeshGemvParams& p, const std::vector<float>& w, const std::vector<float>& x,
                  const AsmTarget& t);
// The host reference in the kernel's order (for its checks): per tile row j and column c,
// part = fl(part + W[k, c] x_k) over the tile's rows in order (fma, one rounding to fmt), then
// the column's partials summed in the two-phase plan's order (acc = fl(child + acc)). Returns
// out (n values), which every PE of the column must hold bit for bit.
std::vector<float> meshgemv_reference(const MeshGemvParams& p, const std::vector<float>& w, const std::vector<float>& x,
                                      int cb16_bias);

// STREAM (leightonw-cerebras/stream, as measured on a CS-2): every PE of rect runs `warmup`
// times, then once between two reads of the cycle counter, one vector op over SRAM of len
// elements in `fmt`: copy (dest = src0), scale (dest = s * src0), add (dest = src0 + src1) or
// triad (dest = src0 + s * src1). The arrays are 16-byte aligned and the k-th operand starts k
// elements in (fp32) or 3k (16-bit), as in the published kernel. Outputs "dest.X.Y" (len
// elements) and "cycles.X.Y" (the timed op's cycles, counter reads included).
struct StreamParams {
  Rect rect;
  std::string op = "copy";
  uint32_t len = 2048;
  NumFormat fmt = NumFormat::kF32;
  uint32_t warmup = 100;
  float scalar = 42.0f;
};
void add_stream(FabricProgram& prog, const StreamParams& p, const std::vector<std::vector<float>>& src0,
                const std::vector<std::vector<float>>& src1, const AsmTarget& t);
int stream_sources(const std::string& op);  // 1 or 2; throws ConfigError for an unknown op
// The host reference of one STREAM element: the op in fp32 on the (rounded) inputs, rounded
// once to fmt (b is unused by copy and scale).
float stream_reference(const std::string& op, float a, float b, float scalar, NumFormat fmt, int cb16_bias);

// The 25-point star stencil (Jacquelin et al., SC22; acoustic wave equation, second order in
// time, radius 4 in x, y, z): X and Y over rect (one PE per (x, y)), each PE's Z column of nz
// cells in SRAM as two time levels of nz + 8 cells (4 zero halo cells at each end), processed in
// Z blocks. Per block, four localized broadcast patterns (eastbound, westbound, southbound,
// northbound; 2 colors each) send every PE's block to the next 4 PEs of its row or column: in
// step s = 0..4 the roots are the PEs at q = s (mod 5) along the pattern, each root's copy comes
// back to it too, and the root's control wavelet moves the switch positions of the routers it
// passes to their next role. A microthread per pattern multiplies what arrives by the distance's
// coefficient (fabric to SRAM), then the main thread sums the 17 products, adds the 8 Z terms
// (fmacs) and writes u^(n+1) = sum - u^(n-1) over the older level. warmup untimed steps, then
// `steps` timed ones (outputs "t.X.Y": counter before the first timed step and after the last);
// "ua.X.Y" / "ub.X.Y": the two levels (nz cells). Colors: color_base .. +7.
struct StencilCoeffs {
  float self = 0;                 // the own cell: 2 + the centre weights of the three axes
  float x[4] = {}, y[4] = {}, z[4] = {};  // distance 1..4 on each axis
  // The eighth-order second difference on each axis, scaled by r = (V dt / h)^2.
  static StencilCoeffs wave(float r);
};
struct StencilParams {
  Rect rect;
  uint32_t nz = 1000;
  uint32_t block = 0;   // Z cells per block; 0: the fewest blocks that fit (the paper's rule)
  uint32_t steps = 1, warmup = 0;
  bool timed = true;
  StencilCoeffs coeffs = StencilCoeffs::wave(0.05f);
  int color_base = 0;
};
// u_prev = u^(n-1), u_cur = u^n: one Z column (nz cells) per PE, row-major PE order.
void add_stencil(FabricProgram& prog, const StencilParams& p, const std::vector<std::vector<float>>& u_prev,
                 const std::vector<std::vector<float>>& u_cur, const AsmTarget& t);
uint32_t stencil_block(const StencilParams& p, const AsmTarget& t);  // the block size add_stencil uses
// The host reference in the kernel's order (products rounded, summed own cell first, then each
// pattern's distances 1..4; Z terms by fma from -4 to 4): the ua columns then the ub columns
// after warmup + steps time steps.
std::vector<std::vector<float>> stencil_reference(const StencilParams& p, std::vector<std::vector<float>> u_prev,
                                                  std::vector<std::vector<float>> u_cur);

// The 3-D FFT of wsFFT (Orenes-Vera et al., ICS 2023): an n^3 complex fp32 array on n x n PEs
// from (x0, y0), PE (x, y) holding the pencil u(x, y, 0..n-1) (interleaved re, im: 2n floats).
// Superstep 1: a radix-2 decimation-in-frequency FFT along z in each PE (strided vector ops per
// butterfly column, vmuls + vfmacs for the twiddle product; natural order in, bit-reversed out).
// Then an all-to-all along each row (every PE's array streams east and west along a chain: a PE
// sends its own once the arrays of the PEs before it have passed, keeping element x of each),
// the FFT along x, the same along each column, the FFT along y. PE (x, y) ends with
// F(kx = rev(y), ky = rev(r), kz = rev(x)) at position r (rev: n's bit reversal; F the DFT with
// e^(-2 pi i / n)), output "out.X.Y"; `timed`: "t.X.Y" (counter at the start and the end).
// Colors: color_base .. +3.
struct FftParams {
  uint32_t n = 32;
  int x0 = 0, y0 = 0;
  bool timed = true;
  int color_base = 0;
};
void add_fft3d(FabricProgram& prog, const FftParams& p, const std::vector<std::vector<float>>& pencils,
               const AsmTarget& t);
// The host's FFT in the kernel's order (bit-exact), per PE in row-major order; its twiddles
// (wr, wi, -wi per k < n/2, rounded from double); n's bit reversal of v.
std::vector<std::vector<float>> fft3d_reference(uint32_t n, const std::vector<std::vector<float>>& pencils);
std::vector<float> fft_twiddles(uint32_t n);
uint32_t bit_reverse(uint32_t v, uint32_t n);

// A collective's time as the published measurements take it: max over PEs of their end reading
// - min of their start reading, from the outputs "t.X.Y" (start, end) of a `timed` kernel.
double timed_span(const std::vector<OutputValues>& out);

// Ping-pong: PE (x0, y0) sends len fp32 words east to PE (x0 + distance, y0), which echoes them
// straight back (fabric to fabric); `rounds` times. The echo lands in "echo" (output "echo").
// Cycles per round = len + round-trip latency once the stream is going.
struct PingPongParams {
  int x0 = 0, y0 = 0, distance = 1;
  uint32_t len = 64, rounds = 4;
  int color_base = 0;
};
void add_pingpong(FabricProgram& prog, const PingPongParams& p, const std::vector<float>& data, const AsmTarget& t);

}  // namespace wafersim::kernels
