#include "compiler/ws_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <limits>
#include <tuple>

#include "compiler/activation.h"
#include "compiler/onnx_model.h"
#include "compiler/placement.h"
#include "firmware/isa.h"

namespace wafersim::compiler {
namespace {

// Cost model of the generated firmware (cycles), per output of a pass on a feature-row PE with
// a slice of nI inputs and m samples: the weight row's fabric read (one wavelet per cycle), then
// per sample a vector op or two over nI elements (vmul + vsum forward; vaxpy for dW, and one
// more for dx, backward), or on a row that runs feature by feature two per input feature over
// the m samples, and the loops' scalar instructions; docs/weight-streaming.md.
constexpr double kPerOutput = 14;    // dispatch, chain send, counters
constexpr double kVaxpyBank = 1.6;   // cycles per element of a feature-by-feature vaxpy (a strided column), bank conflicts included
constexpr long kCodeBytes = 1536;    // a PE's code besides the per-layer blocks
constexpr long kLayerCode = 1024;    // code per layer (forward and backward blocks)
constexpr long kConvCode = 640;      // a convolution's code besides (its taps' loops, ws_codegen.cc)
constexpr int kMaxDwBlock = 64;     // the most dW rows a block sends at once (WsPlan::dw_block)
constexpr double kRelayTurn = 12;    // a grid relay's loop turn per output (three reads and their bookkeeping)

// A row's backward pass of a dense layer, for the estimate and the choice of dW blocks: its
// outputs, the main thread's cycles per output (output by output), the datapath's share of them,
// the dW row's length, the cycles of the pass besides its outputs, and the cycles an output's dW
// take through the row's channel (shared in a grid band).
struct RowBwd {
  double outs, per_out, busy, ni, fixed, drain;
};

// Elements a cycle of an activation program's step on the core's units.
int step_rate(const CoreConfig& core, Op op) {
  const int rate = op == Op::kVmul || op == Op::kVmuls                       ? core.mul_fp32
                   : op == Op::kVexp || op == Op::kVrecip || op == Op::kVlog ? core.special
                   : op == Op::kVfmac || op == Op::kVfmacs                   ? core.fmac_fp32
                                                                             : core.add_fp32;
  return std::max(1, rate);
}

std::vector<int> split(int n, int p) {
  std::vector<int> off(static_cast<size_t>(p) + 1);
  for (int i = 0; i <= p; ++i) off[static_cast<size_t>(i)] = static_cast<int>(static_cast<long long>(n) * i / p);
  return off;
}

// A boundary of n features in units of `unit` (a convolution's planes) over p rows: whole
// units, evenly; with fewer units than rows, one each to the first rows (the others' slices are
// empty: an image's channels enter through the first rows only).
std::vector<int> split_units(int n, int unit, int p) {
  if (unit <= 1) return split(n, p);
  const int u = n / unit;
  std::vector<int> off = split(u, p);
  for (int i = 0; i <= p; ++i) off[static_cast<size_t>(i)] = (u >= p ? off[static_cast<size_t>(i)] : std::min(i, u)) * unit;
  return off;
}

std::string S(long long v) { return std::to_string(v); }

// Do two reads of `bytes` at byte offsets a and b touch a common bank (16-bit words interleaved
// over `banks` banks)?
bool banks_meet(long a, long b, long bytes, int banks) {
  for (long i = a / 2; i < (a + bytes) / 2; ++i) {
    for (long j = b / 2; j < (b + bytes) / 2; ++j) {
      if (i % banks == j % banks) return true;
    }
  }
  return false;
}

// Cycles of m per-sample ops over ni fp32 elements at `rate` a step that pair a weight or dW row
// (4 bytes past a 16-byte line, ws_codegen.cc) with sample s's row of a slice (s * ni * 4 bytes
// past one): a step takes one more cycle when the two reads meet in a bank (docs/core.md).
double paired_cycles(long ni, long m, int rate, int banks) {
  const long k = std::max(1, rate), steps = (ni + k - 1) / k;
  double cycles = 0;
  // Sample s's row starts (s * ni * 4) % 16 bytes past a line: that repeats every 4 samples.
  for (long j = 0; j < std::min(m, 4L); ++j) {
    const long count = (m - j + 3) / 4;  // samples s < m with s % 4 == j
    cycles += static_cast<double>(count * steps * (banks_meet(4, (j * ni * 4) % 16, 4 * k, banks) ? 2 : 1));
  }
  return cycles;
}

// The narrowest layer input: no more feature rows than it (each row needs a slice of it).
// In features; a convolution's input or a convolution's output counts its channels' planes as
// one each, but spreads over any number of rows (rows past its channels hold empty slices of it).
int narrowest_input(const KernelGraph& g) {
  int narrow = std::numeric_limits<int>::max();
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const DenseKernel& d = g.layers[l];
    if (d.conv.on || (l > 0 && g.layers[l - 1].conv.on)) continue;
    narrow = std::min(narrow, d.in);
  }
  return narrow == std::numeric_limits<int>::max() ? g.layers.front().in : narrow;
}

std::string fmt(double v, int prec = 1) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

}  // namespace

namespace {

// Bands of the grid layout. Each West channel row but the root's has two: a West band of its
// row and up to (io.spacing - 1) / 2 rows above (fewer at the fabric's top), and an East band of
// up to io.spacing / 2 rows below; so bands never meet. Spread (packed false): up to one row
// per channel, West bands of one row each (the rows layout's rows); more rows take both edges,
// as evenly as the bands' room allows. Packed: from the top, a channel's two bands before the
// next channel's (place_ws tries both).
std::vector<int> band_room(const HwConfig& hw) {
  const int H = hw.fabric.height, S = std::max(1, hw.io.spacing), n = hw.io.channels(H) - 1;
  std::vector<int> room;
  for (int k = 0; k < n; ++k) {
    room.push_back(std::min((S + 1) / 2, hw.io.channel_row(H, k) + 1));
    room.push_back(S / 2);
  }
  return room;
}

void place_bands(const HwConfig& hw, int rows, bool packed, WsPlan* p) {
  const int H = hw.fabric.height, nch = hw.io.channels(H);
  const std::vector<int> room = band_room(hw);
  std::vector<int> n(room.size(), 0);
  if (!packed && rows <= nch - 1) {
    for (int k = 0; k < rows; ++k) n[static_cast<size_t>(2 * k)] = 1;
  } else {
    // Each row to the band with the fewest rows that has room. Ties: packed, the first (a
    // channel's West band, its East band, the next channel's ...); spread, West before East (so
    // that every channel opens before any carries two bands), then the channel's order.
    auto before = [&](size_t i, size_t j) {
      if (n[i] != n[j]) return n[i] < n[j];
      return packed || i % 2 == j % 2 ? i < j : i % 2 < j % 2;
    };
    for (int r = 0; r < rows; ++r) {
      size_t best = room.size();
      for (size_t i = 0; i < room.size(); ++i) {
        if (n[i] < room[i] && (best == room.size() || before(i, best))) best = i;
      }
      ++n[best];
    }
  }
  p->band_channel.clear();
  p->band_y.clear();
  p->band_east.clear();
  p->band_first.assign(1, 0);
  p->row_y.clear();
  p->row_channel.clear();
  for (size_t i = 0; i < n.size(); ++i) {
    if (n[i] == 0) continue;
    const int k = static_cast<int>(i / 2), east = static_cast<int>(i % 2), y = hw.io.channel_row(H, k);
    for (int j = 0; j < n[i]; ++j) {
      p->row_y.push_back(east ? y + 1 + j : y - n[i] + 1 + j);
      p->row_channel.push_back(k);
    }
    p->band_channel.push_back(k);
    p->band_y.push_back(y);
    p->band_east.push_back(east);
    p->band_first.push_back(p->band_first.back() + n[i]);
  }
  const int last = p->band_channel.back();
  p->root_channel = last + 1;
  p->root_y = hw.io.channel_row(H, last + 1);
}

// The most feature rows a layout allows: rows, one per West channel row but the root's and no
// more than the narrowest layer input; grid, a band of at most io.spacing rows per such channel
// and no more rows than the widest layer input (a row past a narrower layer's width holds an
// empty slice of it).
// A branch (a layer reading an earlier boundary than its own) needs a slice of both boundaries
// on every row (ws_codegen.cc takes the pass's and the boundary's work together): no more rows
// than either is wide.
int ws_branch_room(const KernelGraph& g, std::string* which) {
  int branch = std::numeric_limits<int>::max();
  for (int l = 1; l < static_cast<int>(g.layers.size()); ++l) {
    const int w = std::min(g.layers[static_cast<size_t>(l)].in, g.layers[static_cast<size_t>(l) - 1].out);
    if (g.input_of(l) != l && w < branch) {
      branch = w;
      if (which) *which = g.layers[static_cast<size_t>(l)].name;
    }
  }
  return branch;
}

int ws_rows_room(const KernelGraph& g, const HwConfig& hw, bool grid) {
  const int nch = hw.io.channels(hw.fabric.height);
  const int branch = ws_branch_room(g, nullptr);
  if (!grid) return std::min({nch - 1, narrowest_input(g), branch});
  int wide = 1, room = 0;
  for (const DenseKernel& d : g.layers) wide = std::max(wide, d.in);
  for (int r : band_room(hw)) room += r;
  return std::min({room, wide, branch});
}

// The cost of a convolution's passes on its feature rows (ws_codegen.cc, conv_forward and
// conv_backward) and at the roots (bias, activation, pooling; its backward), per pass. Per
// output, per sample: the plane's clearing, per tap its table entry and descriptors (kTapF,
// kTapB instructions and a loop turn) and its vector ops over the tap's window (two-dimensional
// operands: one element a step): forward a vaxpy, backward a vaxpy into dx (not in the first
// layer) and a vfmac into the dW element; the plane down the column. Forward, the root's work
// per output runs beside the rows' (it takes output o while they compute o + 1), so a pass
// takes the slower of the two per output.
WsLayerEst conv_estimate(const WsPlan& p, const HwConfig& hw, int l, long long weights) {
  constexpr double kTapF = 22, kTapB = 36, kTapB0 = 28;  // a tap's scalar instructions (ws_codegen.cc; backward without dx)
  constexpr double kSample = 10;            // a sample's loop turn and bookkeeping
  constexpr double kRootOp = 6;             // a root vector op's issue and its loop's share
  const ConvParams& c = p.conv[static_cast<size_t>(l)];
  const PoolParams& q = p.pool[static_cast<size_t>(l)];
  const double m = p.m, refetch = hw.core.decode_latency - 1, add = std::max(1, hw.core.add_fp32);
  const double P = static_cast<double>(c.ho) * c.wo, Pq = p.qplane(l), co = c.co;
  // Per feature row, its channels' taps (the slowest row bounds the pass; an empty slice passes
  // the planes of sums on).
  // The taps' vector ops with their bank conflicts as the layer-pipelined tiles' (placement.cc
  // conv_tap_cycles): the samples' planes of inputs one after another in X (as a tile's ring
  // slots) on a multiple of the banks, one plane of sums (cacc) `cacc_pad` elements past one
  // (ws_codegen.cc lays them out so); forward a vaxpy a window element, backward a two-cycle
  // vfmac and (not in the first layer) a vaxpy into dx.
  const bool dx = l > 0;
  double row_f = 0, row_b = 0;
  for (int a = 0; a < p.rows; ++a) {
    const ConvParams s = p.conv_slice(l, a);
    if (s.c == 0) {
      row_f = std::max(row_f, m * (P / add + kSample) + kPerOutput);
      continue;
    }
    int live = 0;  // taps with a window
    for (const ConvTap& t : conv_taps(s)) live += t.oy1 > t.oy0;
    const double taps = s.taps();
    const ConvTapCycles v = conv_tap_cycles(s, 1, dx, std::max(1, p.m), hw.core, -p.cacc_pad);
    row_f = std::max(row_f, m * (P / add + v.fwd + live * kTapF + taps * (5 + refetch) + P + kSample) + kPerOutput);
    row_b = std::max(row_b, m * (v.bwd + live * (dx ? kTapB : kTapB0) + taps * (8 + refetch) + kSample) + taps / add + kPerOutput);
  }
  // The root per output: the sums in, the bias and activation (a few ops over m P), the pooling
  // (an op per pooled row and window tap), the pooled plane back up; backward the pooled
  // gradient in, its spreading over the windows (four ops per tap and row: max), the
  // derivative, db, the gradient up.
  // Padded: only the taps inside the plane, over the windows that have them, each with its
  // lengths and bases set (codegen.cc emit_pool_fwd/bwd's padded form).
  double tap_ops = 0, tap_elems = 0;
  const bool whole = q.kind != PoolParams::kNone && whole_plane(c, q);
  if (whole) {
    // The whole plane's pooling (GlobalAveragePool's): forward one vsum over it, backward one
    // vfill of it (codegen.cc emit_pool_fwd/bwd), not a window tap each.
  } else if (q.kind != PoolParams::kNone && !q.padded()) {
    tap_ops = static_cast<double>(q.hq) * q.kh * q.kw, tap_elems = tap_ops * q.wq;
  } else if (q.kind != PoolParams::kNone) {
    for (int ky = 0; ky < q.kh; ++ky) {
      for (int kx = 0; kx < q.kw; ++kx) {
        const PoolSpan sp = pool_span(c, q, ky, kx);  // an op on each of its rows; lengths and bases 0.6 of one
        tap_ops += 1.6 * (sp.y1 - sp.y0), tap_elems += static_cast<double>(sp.y1 - sp.y0) * (sp.x1 - sp.x0);
      }
    }
    tap_elems += static_cast<double>(q.hq) * q.wq;  // each row's fill (forward) or copy (backward)
  }
  double root_f = m * (4.0 * P + Pq) + m * (tap_elems + tap_ops * kRootOp) + kRootOp * 6;
  double root_b = m * (4.0 * P + Pq) + m * (4.0 * tap_elems + tap_ops * 4 * kRootOp) + kRootOp * 6;
  if (whole) root_f += m * (P + 2 * kRootOp), root_b += m * (P + 2 * kRootOp);
  // A residual connection at the root: forward the sum (a vadd over m P) and the kept planes (a
  // vmov over m Pq); backward the sum's gradient added (m Pq) and the source's share kept (m P).
  if (p.root_sum(l + 1)) root_f += m * P + kRootOp, root_b += m * P + kRootOp;
  if (p.root_kept(l + 1)) root_f += m * Pq + kRootOp, root_b += m * Pq + kRootOp;
  if (act_needs_pre(p.act[static_cast<size_t>(l)])) {
    // z kept (a copy), the activation's program over m P (one element a cycle an op); backward
    // its derivative's program, and a max pooling's y again from z.
    const ActivationDef& d = activation(p.act[static_cast<size_t>(l)]);
    const double f = static_cast<double>(d.fwd(p.act_par[static_cast<size_t>(l)]).steps().size());
    const double b = static_cast<double>(d.bwd(p.act_par[static_cast<size_t>(l)]).steps().size());
    root_f += m * P * (f + 1) + kRootOp * (f + 1);
    root_b += m * P * (b + (q.kind == PoolParams::kMax ? f : 0)) + kRootOp * (b + f);
  }
  // The planes the backward pass needs (y or z) go up with the pooled ones and come back down
  // with the pooled gradient (the rows keep them: WsPlan::ret_unit), and a max pooling's
  // outputs are computed again from them.
  root_f += m * P + kRootOp;
  root_b += m * P + kRootOp;
  if (q.kind == PoolParams::kMax) root_b += m * (tap_elems + tap_ops * kRootOp) + (whole ? m * P : 0.0);
  WsLayerEst e;
  e.weights = weights;
  e.stream_cycles = static_cast<double>(weights) / p.channel_rate;
  e.fwd_stream_cycles = e.bwd_stream_cycles = e.stream_cycles;
  e.fwd_cycles = co * std::max(row_f, root_f) + std::min(row_f, root_f);
  // Backward, the roots spread each output's gradient as its planes come down, while the rows
  // work on the output before: the slower of the two per output.
  e.bwd_cycles = co * std::max(row_b, root_b) + std::min(row_b, root_b);
  e.egress_cycles = static_cast<double>(weights) / p.channel_rate;
  e.turn_cycles = (p.root_y - p.row_y.front()) * hw.router.hop_latency + kPerOutput;
  return e;
}

// The mapping of o's rows and columns (0: the most rows the budget allows, and the fewest
// columns whose activations fit), with its errors.
WsPlan place_ws_shape(const KernelGraph& g, const HwConfig& hw, const WsOptions& o) {
  const int L = static_cast<int>(g.layers.size());
  if (L == 0) throw CompileError("the model has no dense layers");
  if (o.systems < 1) throw CompileError("--systems must be at least 1 (got " + S(o.systems) + ")");
  if (o.batch < 1) throw CompileError("the batch must be at least 1 (got " + S(o.batch) + ")");
  if (o.batch % o.systems != 0) {
    throw CompileError("the batch (" + S(o.batch) + ") must split equally over " + S(o.systems) + " systems");
  }
  WsPlan p;
  p.layers = L;
  p.fabric_width = hw.fabric.width;
  p.sram_banks = hw.core.sram_banks;
  p.batch = o.batch;
  p.systems = o.systems;
  p.shard = o.batch / o.systems;
  const int W = hw.fabric.width, H = hw.fabric.height;
  // Rows: every channel row but the last (the root's); each feature row needs a slice of every
  // layer's input.
  const int nch = hw.io.channels(H);
  if (nch < 2) {
    throw CompileError("weight-streaming mode needs at least 2 I/O channel rows (feature rows and a root row); the " +
                       S(W) + " x " + S(H) + " fabric has " + S(std::max(nch, 0)) +
                       " (io.channels_per_edge, io.spacing)");
  }
  const int narrow = narrowest_input(g);
  p.grid = o.grid;
  p.x0 = o.grid ? 2 : 0;
  const int room = ws_rows_room(g, hw, o.grid);  // feature rows the fabric and the model allow
  int rows = room;
  if (o.rows < 0) throw CompileError("ws rows must be >= 0 (got " + S(o.rows) + ")");
  if (o.rows > 0) {
    std::string branch_layer;
    if (const int br = ws_branch_room(g, &branch_layer); o.rows > br) {
      throw CompileError(S(o.rows) + " feature rows: the branch " + branch_layer + " needs a slice of the boundary it reads and of its own on "
                         "every row, and the narrower has " + S(br) + " features: at most " + S(br) + " rows");
    }
    if (o.grid) {
      if (o.rows > room) {
        throw CompileError(S(o.rows) + " feature rows: the grid layout has room for " + S(room) + " (" + S(nch - 1) +
                           " bands of at most io.spacing = " + S(hw.io.spacing) +
                           " rows, and no more rows than the widest layer input)");
      }
    } else {
      if (o.rows > nch - 1) {
        throw CompileError(S(o.rows) + " feature rows need " + S(o.rows + 1) + " I/O channel rows; the fabric has " + S(nch) +
                           " (ws.layout grid puts several rows on a channel)");
      }
      if (o.rows > narrow) {
        throw CompileError(S(o.rows) + " feature rows: the narrowest layer input has only " + S(narrow) + " features");
      }
    }
    rows = o.rows;
  }
  p.width.push_back(g.layers.front().in);
  for (const DenseKernel& d : g.layers) {
    p.width.push_back(d.out);
    p.conv.push_back(d.conv);
    p.pool.push_back(d.pool);
    p.outs.push_back(d.w_out());
    p.wcols.push_back(d.w_in());
    p.ln_on.push_back(d.ln.on ? 1 : 0);
    p.ln_post.push_back(d.ln.on && d.ln.post ? 1 : 0);
    p.ln_eps.push_back(d.ln.eps);
    p.act.push_back(d.act);
    p.act_par.push_back(d.act_par);
    p.residual.push_back(d.residual);
    p.input.push_back(d.input < 0 ? static_cast<int>(p.input.size()) : d.input);
    p.join_mul.push_back(d.join_mul ? 1 : 0);
    p.join_sub.push_back(d.join_sub);
    p.residual_pre.push_back(d.residual_pre ? 1 : 0);
  }
  for (int l = 0; l < L; ++l) {
    const int k = p.residual[static_cast<size_t>(l)];
    if (k < 0) continue;
    // Around a convolution the sum comes before any pooling: of its planes before it.
    const long sum_width = p.is_conv(l) ? static_cast<long>(p.outs[static_cast<size_t>(l)]) * p.oplane(l) : p.width[static_cast<size_t>(l) + 1];
    if (k > l || l + 1 >= L || p.width[static_cast<size_t>(k)] != sum_width ||
        std::count(p.residual.begin(), p.residual.end(), k) > 1) {
      throw CompileError("layer " + g.layers[static_cast<size_t>(l)].name + ": a residual connection from boundary " + S(k) +
                         " must come from an earlier layer's input of the same width, fed to a later layer, "
                         "and each boundary feeds at most one");
    }
  }
  if (o.columns < 0) throw CompileError("ws columns must be >= 0 (got " + S(o.columns) + ")");
  if (o.columns > 0) {
    if (o.columns > W - 2 * p.x0) {
      throw CompileError(S(o.columns) + " sample columns do not fit a fabric " + S(W) + " wide" +
                         (o.grid ? " beside the grid's 4 relay columns (2 on each edge)" : ""));
    }
    if (o.columns > p.shard) {
      throw CompileError(S(o.columns) + " sample columns for a shard of " + S(p.shard) + " samples per system: at most one column a sample");
    }
  }
  const long sram = static_cast<long>(hw.core.sram_kb) * 1024;
  // SRAM of a feature-row PE: inputs of every layer, the gathered dy, dx, scratch; and of a root.
  auto row_bytes = [&](long m) {
    long worst = 0;
    for (int a = 0; a < p.rows; ++a) {
      long longest_dx = 0;
      for (int l = 1; l < L; ++l) longest_dx = std::max(longest_dx, p.len(l, a) * m);
      long gelu_scratch = 4 * longest_dx;  // counted once, with the first GELU

      long x = 0, dx = 0, dy = 0, ni = 1;
      for (int l = 0; l < L; ++l) {
        x += p.len(l, a) * m;
        // A residual connection or gated join: the row keeps layer l's activated output apart
        // from the sum (R, for the activation's derivative). Where the sum comes before the
        // activation the derivative is taken at Z: no R. Around convolutions the roots hold it
        // (root_sum). Boundary l's gradient from its other readers (G: the join it feeds, a
        // branch reading it; WsPlan::has_g).
        if (const int k = p.residual[static_cast<size_t>(l)]; k >= 0 && !p.root_sum(l + 1)) {
          x += (p.res_pre(l) ? 0 : p.len(l + 1, a)) * m + 8;  // with G's alignment, where the join's source has one
        }
        if (p.has_g(l)) x += p.len(l, a) * m + (p.residual_target(l) >= 0 ? 0 : 8);
        // A GELU: z of its output's slice (Z), and four scratch vectors of the longest dx.
        if (l + 1 < L && p.rows_act(l)) {
          x += p.len(l + 1, a) * m + 4 + gelu_scratch;
          gelu_scratch = 0;
        }
        if (l > 0) dx = std::max(dx, p.len(l, a) * m);
        dy = std::max(dy, static_cast<long>(p.dz_streamed(l) ? 2 : p.outs[static_cast<size_t>(l)]) * p.oplane(l) * m);
        if (p.is_conv(l) && l + 1 < L) {
          // Its outputs' slice with their kept planes as they come (in dy), and the kept planes
          // with the pooled gradient of the row's channels (YR: ws_codegen.cc).
          const long own = static_cast<long>(p.chans(l + 1, a)) * p.ret_unit(l) * m;
          dy = std::max(dy, own);
          x += own + 4;
        }
        ni = std::max(ni, static_cast<long>(p.wlen(l, a)));
        // A convolution: its taps' table (4 words each) and the plane of one output's sums.
        if (p.is_conv(l)) x += 4L * p.wlen(l, a) + p.oplane(l) + 8;
      }
      // X of every layer, dx and its activation scratch, the gathered dy, acc and the products'
      // scratch of the feature-by-feature passes, two weight buffers and two dW rows
      // (ws_codegen.cc), a few words.
      // Alignment: up to 12 bytes before each X, dx and the weight rows, which round up to 4 words.
      // The pad that keeps the feature-by-feature scratch off acc's banks: under banks / 2 words.
      // dW blocks (dw_block > 1): two of dw_block rows each, a word of pad.
      const long blocks = p.dw_block > 1 ? 2L * p.dw_block * ni + 4 : 0;
      // A model with convolutions counts the activations' vector of ones only where one needs it
      // (its dx is the largest buffer after dy) and each convolution's longer code.
      long ones = dx, conv_code = 0;
      if (p.any_conv()) {
        ones = 0;
        for (int l = 0; l + 1 < L; ++l) {
          const Activation act = p.act[static_cast<size_t>(l)];
          if (act_uses_ones(act, p.act_par[static_cast<size_t>(l)]) || p.rows_act(l)) ones = dx;
          if (p.is_conv(l)) conv_code += kConvCode;
        }
      }
      // Code that grows with the phases (ws_codegen.cc): the return read's start of a phase by
      // its task (four instructions a phase), and with dW blocks each phase's loop bounds of
      // the blocks (eight) and each backward pass's block tests and last block (twelve).
      // Unrolled per-sample loops: up to six instructions a sample and layer.
      const long unrolled = m <= kWsUnrolledSamples ? 6L * m * L : 0;
      const long phase_code = static_cast<long>(kInstrBytes) * (8L * L + unrolled + (p.dw_block > 1 ? 16L * L + 12L * L : 0));
      worst = std::max(worst, kCodeBytes + kLayerCode * L + conv_code + phase_code +
                                  4 * (x + dx + ones + dy + 2 * m + 4 * (ni + 3) + 8 + hw.core.sram_banks / 2 + blocks) + 16 * (L + 2));
    }
    return worst;
  };
  const long nl = p.width.back();
  // A root's SRAM (root_source in ws_codegen.cc): the logits and their gradients per sample, six
  // vectors of the classes for the loss, six of the samples, scalars; with `db`, also a buffer
  // of every layer's db, which lets the roots send each layer's db west in one send
  // (WsPlan::root_db_buffer) where it fits.
  long widths = 0;
  for (int l = 0; l < L; ++l) widths += p.root_params(l);
  // A convolution's root holds one output's planes before and after the pooling (the rows keep
  // the layer's for the backward pass), and its per-output vectors hold a plane per sample.
  long conv_kept = 0, conv_table = 0, plane = 1, ln_words = 0, ln_widest = 0, pre_planes = 0, kept_one = 0;
  for (int l = 0; l < L; ++l) {
    if (p.has_ln(l)) {
      ln_words += 4L * p.outs[static_cast<size_t>(l)] + 8;
      ln_widest = std::max(ln_widest, static_cast<long>(p.outs[static_cast<size_t>(l)]));
    }
    if (!p.is_conv(l)) continue;
    // One output's planes before and after the pooling (YK, QK; the rows keep the layer's).
    kept_one = std::max(kept_one, static_cast<long>(p.oplane(l) + p.qplane(l)));
    // A residual connection's source planes and their gradient (SK, GK: ws_codegen.cc).
    if (p.root_kept(l + 1)) conv_kept += 2L * p.outs[static_cast<size_t>(l)] * p.qplane(l) + 8;
    const PoolParams& q = p.pool[static_cast<size_t>(l)];
    if (q.kind == PoolParams::kAvg && !pool_uniform(q)) conv_table += p.qplane(l);  // its table of 1 / count
    plane = std::max(plane, static_cast<long>(p.oplane(l)));
    if (act_needs_pre(p.act[static_cast<size_t>(l)])) {  // cpy, and cpt3 for a fourth scratch (ws_codegen.cc)
      pre_planes = std::max(pre_planes, act_temps(p.act[static_cast<size_t>(l)], p.act_par[static_cast<size_t>(l)]) > 3 ? 2L : 1L);
    }
  }
  conv_kept += kept_one ? kept_one + 8 : 0;
  // A LayerNorm's root keeps the layer's outputs and x^ of its samples (2 n m), r (m), gamma,
  // beta and their gradients (4 n), and scratch of the widest (3 n).
  long ln_m = 0;
  // After the activation also y (or z) for its derivative (LY: n m).
  for (int l = 0; l < L; ++l) ln_m += p.has_ln(l) ? (p.has_ln_post(l) ? 3L : 2L) * p.outs[static_cast<size_t>(l)] + 1 : 0;
  auto root_bytes = [&](long m, bool db = false) {
    return kCodeBytes + kLayerCode * L + 4 * (2 * nl * m + 6 * nl + (6 + pre_planes) * m * plane + conv_kept * m + conv_table + ln_m * m + ln_words +
                                              (ln_widest ? 3 * ln_widest + 4 : 0) + 16 + (db ? widths : 0));
  };
  // The longest operand one descriptor covers in the firmware with m samples per column
  // (ws_codegen.cc): a feature row's slice of a layer input, the whole dy of a layer, the root's
  // logits. A descriptor's length is 16 bits, so more columns are taken where one would not do
  // (the other columns' labels, which no buffer holds, are dropped in chunks; the rows' inputs
  // never reach a core that does not keep them: a ramp filter).
  auto longest = [&](long m) {
    long n = 0;
    for (int a = 0; a < p.rows; ++a) {
      for (int l = 0; l < L; ++l) n = std::max(n, p.len(l, a) * m);
    }
    for (int l = 0; l < L; ++l) n = std::max(n, static_cast<long>(p.outs[static_cast<size_t>(l)]) * p.oplane(l) * m);
    // A convolution's planes passed down the column at its backward pass's start (the rows above
    // the last row's channels: up to every output's, with their kept planes; ws_codegen.cc).
    for (int l = 0; l + 1 < L; ++l) {
      if (p.is_conv(l)) n = std::max(n, static_cast<long>(p.outs[static_cast<size_t>(l)]) * p.ret_unit(l) * m);
    }
    return n;
  };
  // The root reads its logits sample by sample with a stride of m (a 12-bit field of dmem).
  auto fits = [&](long m) {
    return row_bytes(m) <= sram && root_bytes(m) <= sram && longest(m) <= kMaxDsdLength && m <= kMaxDsdStride;
  };
  // The mapping with r feature rows: each row's slice of every boundary, and the columns (the
  // shard's samples spread over them, m per column).
  auto shape = [&](int r) {
    p.rows = r;
    p.off.clear();
    for (int j = 0; j < L; ++j) p.off.push_back(split_units(p.width[static_cast<size_t>(j)], p.unit(j), r));
    if (o.columns > 0) {
      p.cols = o.columns;
    } else {
      // Default: one column (the whole shard on each feature row's PE), more only when a PE's
      // activations would not fit its SRAM or one descriptor. More columns simulate more
      // samples/s on the wafer but cost host time in proportion (every column runs every
      // weight's task); docs/weight-streaming.md.
      p.cols = 1;
      for (int c = 2; c <= std::min(p.shard, W - 2 * p.x0) && !fits((p.shard + p.cols - 1) / p.cols); ++c) p.cols = c;
    }
  };
  // The PE budget (compile.max_pes, as in layer-pipelined mode; 0: none): a mapping takes
  // (rows + 1) x columns PEs. Without ws.rows, the most feature rows whose mapping fits it.
  if (o.max_pes < 0) throw CompileError("compile.max_pes must be 0 (no limit) or positive (got " + S(o.max_pes) + ")");
  p.rows_room = room;
  shape(rows);
  if (o.max_pes > 0 && o.rows == 0) {
    while (rows > 1 && p.pes() > o.max_pes) shape(--rows);
  }
  if (o.max_pes > 0 && p.pes() > o.max_pes) {
    throw CompileError("weight-streaming: " + S(rows) + " feature row(s) x " + S(p.cols) + " sample column(s) and " + S(p.cols) +
                       " root(s) take " + S(p.pes()) + " PEs, more than compile.max_pes = " + S(o.max_pes) + "; use " +
                       (o.rows > 0 ? "fewer ws.rows or ws.columns, or " : std::string()) +
                       "a larger compile.max_pes (0: no limit)");
  }
  p.pe_budget = o.max_pes;
  p.budget_bound = o.rows == 0 && rows < room;
  if (o.grid) {
    place_bands(hw, rows, o.pack == 1, &p);
  } else {
    for (int a = 0; a < rows; ++a) {
      p.row_channel.push_back(a);
      p.row_y.push_back(hw.io.channel_row(H, a));
    }
    p.root_channel = rows;
    p.root_y = hw.io.channel_row(H, rows);
  }
  p.m = (p.shard + p.cols - 1) / p.cols;
  const long m = p.m;
  p.row_bytes = row_bytes(m);
  p.root_db_buffer = root_bytes(m, true) <= sram;
  p.root_bytes = root_bytes(m, p.root_db_buffer);
  if (p.row_bytes > sram && p.any_conv() && m == 1) {
    // One sample a column and still too large: its planes do not fit one PE.
    int widest = -1;
    long most = 0;
    for (int l = 0; l < L; ++l) {
      const long n = static_cast<long>(p.outs[static_cast<size_t>(l)]) * p.oplane(l);
      if (p.is_conv(l) && n > most) most = n, widest = l;
    }
    const ConvParams& c = p.conv[static_cast<size_t>(widest)];
    throw CompileError("weight-streaming: a feature row holds its channels' planes whole, of every boundary (a convolution's "
                       "with the planes its backward pass needs), two outputs' gradient planes and a plane of sums "
                       "(docs/weight-streaming.md#convolutions): with " + S(rows) + " feature rows and one sample per column a row needs " +
                       S(p.row_bytes) + " bytes of SRAM, the core has " + S(sram) + "; the largest output is that of '" +
                       g.layers[static_cast<size_t>(widest)].name + "', " + S(c.co) + " x " + S(c.ho) + " x " + S(c.wo) +
                       ". Use more feature rows (lower io.spacing), fewer channels or smaller planes (a stride, a pooling earlier), or a "
                       "larger core.sram_kb; layer-pipelined mode (--mode layer-pipelined, or --mode auto) trains such CNNs");
  }
  if (p.row_bytes > sram) {
    // A row's PE holds the gathered dy of the widest layer output whole (ws_codegen.cc), however
    // many rows share the inputs: where that alone (with code and an empty slice) outgrows SRAM,
    // only fewer samples per column help; say how many fit and what batch that allows.
    long widest_out = 1;
    for (int l = 0; l < L; ++l) widest_out = std::max(widest_out, static_cast<long>(p.width[static_cast<size_t>(l) + 1]));
    auto floor_bytes = [&](long mm) {
      return kCodeBytes + kLayerCode * L + 4 * (widest_out * mm + 2 * mm + 4 * 4 + 8 + hw.core.sram_banks / 2) + 16 * (L + 2);
    };
    if (floor_bytes(m) > sram) {
      long fit = 0;
      while (fit + 1 < m && row_bytes(fit + 1) <= sram) ++fit;
      const long most_cols = W - 2 * p.x0;
      throw CompileError("weight-streaming: a feature-row PE holds the whole gradient dy of the widest layer (" + S(widest_out) +
                         " outputs x " + S(m) + " samples per column = " + S(4 * widest_out * m) +
                         " bytes) besides its slices, and the core has " + S(sram) + " bytes; " +
                         (fit == 0 ? std::string("not even one sample per column fits: use a larger core.sram_kb or a narrower model")
                                   : "with " + S(rows) + " feature rows at most " + S(fit) + " sample(s) per column fit, so at most " + S(fit * most_cols) +
                                         " samples per system on this fabric's " + S(most_cols) + " columns (the batch gives " +
                                         S(p.shard) + "): use a smaller batch, more systems (--systems), or a larger core.sram_kb"));
    }
    throw CompileError("weight-streaming: a feature-row PE needs " + S(p.row_bytes) + " bytes of SRAM (" + S(rows) +
                       " feature rows, " + S(p.m) + " samples per column), the core has " + S(sram) +
                       "; use " +
                       (p.budget_bound ? "a larger compile.max_pes (it allows " + S(rows) + " of " + S(room) + " feature rows), "
                                       : std::string("more feature rows (lower io.spacing), ")) +
                       "more sample columns, or a smaller batch");
  }
  if (p.root_bytes > sram) {
    throw CompileError("weight-streaming: a root PE needs " + S(p.root_bytes) + " bytes of SRAM for " + S(nl) +
                       " logits x " + S(p.m) + " samples, the core has " + S(sram) +
                       (p.any_conv() ? std::string("; a root holds one output's planes of its samples (before and after the pooling) "
                                                   "and a residual sum's source planes and their gradient: use fewer channels or smaller "
                                                   "planes, or a larger core.sram_kb; layer-pipelined mode (--mode layer-pipelined; "
                                                   "--mode auto picks it where the model fits) trains such CNNs")
                                     : std::string()));
  }
  if (m > kMaxDsdStride) {
    throw CompileError("weight-streaming: " + S(p.m) + " samples per column; a root reads its logits with a stride of the " +
                       "samples per column, at most 2047 (a descriptor's stride field); use more sample columns" +
                       (o.columns > 0 ? std::string(" (ws.columns)") : std::string()) + " or a smaller batch");
  }
  if (longest(m) > kMaxDsdLength) {
    throw CompileError("weight-streaming: with " + S(p.m) + " samples per column a PE holds an operand of " + S(longest(m)) +
                       " elements, longer than one descriptor (65535); use more sample columns" +
                       (o.columns > 0 ? std::string(" (ws.columns)") : std::string(" (the fabric is " + S(W) + " wide)")) +
                       " or a smaller batch");
  }

  p.channel_rate = std::min(1.0, hw.io.channel_gbps * 1e3 / (32.0 * hw.fabric.clock_mhz));
  const double fmac = hw.core.fmac_fp32, add = hw.core.add_fp32;
  // A loop's taken branch refetches: decode_latency - 1 cycles more per turn than its instructions.
  const double refetch = hw.core.decode_latency - 1;
  // Wavelets the way from a row's channel to a PE's core buffers while the core takes none: a
  // router buffer and the weights' input queue (ws_codegen.cc binds inputs to queue 0, weights
  // to 1). The channel's own queue is on the host's side of its rate limit (hw/edge_io.h), so it
  // does not let the channel run on; counting it put fc1's passes of a 784-64-64-64-10 MLP (4
  // rows x 16 columns, 4 samples a column) 19 % under the run, per output.
  const std::vector<int> inq = hw.core.inq();
  const double buffered = hw.router.buffer_depth + (inq.size() > 1 ? inq[1] : 0);
  const int banks = hw.core.sram_banks;
  // The convolutions' plane of sums (cacc) starts `cacc_pad` elements past a multiple of the
  // banks, where their inputs (X, on a multiple) and it share the fewest banks in the taps'
  // vaxpys (conv_tap_cycles), over every convolution.
  if (banks >= 2) {
    double best = -1;
    for (int pad = 0; pad < std::max(1, banks / 2); ++pad) {
      double f = 0;
      for (int l = 0; l < L; ++l) {
        if (p.is_conv(l)) f += conv_tap_cycles(p.conv[static_cast<size_t>(l)], 1, l > 0, std::max(1, p.m), hw.core, -pad).fwd;
      }
      if (best < 0 || f < best) best = f, p.cacc_pad = pad;
    }
  }
  // Per dense layer and row, its backward pass's per-output cycles (dW blocks choose from them).
  std::vector<std::vector<RowBwd>> rowb(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    WsLayerEst e;
    const DenseKernel& d = g.layers[static_cast<size_t>(l)];
    e.weights = static_cast<long long>(d.w_in()) * d.w_out();
    if (p.is_conv(l)) {
      p.est.push_back(conv_estimate(p, hw, l, e.weights));
      continue;
    }
    // The wavelets per output through the channel that feeds row a: WsPlan::channel_len (in the
    // grid the band's relays split them: each reads them all, a loop turn per output where two
    // or more rows share the band's stream, else one read for the layer).
    const int li = p.in(l);  // the boundary the layer reads (a branch: an earlier one)
    auto channel_len = [&](int a) { return static_cast<double>(p.channel_len(li, a)); };
    double relay = 0;
    for (int b = 0; p.grid && b < p.bands(); ++b) {
      int used = 0;
      double n = 0;
      for (int r = p.band_first[static_cast<size_t>(b)]; r < p.band_first[static_cast<size_t>(b) + 1]; ++r) {
        used += p.len(li, r) > 0;
        n += p.len(li, r);
      }
      if (used > 1) relay = std::max(relay, d.out * (n + kRelayTurn));
    }
    double maxlen = 0;
    for (int a = 0; a < rows; ++a) maxlen = std::max(maxlen, channel_len(a));
    e.stream_cycles = std::max(maxlen * d.out / p.channel_rate, relay);
    // Per output: the vector ops per sample, the chain or the dW row's clearing, the dispatch.
    // The weight row is read (and, backward, the dW row sent) by microthreads while the
    // previous output computes, so only the pass's first read is on the critical path; the
    // reads' pace is the stream bound (max in ws_compile_report). The forward vmul and the
    // backward vaxpys pair a weight or dW row with a sample row, a step at the multiply or FMAC
    // rate, one more cycle when their reads meet in a bank (paired_cycles); vsum at the add rate.
    // With several columns the dW row's send is a vadd, which needs the datapath the main
    // thread's ops hold, so it does not overlap them. A row that runs feature by feature
    // (WsPlan::by_feature) does per input feature a vmuls and a vadd over the m samples forward,
    // a vaxpy and a vfmac backward (the vfmac's three reads take two cycles per element); a
    // strided operand (the slice's column when it is longer than one) moves one element a step,
    // and the vmuls multiplies at the multiply rate.
    e.fwd_cycles = 0;
    e.bwd_cycles = 0;
    // The share of a `burst` of busy cycles through which a channel keeps going: what the
    // buffers on its way hold of what it moves meanwhile.
    auto cover = [&](double burst) { return std::min(1.0, buffered / std::max(1.0, p.channel_rate * burst)); };
    for (int a = 0; a < rows; ++a) {
      const double ni = p.len(li, a), nb = p.len(l, a);  // the slices of the layer's input and of boundary l
      double fwd, bwd;
      // The datapath's busy cycles per output backward (and the longest run of them).
      double busy_b = ni * m * (li > 0 ? 3.0 : 2.0), burst_b = m * (li > 0 ? 3.0 : 2.0);
      // Per output, the scalar instructions of ws_codegen.cc's row_source counted one by one
      // (a cycle each, a taken branch decode_latency, a task's start too) besides the vector
      // ops: the task's start, the prefetch of the next weights (6 and a taken branch), the
      // op's setup, the loop (its branch taken but for the last turn), the partial sums down
      // the column (a fabric operand: an element a step), the buffers' swap, the counters and
      // exit. Backward: the dW row's clearing, the loop, the send's issue (or with dW blocks the
      // block's test, ws_codegen.cc: 3 more). `busy` counts the cycles the ops hold the datapath.
      const double D = hw.core.decode_latency, R = refetch;
      const double pre = l > 0 && p.rows_act(l - 1) ? 1 + R : 0.0;
      const double wts = l > 0 ? 6 + R : 0.0, clear = 2 + std::ceil(ni / add);
      double busy;
      if (p.by_feature(l, a)) {
        const double col_rate = ni > 1 ? 1.0 : add;  // elements per cycle of an op over a column
        // dx's column: strided over a slice longer than one (bank conflicts: kVaxpyBank), else contiguous.
        const double dx_op = li > 0 ? (ni > 1 ? kVaxpyBank : 1.0) * m / std::min(col_rate, fmac) : 0.0;
        fwd = D + pre + 6 + R + std::ceil(m / add) + 6 + ni * (1 + m / std::min(col_rate, static_cast<double>(hw.core.mul_fp32)) + std::ceil(m / add) + 5) +
              R * (ni - 1) + m + 5 + R + 1;
        bwd = D + wts + clear + 9 + (li > 0 ? 3 : 0) + ni * ((li > 0 ? 2 + dx_op : 0.0) + 1 + 2 * m + 6) + R * (ni - 1) + 5 + R + 2 + (l == 0);
        busy = ni * (dx_op + 2 * m);
        e.fwd_stream_cycles = std::max(e.fwd_stream_cycles, e.stream_cycles);
        e.bwd_stream_cycles = std::max(e.bwd_stream_cycles, e.stream_cycles);
      } else {
        const long n = static_cast<long>(ni), ms = static_cast<long>(m);
        busy = (li > 0 ? 2 : 1) * paired_cycles(n, ms, hw.core.fmac_fp32, banks);
        if (m <= kWsUnrolledSamples) {
          // Unrolled: per sample a store forward, a load backward, and the operands' steps
          // between samples; no loop counter.
          fwd = D + pre + 6 + R + 2 + paired_cycles(n, ms, hw.core.mul_fp32, banks) + m * (std::ceil(ni / add) + 1) + (m - 1) + m + 5 + R + 1;
          bwd = D + wts + clear + (li > 0 ? 4 : 2) + m + (m - 1) * (li > 0 ? 2 : 1) + busy + 1 + 5 + R + 2 + (l == 0);
        } else {
          fwd = D + pre + 6 + R + 4 + paired_cycles(n, ms, hw.core.mul_fp32, banks) + m * (std::ceil(ni / add) + 6) + R * (m - 1) + m + 5 + R + 1;
          bwd = D + wts + clear + (li > 0 ? 5 : 3) + m * (li > 0 ? 7 : 6) + busy + R * (m - 1) + 5 + R + 2 + (l == 0);
        }
        // The weights of the next output come in while this one computes, written only in
        // cycles its ops leave the one SRAM write port free (the prefetch waits for them). An op
        // writes every step for `burst` cycles; the channel keeps delivering through a burst
        // only as far as the buffers on its way (the channel's queue, a router buffer, the
        // weights' input queue) hold what it sends, and otherwise stalls. So a pass bound by
        // the stream takes its weights at the channel's rate plus the write-busy cycles the
        // buffers do not cover, and never fewer cycles than the writes of both together.
        const double wf = m * std::ceil(ni / std::max(1, hw.core.mul_fp32));
        const double wb = (li > 0 ? 2 : 1) * m * std::ceil(ni / std::max(1, hw.core.fmac_fp32));
        const double chl = channel_len(a);
        auto stream = [&](double writes, double burst) {
          return std::max(d.out * std::max(chl / p.channel_rate + writes * (1.0 - cover(burst)), ni + writes), relay);
        };
        e.fwd_stream_cycles = std::max(e.fwd_stream_cycles, stream(wf, wf / m));
        e.bwd_stream_cycles = std::max(e.bwd_stream_cycles, stream(wb, wb / m));
        busy_b = wb;
        burst_b = wb / m;
      }
      // Backward, the dW rows leave through the row's channel at its rate. With several columns
      // the send is a vadd along the row, which moves only in cycles the main thread's ops leave
      // the datapath: it stalls through their bursts as the weights do, but where the buffers
      // on the way cover them.
      e.egress_cycles = std::max(e.egress_cycles, d.out * (channel_len(a) / p.channel_rate + (p.cols > 1 ? busy_b * (1.0 - cover(burst_b)) : 0.0)));
      // A residual connection: forward, the output's slice plus the source's (a vadd once the
      // outputs are back); backward, at boundary l, the source's dx plus the sum's gradient
      // (a vadd) and the sum's gradient kept for its source (a vmov).
      double res_f = 0, res_b = 0;
      if (p.residual_source(l + 1) >= 0) res_f = p.len(l + 1, a) * m / add;
      if (l > 0 && p.residual_target(l) >= 0) res_b += nb * m / add;
      if (l > 0 && p.residual_source(l) > 0) res_b += nb * m;
      // A branch: its dx into G of the boundary it reads, then boundary l's gradient from G{l};
      // a gated join: two products more.
      if (li != l && l > 0) res_b += (li > 0 ? ni * m / add : 0) + nb * m;
      if (p.mul_join(l)) res_f += p.len(l + 1, a) * m / add;
      if (l > 0 && p.mul_join(l - 1)) res_b += 2 * nb * m / add;
      // An activation applied by the rows (the root returns z): its vector ops over the slice,
      // one element a cycle (the GELUs' programs, compiler/activations/gelu.cc: 26 for the Erf
      // form, 12 for the others that take z; backward 31, 18); one that takes its derivative
      // at y (after a residual sum, res_pre) its program's ops and the sum's vadd.
      auto rows_ops = [&](int k, bool fwd) {
        const Activation act = p.act[static_cast<size_t>(k)];
        if (act_needs_pre(act) && act != Activation::kChain) return act == Activation::kGelu ? (fwd ? 26.0 : 31.0) : (fwd ? 12.0 : 18.0);
        const ActivationDef& def = activation(act);
        const ActParams& par = p.act_par[static_cast<size_t>(k)];
        double c = 0;  // each step at its unit's rate (elements a cycle)
        const ActProgram prog = fwd ? def.fwd(par) : def.bwd(par);
        for (const ActProgram::Step& st : prog.steps()) c += 1.0 / step_rate(hw.core, st.op);
        return c;
      };
      if (l + 1 < L && p.rows_act(l)) res_f += p.len(l + 1, a) * m * rows_ops(l, true);
      if (l > 0 && p.rows_act(l - 1)) res_b += nb * m * rows_ops(l - 1, false);
      e.fwd_cycles = std::max(e.fwd_cycles, ni + d.out * fwd + rows * 2.0 + res_f);
      rowb[static_cast<size_t>(l)].push_back({static_cast<double>(d.out), bwd, busy, ni, ni + rows * 2.0 + res_b, channel_len(a) / p.channel_rate});
    }
    // Down the columns to the root and back up to the first row: hop_latency per row for the
    // whole round trip (measured over io.spacing 8 to 32: a wavelet's buffer and hop overlap the
    // next one's on the way), plus a vector op per feature row.
    e.turn_cycles = (p.root_y - p.row_y.front()) * hw.router.hop_latency + rows * (m / add + kPerOutput);
    // An East band's weights cross the columns between the East relays and the sample columns
    // before its first output starts: per pass, a hop per column.
    bool east = false;
    for (int b : p.band_east) east = east || b != 0;
    if (east) e.turn_cycles += static_cast<double>(W - 2 * p.x0 - p.cols) * (hw.router.hop_latency + 1);
    // After a backward pass the rows' dy of layer l-1 gathers down to the roots, which take and
    // return it output by output (ws_codegen.cc's root_source: the m values in, back up, their
    // sum for db, its store and the loop, a taken branch); the next pass waits for it.
    e.bwd_turn_cycles = e.turn_cycles;
    if (l > 0 && !p.has_ln(l - 1)) e.bwd_turn_cycles += p.width[static_cast<size_t>(l)] * (2 * m + std::ceil(m / add) + 7 + refetch);
    if (p.has_ln(l)) {
      // A LayerNorm: the root normalises once it holds the layer, in series with the rows
      // (docs/weight-streaming.md#layernorm): per sample about nine vector ops over the n outputs
      // (strided: one element a step) and a few scalar ones; per output the activation and the
      // values back up. Backward per output d gamma and d beta (two ops over m), per sample about
      // eight ops, per output dz up and db.
      const double n = d.out, per = hw.core.decode_latency - 1 + 2;
      e.fwd_cycles += m * (9.0 * n + 60) + n * (2.0 * m + 14 + per);
      e.bwd_cycles += n * (3.0 * m + 16 + per) + m * (8.0 * n + 60) + n * (2.0 * m + 14 + per) + 2.0 * n * (8 + per);
      if (p.has_ln_post(l)) {
        // After the activation: the roots run its program per output over the m samples (each
        // step an op's issue and its elements at the unit's rate) and a copy, forward before
        // the normalisation and backward after it (ws_codegen.cc), in series with the rows.
        auto ops = [&](bool fwd) {
          const ActivationDef& def = activation(d.act);
          const ActProgram prog = fwd ? def.fwd(d.act_par) : def.bwd(d.act_par);
          double c = 0;
          for (const ActProgram::Step& st : prog.steps()) c += per + m / step_rate(hw.core, st.op);
          return c;
        };
        e.fwd_cycles += n * (ops(true) + per + m + 6);
        e.bwd_cycles += n * (ops(false) + 4);
      }
    }
    if (l + 1 == L) {
      // The loss at the roots before the backward passes (ws_codegen.cc root_source): per sample
      // its logits in (strided), softmax cross-entropy, the gradient scaled and out (strided);
      // then the logit gradients north, a word a cycle.
      const int n = d.out;
      const double per = 2.0 * vec_op(hw.core, n, 1, 1, true) + softmax_loss_cycles(hw.core, n) +
                         vec_op(hw.core, n, 1, hw.core.mul_fp32, false) + 16;
      e.loss_cycles = m * per + static_cast<double>(n) * m;
    }
    p.est.push_back(e);
  }
  // Backward, each row's dW rows reduce along it, column to column, toward the row's channel (a
  // vadd from the fabric to the fabric at each column: a wavelet takes a ramp up, a hop, a ramp
  // down, the add's step and its entry into the output queue, dw_hop cycles a column). A
  // column sends output o's row (with dW blocks, block b) only once the one before has left it,
  // which waits for the wave from the far end, the channel's column last; the send moves only in
  // the cycles the main thread's ops leave the datapath (the main thread goes first), stretched
  // by T / (T - busy), and through the row's channel at its rate. The pass is simulated block by
  // block at the channel's column (its issue waits for the previous block's completion) and at
  // the far end, which a stall at the channel's column holds back too (the row's multicast of
  // the weights stops when that column stops taking them; counting the weights buffered on the
  // way as a lead made K = 1 look free on 256 columns, where it ran 9x slower), but not for the
  // pass's last block, whose weights are all in. The last block leaves asynchronously with
  // blocks (but in layer 0's pass, the minibatch's last): its wave overlaps the dy's turn
  // through the roots (bwd_turn_cycles), so the pass counts only what outlasts the turn. K is
  // chosen here, among those SRAM holds, for the fewest backward cycles of
  // the whole model (ties: the smaller); a model with convolutions sends output by output
  // (ws_codegen.cc).
  const double dw_hop = 2.0 * hw.router.ramp_latency + hw.router.hop_latency + 2;
  auto bwd_pass = [&](const RowBwd& r, int K, int l) {
    if (p.cols == 1) return r.fixed + r.outs * r.per_out + std::max(r.ni, r.drain);
    const double tk = r.per_out + (K > 1 ? 3 : 0), stretch = tk / std::max(1.0, tk - r.busy);
    const double lat = (p.cols - 1) * dw_hop;
    double t0 = 0, far = 0, done = 0;
    for (double o = 0; o < r.outs; o += K) {
      const double kb = std::min(static_cast<double>(K), r.outs - o);
      const bool last = o + kb >= r.outs;
      t0 = std::max(t0 + kb * tk, done);
      far = last ? far + kb * tk : std::max(far + kb * tk, t0);
      done = std::max(t0, far + lat) + kb * std::max(r.ni * (last ? 1.0 : stretch), r.drain);
    }
    if (K > 1 && l > 0) {
      const WsLayerEst& e = p.est[static_cast<size_t>(l)];
      return r.fixed + std::max(t0, done - std::max(e.turn_cycles, e.bwd_turn_cycles));
    }
    return r.fixed + done;
  };
  auto model_bwd = [&](int K) {
    double sum = 0;
    for (int l = 0; l < L; ++l) {
      double worst = 0;
      for (const RowBwd& r : rowb[static_cast<size_t>(l)]) worst = std::max(worst, bwd_pass(r, K, l));
      sum += worst;
    }
    return sum;
  };
  // Rows of one layer with the same figures simulate alike (most rows share a slice length): once each.
  for (std::vector<RowBwd>& rs : rowb) {
    auto key = [](const RowBwd& r) { return std::make_tuple(r.outs, r.per_out, r.busy, r.ni, r.fixed, r.drain); };
    std::sort(rs.begin(), rs.end(), [&](const RowBwd& x, const RowBwd& y) { return key(x) < key(y); });
    rs.erase(std::unique(rs.begin(), rs.end(), [&](const RowBwd& x, const RowBwd& y) { return key(x) == key(y); }), rs.end());
  }
  p.dw_block = 1;
  int widest = 1;  // K is at most the widest layer's outputs
  for (int l = 0; l < L; ++l) widest = std::max(widest, p.outs[static_cast<size_t>(l)]);
  if (o.dw_block > 0) {
    // Set by the user (ws.dw_block): as given, where it can be.
    const int k = o.dw_block;
    if (k > 1 && p.any_conv()) throw CompileError("ws.dw_block " + S(k) + ": a model with convolutions sends its dW rows output by output (ws.dw_block 0 or 1)");
    p.dw_block = std::min(k, widest);
    if (row_bytes(m) > sram) {
      throw CompileError("ws.dw_block " + S(k) + ": two blocks of dW rows need " + S(row_bytes(m)) + " bytes of a feature-row PE's SRAM, the core has " +
                         S(sram) + "; use a smaller ws.dw_block or 0 (chosen)");
    }
  } else if (p.cols > 1 && !p.any_conv()) {
    double best = model_bwd(1);
    int best_k = 1;
    for (int K = 2; K <= std::min(kMaxDwBlock, widest); ++K) {
      p.dw_block = K;
      if (row_bytes(m) > sram) break;
      if (const double t = model_bwd(K); t < best) best = t, best_k = K;
    }
    p.dw_block = best_k;
  }
  p.row_bytes = row_bytes(m);
  for (int l = 0; l < L; ++l) {
    if (rowb[static_cast<size_t>(l)].empty()) continue;
    double worst = 0;
    for (const RowBwd& r : rowb[static_cast<size_t>(l)]) worst = std::max(worst, bwd_pass(r, p.dw_block, l));
    p.est[static_cast<size_t>(l)].bwd_cycles = worst;
  }
  return p;
}

}  // namespace

namespace {

// The mapping of the best estimate among the candidates o allows (place_ws without its check
// of a user's ws.dw_block).
WsPlan place_ws_search(const KernelGraph& g, const HwConfig& hw, const WsOptions& o) {
  if (const int l = g.first_conv(); l >= 0 && (o.grid || o.auto_layout)) {
    // Convolutions run on the rows layout: their channels split over the feature rows.
    const std::string what = "the convolution '" + g.layers[static_cast<size_t>(l)].name + "'";
    if (o.grid && !o.auto_layout) throw CompileError(what + " runs on the rows layout so far; use ws.layout rows (or auto)");
    WsOptions r = o;
    r.grid = r.auto_layout = false;
    return place_ws_search(g, hw, r);
  }
  if (!g.layers.empty() && g.layers.back().ln.on) {
    throw CompileError("the LayerNorm '" + g.layers.back().ln.node + "' is on the logits (the output of " + g.layers.back().name +
                       "), which feed the loss directly; weight streaming normalises hidden layers only");
  }
  if (o.auto_layout) {
    // Each layout's best; the grid only where its estimate is lower (it takes relays), and the
    // rows layout's error where neither fits.
    WsOptions r = o, q = o;
    r.auto_layout = q.auto_layout = false;
    r.grid = false;
    q.grid = true;
    std::exception_ptr rows_error;
    WsPlan best;
    try {
      best = place_ws_search(g, hw, r);
    } catch (const CompileError&) {
      rows_error = std::current_exception();
    }
    try {
      WsPlan grid = place_ws_search(g, hw, q);
      if (rows_error || ws_estimate(g, grid, o.pace).cycles_per_batch < ws_estimate(g, best, o.pace).cycles_per_batch * (1 - 1e-9)) {
        return grid;
      }
    } catch (const CompileError&) {
      if (rows_error) std::rethrow_exception(rows_error);
    }
    return best;
  }
  if (o.grid && o.pack == 0) {  // both packings; the spread one where they tie (more channels)
    WsOptions s = o, k = o;
    s.pack = 2;
    k.pack = 1;
    const WsPlan spread = place_ws_search(g, hw, s);  // its error where neither fits
    try {
      WsPlan packed = place_ws_search(g, hw, k);
      if (ws_estimate(g, packed, o.pace).cycles_per_batch < ws_estimate(g, spread, o.pace).cycles_per_batch * (1 - 1e-9)) return packed;
    } catch (const CompileError&) {
    }
    return spread;
  }
  if (o.rows > 0 && o.columns > 0) return place_ws_shape(g, hw, o);
  if (o.systems < 1 || o.batch < 1 || o.batch % o.systems != 0 || o.rows < 0 || o.columns < 0 || o.max_pes < 0 ||
      g.layers.empty()) {
    return place_ws_shape(g, hw, o);  // its error
  }
  const int shard = o.batch / o.systems;
  const int room = std::max(1, ws_rows_room(g, hw, o.grid));
  const int x0 = o.grid ? 2 : 0;
  std::vector<int> rows, cols;
  if (o.rows > 0) {
    rows.push_back(o.rows);
  } else {
    // Every row count up to two per band, then whole rows per band (a band's channel carries
    // the most rows' slices of any, so counts between add PEs, not speed), and the room.
    const int bands = std::max(1, hw.io.channels(hw.fabric.height) - 1);
    for (int r = room; r >= 1; --r) {
      if (!o.grid || r <= 2 * bands || r % bands == 0 || r == room) rows.push_back(r);
    }
  }
  if (o.columns > 0) {
    cols.push_back(o.columns);
  } else {
    // Per busiest column's samples m, the fewest columns that hold the shard (columns hold
    // m or m - 1 samples): more columns at the same m add PEs, not speed.
    for (int m = shard; m >= 1; --m) {
      const int c = (shard + m - 1) / m;
      if (c > hw.fabric.width - 2 * x0) break;
      if (cols.empty() || cols.back() != c) cols.push_back(c);
    }
  }
  WsPlan best;
  double best_t = 0;
  bool found = false;
  for (int r : rows) {
    for (int c : cols) {
      if (o.max_pes > 0 && (r + 1) * c + (o.grid ? 2 * r : 0) > o.max_pes) continue;
      WsOptions q = o;
      q.rows = r;
      q.columns = c;
      WsPlan cand;
      try {
        cand = place_ws_shape(g, hw, q);
      } catch (const CompileError&) {
        continue;  // does not fit SRAM or a descriptor
      }
      const double t = ws_estimate(g, cand, o.pace).cycles_per_batch;
      if (!found || t < best_t || (t == best_t && cand.pes() < best.pes())) {
        best = std::move(cand);
        best_t = t;
        found = true;
      }
    }
  }
  if (!found) return place_ws_shape(g, hw, o);  // nothing fits: its error says what to change
  best.pe_budget = o.max_pes;
  best.rows_room = room;
  best.budget_bound = o.rows == 0 && o.max_pes > 0 && best.rows < room && (room + 1) * best.cols + (o.grid ? 2 * room : 0) > o.max_pes;
  return best;
}

}  // namespace

WsPlan place_ws(const KernelGraph& g, const HwConfig& hw, const WsOptions& o) {
  if (o.dw_block <= 1) return place_ws_search(g, hw, o);
  // Blocks the user set that no mapping holds: say so where output-by-output sends would fit.
  try {
    return place_ws_search(g, hw, o);
  } catch (const CompileError&) {
    WsOptions q = o;
    q.dw_block = 1;
    place_ws_search(g, hw, q);  // where nothing fits even so, that error says what to change
    throw CompileError("weight-streaming: ws.dw_block " + S(o.dw_block) + ": no mapping's feature-row PEs hold two blocks of " + S(o.dw_block) +
                       " dW rows besides the rest in " + S(static_cast<long long>(hw.core.sram_kb) * 1024) +
                       " bytes of SRAM; use a smaller ws.dw_block or 0 (chosen by the estimate)");
  }
}

}  // namespace wafersim::compiler

namespace wafersim::compiler {

namespace {

// The outputs o in [0, n) whose input o s - pad + k lies in [0, size).
void tap_range(int n, int s, int pad, int k, int size, int* lo, int* hi) {
  *lo = 0;
  while (*lo < n && *lo * s - pad + k < 0) ++*lo;
  *hi = *lo;
  while (*hi < n && *hi * s - pad + k < size) ++*hi;
}

}  // namespace

std::vector<ConvTap> conv_taps(const ConvParams& c) {
  const auto range = tap_range;
  std::vector<ConvTap> taps;
  for (int ci = 0; ci < c.c; ++ci) {
    for (int ky = 0; ky < c.kh; ++ky) {
      for (int kx = 0; kx < c.kw; ++kx) {
        ConvTap t;
        t.ci = ci, t.ky = ky, t.kx = kx;
        range(c.ho, c.sh, c.pt, ky, c.h, &t.oy0, &t.oy1);
        range(c.wo, c.sw, c.pl, kx, c.w, &t.ox0, &t.ox1);
        if (t.oy1 <= t.oy0 || t.ox1 <= t.ox0) t.oy1 = t.oy0, t.ox1 = t.ox0;  // only padding: no op
        taps.push_back(t);
      }
    }
  }
  return taps;
}

PoolSpan pool_span(const ConvParams& c, const PoolParams& q, int ky, int kx) {
  PoolSpan r;
  tap_range(q.hq, q.sh, q.pt, ky, c.ho, &r.y0, &r.y1);
  tap_range(q.wq, q.sw, q.pl, kx, c.wo, &r.x0, &r.x1);
  if (r.y1 <= r.y0 || r.x1 <= r.x0) r.y1 = r.y0, r.x1 = r.x0;  // only padding
  return r;
}

float pool_inv(const ConvParams& c, const PoolParams& q, int py, int px) {
  if (pool_uniform(q)) return 1.0f / static_cast<float>(q.kh * q.kw);
  const int y0 = py * q.sh - q.pt, x0 = px * q.sw - q.pl;
  const int n = q.count_pad ? (std::min(y0 + q.kh, c.ho + q.pb) - y0) * (std::min(x0 + q.kw, c.wo + q.pr) - x0)  // as torch
                            : (std::min(y0 + q.kh, c.ho) - std::max(y0, 0)) * (std::min(x0 + q.kw, c.wo) - std::max(x0, 0));
  return 1.0f / static_cast<float>(n);
}

namespace {

// The padded forms (see ws_plan.h pool_forward): tap by tap over the windows that have it.
void pool_forward_padded(const ConvParams& c, const PoolParams& q, const float* y, float* out) {
  const bool max = q.kind == PoolParams::kMax;
  const int Pq = q.hq * q.wq;
  std::fill(out, out + Pq, max ? -std::numeric_limits<float>::infinity() : 0.0f);
  for (int py = 0; py < q.hq; ++py) {
    for (int ky = 0; ky < q.kh; ++ky) {
      for (int kx = 0; kx < q.kw; ++kx) {
        const PoolSpan sp = pool_span(c, q, ky, kx);
        if (py < sp.y0 || py >= sp.y1) continue;
        for (int px = sp.x0; px < sp.x1; ++px) {
          const float e = y[(py * q.sh - q.pt + ky) * c.wo + px * q.sw - q.pl + kx];
          float& v = out[py * q.wq + px];
          v = max ? std::fmax(v, e) : v + e;
        }
      }
    }
  }
  if (max) return;
  const float inv = 1.0f / static_cast<float>(q.kh * q.kw);
  for (int py = 0; py < q.hq; ++py) {
    for (int px = 0; px < q.wq; ++px) out[py * q.wq + px] *= pool_uniform(q) ? inv : pool_inv(c, q, py, px);
  }
}

void pool_backward_padded(const ConvParams& c, const PoolParams& q, const float* y, const float* out, const float* dout, float* dy) {
  const bool max = q.kind == PoolParams::kMax;
  const float inv = 1.0f / static_cast<float>(q.kh * q.kw);
  std::vector<float> r(static_cast<size_t>(q.wq));
  for (int py = 0; py < q.hq; ++py) {
    for (int px = 0; px < q.wq; ++px) {
      const float d = dout[py * q.wq + px];
      r[static_cast<size_t>(px)] = max || pool_uniform(q) ? d : d * pool_inv(c, q, py, px);
    }
    for (int ky = 0; ky < q.kh; ++ky) {
      for (int kx = 0; kx < q.kw; ++kx) {
        const PoolSpan sp = pool_span(c, q, ky, kx);
        if (py < sp.y0 || py >= sp.y1) continue;
        for (int px = sp.x0; px < sp.x1; ++px) {
          const int i = (py * q.sh - q.pt + ky) * c.wo + px * q.sw - q.pl + kx;
          float& rp = r[static_cast<size_t>(px)];
          if (max) {
            const bool below = out[py * q.wq + px] > y[i];
            dy[i] = dy[i] + (below ? 0.0f : rp);
            rp = below ? rp : 0.0f;
          } else if (pool_uniform(q)) {
            dy[i] = std::fma(inv, rp, dy[i]);
          } else {
            dy[i] = dy[i] + rp;
          }
        }
      }
    }
  }
}

}  // namespace

void pool_forward(const ConvParams& c, const PoolParams& q, const float* y, float* out) {
  if (q.padded()) return pool_forward_padded(c, q, y, out);
  const float inv = 1.0f / static_cast<float>(q.kh * q.kw);
  if (whole_plane(c, q)) {
    float sum = 0.0f;
    for (int i = 0; i < c.ho * c.wo; ++i) sum += y[i];
    out[0] = sum * inv;
    return;
  }
  for (int py = 0; py < q.hq; ++py) {
    for (int px = 0; px < q.wq; ++px) {
      float v = 0;
      for (int ky = 0; ky < q.kh; ++ky) {
        for (int kx = 0; kx < q.kw; ++kx) {
          const float e = y[(py * q.sh + ky) * c.wo + px * q.sw + kx];
          if (ky == 0 && kx == 0) v = e;
          else v = q.kind == PoolParams::kMax ? std::fmax(v, e) : v + e;
        }
      }
      out[py * q.wq + px] = q.kind == PoolParams::kMax ? v : v * inv;
    }
  }
}

void pool_backward(const ConvParams& c, const PoolParams& q, const float* y, const float* out, const float* dout, float* dy) {
  const float inv = 1.0f / static_cast<float>(q.kh * q.kw);
  std::fill(dy, dy + c.ho * c.wo, 0.0f);
  if (q.padded()) return pool_backward_padded(c, q, y, out, dout, dy);
  if (whole_plane(c, q)) {
    std::fill(dy, dy + c.ho * c.wo, dout[0] * inv);
    return;
  }
  // Row of windows by row, tap by tap, and within a tap window by window: the firmware's order
  // (codegen.cc's emit_pool_bwd: one vector op per tap over a row's windows), which matters
  // where windows overlap (strides below the kernel), and r the gradient still to place in each
  // window of the row (max: its first largest element takes it).
  std::vector<float> r(static_cast<size_t>(q.wq));
  for (int py = 0; py < q.hq; ++py) {
    for (int px = 0; px < q.wq; ++px) r[static_cast<size_t>(px)] = dout[py * q.wq + px];
    for (int ky = 0; ky < q.kh; ++ky) {
      for (int kx = 0; kx < q.kw; ++kx) {
        for (int px = 0; px < q.wq; ++px) {
          const int i = (py * q.sh + ky) * c.wo + px * q.sw + kx;
          float& rp = r[static_cast<size_t>(px)];
          if (q.kind == PoolParams::kMax) {
            const bool below = out[py * q.wq + px] > y[i];
            dy[i] = dy[i] + (below ? 0.0f : rp);
            rp = below ? rp : 0.0f;
          } else {
            dy[i] = std::fma(inv, rp, dy[i]);
          }
        }
      }
    }
  }
}

std::vector<int> WsPlan::egress_order(int g) const {
  std::vector<int> order;
  const int first = band_first[static_cast<size_t>(g)], last = band_first[static_cast<size_t>(g) + 1] - 1;
  if (band_east[static_cast<size_t>(g)]) {
    for (int a = first; a <= last; ++a) order.push_back(a);
  } else {
    for (int a = last; a >= first; --a) order.push_back(a);
  }
  return order;
}

WsEstimate ws_estimate(const KernelGraph& g, const WsPlan& p, const WsHostPace& pace) {
  WsEstimate est;
  // With prefetch, one request latency and the first layer's MemoryX READ per minibatch (later
  // READs overlap the broadcasts before them); without, every pass waits for both.
  const double read0 = static_cast<double>(p.est.front().weights + g.layers.front().w_out()) / pace.read_per_cycle;
  double total = pace.reduce_cycles;
  // The inputs: row a's channel carries x[K_a] of the whole shard, column after column, ahead of
  // the first pass's weights in the same channel (each column's ramp filter lets in only its
  // part: ws_codegen.cc), so no column starts before the busiest row's stream has gone by; the
  // root row's channel carries the labels.
  for (int a = 0; a < p.rows; ++a) {  // in the grid a band's channel carries every row's slice
    est.input_cycles = std::max(est.input_cycles, static_cast<double>(p.channel_len(0, a)) * p.shard / p.channel_rate);
  }
  est.input_cycles = std::max(est.input_cycles, p.shard / p.channel_rate);
  // ... and no faster than the host's input workers bring the samples in.
  est.input_cycles = std::max(est.input_cycles, p.shard * pace.sample_cycles);
  // The first weights reach the wafer after the request's latency and MemoryX's READ, meanwhile
  // the inputs stream in ahead of them through the same channels: the later of the two.
  total += std::max(est.input_cycles, pace.prefetch ? pace.latency_cycles + read0 : 0.0);
  for (int l = 0; l < p.layers; ++l) {
    const WsLayerEst& e = p.est[static_cast<size_t>(l)];
    const DenseKernel& d = g.layers[static_cast<size_t>(l)];
    WsEstimate::Layer x;
    x.host = static_cast<double>(e.weights + d.w_out()) / pace.weights_per_cycle;
    const double stream = std::max(e.fwd_stream_cycles, x.host), stream_bwd = std::max(e.bwd_stream_cycles, x.host);
    const double wait_f = pace.prefetch ? 0.0 : pace.latency_cycles + static_cast<double>(e.weights + d.w_out()) / pace.read_per_cycle;
    // The first layer's backward pass streams nothing (WsPlan::streamed_passes).
    const bool bwd_streams = p.streams(p.passes() - 1 - l);
    const double wait_b = pace.prefetch || !bwd_streams ? 0.0 : pace.latency_cycles + static_cast<double>(e.weights) / pace.read_per_cycle;
    x.stream_f = stream + wait_f;
    x.stream_b = bwd_streams ? stream_bwd + wait_b : 0.0;
    x.fwd = std::max(x.stream_f, e.fwd_cycles) + e.turn_cycles;
    x.fwd += e.loss_cycles;
    // The pass's dW also leave the system through the host link (bridge, SwarmX).
    const double grads_out = static_cast<double>(e.weights) / pace.grads_per_cycle;
    // The last pass (layer 0's backward) ends with its dW out (the reduction follows): no turn.
    x.bwd = std::max({x.stream_b, e.bwd_cycles, e.egress_cycles, grads_out}) + (l > 0 ? std::max(e.turn_cycles, e.bwd_turn_cycles) : 0.0);
    total += x.fwd + x.bwd;
    est.layers.push_back(x);
  }
  est.cycles_per_batch = total;
  return est;
}

nlohmann::json ws_compile_report(const KernelGraph& g, const WsPlan& p, const HwConfig& hw, const WsHostPace& pace) {
  const double f = hw.fabric.clock_mhz * 1e6;
  const WsEstimate est = ws_estimate(g, p, pace);
  const double total = est.cycles_per_batch;
  nlohmann::json layers = nlohmann::json::array();
  for (int l = 0; l < p.layers; ++l) {
    const WsLayerEst& e = p.est[static_cast<size_t>(l)];
    const DenseKernel& d = g.layers[static_cast<size_t>(l)];
    const WsEstimate::Layer& x = est.layers[static_cast<size_t>(l)];
    layers.push_back({{"name", d.name},
                      {"shape", d.conv.on ? "conv " + S(d.conv.co) + "x" + S(d.conv.c) + "x" + S(d.conv.kh) + "x" + S(d.conv.kw) : S(d.out) + "x" + S(d.in)},
                      {"weights", e.weights},
                      {"weight_stream_cycles", x.stream_f},
                      {"weight_stream_us", x.stream_f / f * 1e6},
                      {"stream_bound", e.stream_cycles >= x.host ? "wafer I/O channels" : "host link (MemoryX/SwarmX/bridge)"},
                      {"forward_compute_cycles", e.fwd_cycles},
                      {"backward_compute_cycles", e.bwd_cycles},
                      {"gradient_egress_cycles", e.egress_cycles},
                      {"forward_pass_cycles", x.fwd},
                      {"backward_pass_cycles", x.bwd},
                      {"forward_bound", x.stream_f >= e.fwd_cycles ? "weight stream" : "compute"},
                      {"backward_bound", x.stream_b >= std::max(e.bwd_cycles, e.egress_cycles) ? "weight stream"
                                         : e.egress_cycles > e.bwd_cycles                           ? "gradient egress"
                                                                                                    : "compute"}});
  }
  nlohmann::json r;
  r["mode"] = "weight-streaming";
  r["systems"] = p.systems;
  r["batch"] = p.batch;
  r["shard_per_system"] = p.shard;
  r["feature_rows"] = p.rows;
  r["sample_columns"] = p.cols;
  r["samples_per_column"] = p.m;
  r["pes_per_system"] = p.pes();
  r["layout"] = p.grid ? "grid" : "rows";
  r["dw_block"] = p.dw_block;
  // One per feature row (grid: per band) and the root row's; the East ones are grid bands'.
  r["channels_used"] = (p.grid ? p.bands() : p.rows) + 1;
  int east = 0;
  for (int e : p.band_east) east += e;
  r["channels_east"] = east;
  if (p.grid) {
    r["bands"] = p.bands();
    r["relay_pes"] = 2 * p.rows;
  }
  r["pe_budget"] = p.pe_budget;            // compile.max_pes (0: no limit)
  r["feature_rows_room"] = p.rows_room;    // feature rows the fabric and the model allow
  r["rows_limited_by_budget"] = p.budget_bound;
  r["row_sram_bytes"] = p.row_bytes;
  r["root_sram_bytes"] = p.root_bytes;
  r["sram_bytes"] = static_cast<long>(hw.core.sram_kb) * 1024;
  r["channel_wavelets_per_cycle"] = p.channel_rate;
  r["host_weight_wavelets_per_cycle"] = pace.weights_per_cycle;
  r["request_latency_cycles"] = pace.latency_cycles;
  r["gradient_reduce_cycles"] = pace.reduce_cycles;
  r["input_stream_cycles"] = est.input_cycles;
  r["prefetch"] = pace.prefetch;
  r["parameters"] = g.parameters();
  r["kernels"] = layers;
  r["cycles_per_batch"] = total;
  r["overall_samples_per_s"] = p.batch / (total / f);
  r["clock_mhz"] = hw.fabric.clock_mhz;
  return r;
}

std::string ws_report_text(const nlohmann::json& r) {
  std::string t = "Compile report (weight streaming)\n";
  const bool grid = r.value("layout", std::string("rows")) == "grid";
  t += "  " + S(r["systems"].get<int>()) + " system(s), batch " + S(r["batch"].get<int>()) + " (" + S(r["shard_per_system"].get<int>()) +
       " per system); each wafer: " + S(r["feature_rows"].get<int>()) + " feature rows x " + S(r["sample_columns"].get<int>()) +
       " sample columns (" + S(r["samples_per_column"].get<int>()) + " per column) + a root row" +
       (grid ? " + " + S(r["relay_pes"].get<int>()) + " relays (grid layout, " + S(r["bands"].get<int>()) + " bands)" : std::string()) +
       ", " + S(r["pes_per_system"].get<int>()) + " PEs";
  if (r.value("rows_limited_by_budget", false)) {
    t += " (compile.max_pes = " + S(r["pe_budget"].get<int>()) + " limits the mapping; the fabric allows " +
         S(r["feature_rows_room"].get<int>()) + " feature rows)";
  }
  t += "\n";
  t += "  SRAM per PE: feature rows " + S(r["row_sram_bytes"].get<long>()) + " B, roots " + S(r["root_sram_bytes"].get<long>()) +
       " B of " + S(r["sram_bytes"].get<long>()) + "\n";
  if (r.contains("channels_used")) {
    const int east = r.value("channels_east", 0);
    t += "  I/O channels used: " + S(r["channels_used"].get<int>() - east) + " West, " + S(east) + " East (" +
         (grid ? "a band's or the root row's each)\n" : "a feature row's or the root row's each)\n");
  }
  t += "  weights in: " + fmt(r["channel_wavelets_per_cycle"].get<double>(), 3) + " wavelets/cycle per row channel, host link " +
       fmt(r["host_weight_wavelets_per_cycle"].get<double>(), 2) + " wavelets/cycle, request latency " +
       fmt(r["request_latency_cycles"].get<double>(), 0) + " cycles, prefetch " + (r["prefetch"].get<bool>() ? "on" : "off") +
       "; gradient reduction " + fmt(r["gradient_reduce_cycles"].get<double>(), 0) + " cycles per minibatch\n";
  if (r.contains("input_stream_cycles")) {
    t += "  inputs: " + fmt(r["input_stream_cycles"].get<double>(), 0) +
         " cycles per minibatch through the busiest channel or from the input workers, the slower, before the first pass\n";
  }
  for (const auto& k : r["kernels"]) {
    t += "  " + k["name"].get<std::string>() + " " + k["shape"].get<std::string>() + ": weight stream " +
         fmt(k["weight_stream_cycles"].get<double>(), 0) + " cycles (" + fmt(k["weight_stream_us"].get<double>(), 2) + " us, " +
         k["stream_bound"].get<std::string>() + "); compute fwd " + fmt(k["forward_compute_cycles"].get<double>(), 0) + ", bwd " +
         fmt(k["backward_compute_cycles"].get<double>(), 0) + " cycles, dW out " +
         fmt(k.value("gradient_egress_cycles", 0.0), 0) + " (" + k["forward_bound"].get<std::string>() + " / " +
         k["backward_bound"].get<std::string>() + " bound)\n";
  }
  t += "  estimate: " + fmt(r["cycles_per_batch"].get<double>(), 0) + " cycles per minibatch, " +
       fmt(r["overall_samples_per_s"].get<double>(), 1) + " samples/s at " + fmt(r["clock_mhz"].get<double>(), 0) + " MHz\n";
  return t;
}

}  // namespace wafersim::compiler
