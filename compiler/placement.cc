#include "compiler/placement.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "compiler/activation.h"
#include "compiler/ws_plan.h"

namespace wafersim::compiler {
namespace {

// Cost-model constants in cycles, from the task bodies codegen emits (docs/compiler.md shows the
// code): a data task's pick, decode and bookkeeping around its vector op(s).
constexpr double kFwdTask = 10;      // per input wavelet: vaxpy + store + 5 scalar ops + exit
constexpr double kBwdTask = 12;      // per gradient wavelet: 1 or 2 vaxpy + pointer updates + exit
constexpr double kSampleEnd = 40;    // per sample: the send tasks, ring pointers, counters
constexpr double kUpdateFixed = 30;  // per minibatch: the update task's scalar part
constexpr double kRootFixed = 80;    // per sample: the root's four tasks
constexpr double kLossFixed = 120;   // per sample: the loss root's softmax bookkeeping
constexpr double kRelayFixed = 5;    // per PE a stream of the replicas' gradient sum passes: its ops' starts
constexpr long kCodeBytes = 2048;    // a tile's code and scalar data, rounded up
constexpr int kMinRing = 4;          // compile.ring_depth 0 (auto) takes at least this many
constexpr double kSlack = 0.8;       // tiles above this share of the time per sample are split further
constexpr double kResidualFixed = 16;      // a residual connection's ring bookkeeping at a root, per sample
constexpr int kResidualColorReserve = 8;   // colors of the tiles' own nets where residual streams cross them
constexpr double kLayerNormFixed = 60;     // a LayerNorm's scalar work at its root, per sample (sums, 1/sqrt)
// Two neighbouring stages of nearly the same time couple (one waits for the other's bursts: a
// layer-0 tile's backward pass holds up the channel all its rows share, a root waits for its
// tiles' partial sums while they wait for its gradient) and run slower than the slower of them:
// by kCoupling when they are equal, less as the faster one's time falls to a share of the
// slower's, nothing below it. Measured on the cycle-level model (copies of the demo at batch
// 1024, layer 0's tiles against their channel: docs/compiler.md, "Coupled stages"): slower
// tiles (the consumer) lost 20 % at equal times, 9-14 % at 0.81, 9-13 % at 0.70; a slower
// channel (the producer) 12.6 % at 0.92 and nothing at 0.77 and below. The ramps are gentle
// enough that a faster stage never raises the estimate (slopes under 1 + kCoupling).
constexpr double kCoupling = 0.2, kCoupleFromConsumer = 0.5, kCoupleFromProducer = 0.7;
// Times at or above this mark a layer whose tiles do not fit (plus their bytes, to rank them).
constexpr double kInfeasible = 1e12;

// Vector ops per element a root's activation costs (ActivationDef::cost).
// A chain (activations/chain.cc): its activation's, a step each, and backward the activation's
// y again from z where it takes its derivative at y.
double act_cost(Activation a, const ActParams& p) {
  if (a != Activation::kChain) return activation(a).cost;
  const ActivationDef& d = activation(p.base);
  return d.cost * (d.pre ? 1.0 : 1.5) + p.posts;
}

// n features in p slices of whole units (a convolution's channel planes; 1 elsewhere).
std::vector<int> split(int n, int p, int unit = 1) {
  std::vector<int> off(static_cast<size_t>(p) + 1);
  const long long units = n / unit;
  for (int i = 0; i <= p; ++i) off[static_cast<size_t>(i)] = static_cast<int>(units * i / p * unit);
  return off;
}

// Boundary k's unit of slicing (k: layer k's input; L: the logits): a convolution's input
// plane, or the pooled plane of the convolution before it (slices hold whole channels); else 1.
int unit_of(const KernelGraph& g, int k) {
  const int L = static_cast<int>(g.layers.size());
  if (k < L && g.layers[static_cast<size_t>(k)].conv.on) return g.layers[static_cast<size_t>(k)].in / g.layers[static_cast<size_t>(k)].conv.c;
  if (k > 0 && g.layers[static_cast<size_t>(k) - 1].conv.on) {
    const DenseKernel& d = g.layers[static_cast<size_t>(k) - 1];
    return d.out / d.conv.co;
  }
  return 1;
}
// Boundary k's width and its units (the most slices it can take).
int width_of(const KernelGraph& g, int k) {
  return k < static_cast<int>(g.layers.size()) ? g.layers[static_cast<size_t>(k)].in : g.layers.back().out;
}
int units_of(const KernelGraph& g, int k) { return width_of(g, k) / unit_of(g, k); }
// The largest of boundary k's p slices (split's): whole units, so after a convolution a dense
// layer's slice can be wider than width / p.
int max_slice(const KernelGraph& g, int k, int p) {
  const int u = unit_of(g, k);
  return (units_of(g, k) + p - 1) / p * u;
}

// A convolution's per-sample work at its PEs (codegen.cc conv_tile_source, conv_root_source),
// in cycles: per tap a vector op over its window (one element a step: a two-dimensional
// operand) and the scalar code that sets it up; the root's ops over the planes.
constexpr double kConvTapF = 22, kConvTapB = 36, kConvTapB0 = 28;  // a tap's scalar instructions: forward, backward (without dx)
constexpr double kConvOp = 6;                      // a root vector op's issue and its loop's share
}  // namespace

int conv_sram_align(const CoreConfig& core) {
  const int nb = core.sram_banks;
  return (nb & (nb - 1)) == 0 ? std::max(16, 2 * nb) : 16;
}

ConvTapCycles conv_tap_cycles(const ConvParams& slice, int cq, bool dx, int ring_depth, const CoreConfig& core, long long input_offset) {
  // A tap's window moves one element a step (a two-dimensional operand). A step of r reads takes
  // ceil(r / read_ports) cycles, and one more when it is one cycle and its reads share a bank
  // (docs/core.md): the forward vaxpy reads the plane and the input, the backward one dx and dz
  // (two reads), the vfmac dz, the input and its stride-0 sum (three). Two fp32 elements share a
  // bank when their word addresses differ by 0 or +-1 modulo the banks; the arrays start on a
  // multiple of the banks (conv_sram_align), so that depends on the element offsets only: per tap
  // a histogram of (input index - plane index) modulo the banks over its window, then per ring
  // slot and output plane the offset of their bases picks the conflicting residue.
  const int nb = std::max(1, core.sram_banks), ports = std::max(1, core.read_ports);
  auto port_cycles = [&](int reads) { return static_cast<double>((reads + ports - 1) / ports); };
  auto shares = [&](long long diff) {  // element offsets -> their word spans overlap
    if (nb <= 2) return true;
    const long long w = ((2 * diff) % nb + nb) % nb;
    return w == 0 || w == 1 || w == nb - 1;
  };
  const long long P = static_cast<long long>(slice.ho) * slice.wo, ni = static_cast<long long>(slice.c) * slice.h * slice.w;
  const long long row_step = static_cast<long long>(slice.sh) * slice.w - slice.wo, col_step = slice.sw - 1;
  ConvTapCycles out;
  const double axpy = port_cycles(2), fmac = port_cycles(3);
  const bool can_conflict = ports >= 2;
  for (const ConvTap& t : conv_taps(slice)) {
    const long long rows = t.oy1 - t.oy0, cols = t.ox1 - t.ox0;
    if (rows <= 0 || cols <= 0) continue;
    // (input - plane) index of the tap's window element (oy, ox), before the slot's and plane's
    // offsets: ci h w + (oy sh + ky - pt) w + ox sw + kx - pl - (oy wo + ox).
    std::vector<long long> hist(static_cast<size_t>(nb), 0);
    const long long c0 = static_cast<long long>(t.ci) * slice.h * slice.w + static_cast<long long>(t.ky - slice.pt) * slice.w + t.kx - slice.pl;
    for (long long oy = t.oy0; oy < t.oy1; ++oy) {
      const long long r0 = c0 + oy * row_step;
      // A row's columns repeat their residue every nb columns.
      const long long period = std::min<long long>(cols, nb);
      for (long long j = 0; j < period; ++j) {
        const long long d = r0 + (t.ox0 + j) * col_step;
        hist[static_cast<size_t>(((d % nb) + nb) % nb)] += (cols - j + period - 1) / period;  // columns ox0 + j + k period
      }
    }
    const double window = static_cast<double>(rows * cols);
    auto conflicts = [&](long long offset) {  // elements whose reads share a bank
      if (!can_conflict) return 0.0;
      double n = 0;
      for (int r = 0; r < nb; ++r) {
        if (shares(r + offset)) n += static_cast<double>(hist[static_cast<size_t>(r)]);
      }
      return n;
    };
    for (int o = 0; o < cq; ++o) {
      double f = 0;
      for (int s = 0; s < ring_depth; ++s) f += conflicts(s * ni - o * P + input_offset);
      out.fwd += axpy * window + f / std::max(1, ring_depth);
      out.bwd += fmac * window + (dx ? axpy * window + conflicts(-o * P) : 0.0);
    }
  }
  return out;
}

// The cycles of a vector op over n fp32 elements (docs/core.md) whose operands' relative
// alignment is not known: k elements a step (the op's rate, 1 with a strided operand), a step of
// r reads ceil(r / read_ports) cycles, and a one-cycle step of two reads one more when they share
// a bank, as likely as two spans of 2k words at an even word offset overlap in the banks; and the
// instruction's own cycle.
double vec_op(const CoreConfig& core, double n, int reads, int rate, bool strided) {
  const int k = strided ? 1 : std::max(1, rate), nb = std::max(1, core.sram_banks), ports = std::max(1, core.read_ports);
  const int pc = (reads + ports - 1) / ports;
  double conflict = 0;
  if (pc == 1 && reads >= 2) {
    int offsets = 0, hit = 0;
    for (int d = 0; d < nb; d += 2) {
      ++offsets;
      bool overlap = false;
      for (int i = 0; i < 2 * k && !overlap; ++i) overlap = ((d + i) % nb) < 2 * k || 2 * k >= nb;
      hit += overlap;
    }
    conflict = static_cast<double>(hit) / std::max(1, offsets);
  }
  return std::ceil(n / k) * (pc + conflict) + 1;
}

double softmax_loss_cycles(const CoreConfig& core, int n) {
  const int add = core.add_fp32, mul = core.mul_fp32, sp = core.special;
  double t = vec_op(core, n, 1, add, false);  // the copy into t
  for (int m = n; m > 1;) {                   // the max by halving
    const int half = m / 2;
    t += vec_op(core, half, 2, add, false) + 2;
    m -= half;
  }
  t += vec_op(core, n, 0, add, false) + vec_op(core, n, 2, add, false) + vec_op(core, n, 1, sp, false) +  // fill, shift, exp
       vec_op(core, n, 1, add, false) + vec_op(core, 1, 1, sp, false) * 2 + vec_op(core, n, 1, mul, false);  // sum, log, 1/s, scale
  return t + 20;  // the loads, stores and the loss's scalar arithmetic
}

namespace {

// A convolution root's cycles per sample, forward or backward (codegen.cc conv_root_source and the
// emitters it calls: emit_act_fwd/bwd, emit_pool_fwd/bwd), each vector op by vec_op and a few
// scalar instructions around it.
double root_ops(const CoreConfig& core, const DenseKernel& d, int cq, bool fwd) {
  const ConvParams& c = d.conv;
  const PoolParams& q = d.pool;
  const double P = static_cast<double>(c.ho) * c.wo, all = cq * P;
  const int add = core.add_fp32, mul = core.mul_fp32, sp = core.special;
  double t = 30;  // the task's ring words and counters
  // The activation's program (compiler/activations/), op by op over the channels' planes. Its
  // vectors (the ring's slot, tmp, py, pt1..: cq P words each, one after another) start in the
  // same SRAM bank when cq P fp32 words span whole rounds of the banks: a two-source op's
  // streams then collide every step, not at vec_op's average offset.
  const bool aligned = core.sram_banks >= 2 && static_cast<long long>(2 * all) % core.sram_banks == 0;
  auto act_op = [&](double n, int reads, int rate) {
    const int k = std::max(1, rate);
    if (!aligned || reads < 2 || (reads + core.read_ports - 1) / std::max(1, core.read_ports) != 1) return vec_op(core, n, reads, rate, false);
    return std::ceil(n / k) * 2 + 1;
  };
  auto act = [&](Activation a, bool forward) {
    const ActivationDef& def = activation(a);
    double c = 0;
    const ActProgram prog = forward ? def.fwd(d.act_par) : def.bwd(d.act_par);
    for (const ActProgram::Step& st : prog.steps()) {
      const int rate = st.op == Op::kVmul || st.op == Op::kVmuls ? mul
                       : st.op == Op::kVexp || st.op == Op::kVrecip || st.op == Op::kVlog ? sp
                       : st.op == Op::kVfmac || st.op == Op::kVfmacs ? core.fmac_fp32
                                                                      : add;
      c += act_op(all, st.op == Op::kVfill ? 0 : st.nsrc, rate);
    }
    return c;
  };
  if (fwd) t += cq * (vec_op(core, P, 0, add, false) + vec_op(core, P, 2, add, false) + 10);  // bias
  t += act(d.act, fwd);
  if (act_needs_pre(d.act)) {  // z kept (a copy); backward a max pooling takes y again from it
    if (fwd) t += vec_op(core, all, 1, add, false) + 2;
    else if (q.kind == PoolParams::kMax) t += act(d.act, true) + 4;
  }
  if (!fwd) t += cq * (vec_op(core, P, 1, add, false) + 12);  // db
  if (q.kind == PoolParams::kNone) return t;
  const double taps = static_cast<double>(q.kh) * q.kw, wq = q.wq, strided = q.sw != 1;
  if (whole_plane(c, q)) return t + cq * (vec_op(core, P, fwd ? 1 : 0, add, false) + 14) + (fwd ? 0 : vec_op(core, all, 0, add, false));
  if (q.padded()) {
    // emit_pool_fwd/bwd's padded form: per row of windows its fill (or the gradient's copy and
    // scaling), then per tap inside the plane its lengths, bases and ops over its windows.
    const bool max = q.kind == PoolParams::kMax, table = !max && !pool_uniform(q);
    double row = 12 + (fwd ? vec_op(core, wq, 0, add, false) : max ? vec_op(core, wq, 1, add, false) : 0);
    if (!max) row += (fwd || table) ? vec_op(core, wq, 2, mul, false) + 4 : 0;
    double rows = q.hq * row;
    for (int ky = 0; ky < q.kh; ++ky) {
      for (int kx = 0; kx < q.kw; ++kx) {
        const PoolSpan sp = pool_span(c, q, ky, kx);  // on each of its rows, over its windows
        const double n = sp.x1 - sp.x0, on = sp.y1 - sp.y0;
        if (fwd) {
          rows += on * (vec_op(core, n, 2, add, strided) + 8);
        } else if (max) {
          rows += on * (vec_op(core, n, 2, add, strided) + vec_op(core, n, 3, add, false) + vec_op(core, n, 2, add, strided) +
                        vec_op(core, n, 3, add, false) + 14 + (sp.x0 > 0 ? 6 : 0));
        } else {
          rows += on * (vec_op(core, n, 2, table ? add : std::max(1, core.fmac_fp32), strided) + 10 + (sp.x0 > 0 ? 4 : 0));
        }
      }
    }
    return t + cq * (12 + rows) + (fwd ? 0 : vec_op(core, all, 0, add, false));
  }
  double row = 10;
  if (fwd) {
    row += taps * (vec_op(core, wq, 2, add, strided) + 2);
    if (q.kind == PoolParams::kAvg) row += vec_op(core, wq, 1, mul, false) + 1;
  } else if (q.kind == PoolParams::kMax) {
    // vmov of the row, then per tap vcmpgt, vsel, vadd into dz (strided), vsel.
    row += vec_op(core, wq, 1, add, false) +
           taps * (vec_op(core, wq, 2, add, strided) + vec_op(core, wq, 3, add, false) + vec_op(core, wq, 2, add, strided) +
                   vec_op(core, wq, 3, add, false) + 4);
  } else {
    row += taps * (vec_op(core, wq, 2, std::max(1, core.fmac_fp32), strided) + 5);
  }
  return t + cq * (12 + q.hq * row) + (fwd ? 0 : vec_op(core, all, 0, add, false));
}

KernelEstimate conv_estimate(const DenseKernel& d, const HwConfig& hw, int ci, int cq, bool dx, bool grad, int ring_depth) {
  const ConvParams& c = d.conv;
  ConvParams slice = c;
  slice.c = ci;
  double live = 0;
  for (const ConvTap& t : conv_taps(slice)) live += t.oy1 > t.oy0 && t.ox1 > t.ox0;
  const double taps = slice.taps(), dead = taps - live;
  const double P = static_cast<double>(c.ho) * c.wo, Pq = static_cast<double>(d.out) / c.co;
  const double ni = static_cast<double>(ci) * c.h * c.w, add = std::max(1, hw.core.add_fp32);
  KernelEstimate e;
  // The tile: forward one vaxpy per tap and output channel; backward a vfmac into the tap's
  // momentum element and (not in the first layer) a vaxpy into dx, each with its bank conflicts
  // (conv_tap_cycles), and a tap's scalar set-up around them.
  const ConvTapCycles v = conv_tap_cycles(slice, cq, dx, ring_depth, hw.core);
  e.fwd = v.fwd + cq * (live * kConvTapF + dead * 8 + 10) + cq * P / add + kSampleEnd / 2;
  e.bwd = v.bwd + cq * (live * (dx ? kConvTapB : kConvTapB0) + dead * 8 + 10) + (dx ? ni / add : 0) + kSampleEnd / 2;
  e.update_per_batch = cq * taps * (1 / static_cast<double>(hw.core.fmac_fp32) + 1.0 / hw.core.mul_fp32) + kUpdateFixed;
  if (grad) e.update_per_batch += 2.0 * cq * taps / hw.core.add_fp32;
  // The stream: a sample's input in (a wavelet a cycle, during the pass before), the forward
  // work and the planes out (the next pass waits for them).
  e.stream = std::max(ni, e.fwd + cq * P);
  e.in_words = ni;
  e.out_words = cq * P;
  // The root (codegen.cc conv_root_source), op by op (root_ops): forward per channel the bias
  // filled and added, the activation, the pooling; backward the pooled gradient spread over the
  // windows, the activation's derivative, per channel db by a vsum.
  const double root_f = root_ops(hw.core, d, cq, true), root_b = root_ops(hw.core, d, cq, false);
  e.root = kRootFixed + root_f + root_b;
  e.root_fwd = kRootFixed / 2 + root_f;
  e.root_bwd = kRootFixed / 2 + root_b;
  e.stream = std::max(e.stream, cq * P + root_f + cq * Pq);
  e.q_words = cq * Pq;
  return e;
}

struct Search {
  const KernelGraph& g;
  const HwConfig& hw;
  const PlaceOptions& opt;
  long sram;
  int ring_depth;  // the ring the SRAM must hold (auto: the least, kMinRing)
  bool grad;       // replicas: a gradient buffer beside the momentum

  // Layer l's estimate with p_in x p_out tiles; infinite when a tile does not fit SRAM.
  KernelEstimate estimate(int l, int p_in, int p_out, long* bytes) const {
    const DenseKernel& d = g.layers[static_cast<size_t>(l)];
    if (d.conv.on) {
      const int ci = (d.conv.c + p_in - 1) / p_in, cq = (d.conv.co + p_out - 1) / p_out;
      // Residual connections (codegen.cc SkipStreams): as the target the ring of the source's
      // planes, the gradient's send buffer and xs, a vadd forward and the gradient's copy
      // backward; as the source the ring of the sum's gradient and its vadd.
      const double P = static_cast<double>(d.conv.ho) * d.conv.wo, Pq = static_cast<double>(d.out) / d.conv.co;
      const double add = std::max(1, hw.core.add_fp32), D = ring_depth + 4;
      double skip_bytes = 0, skip_f = 0, skip_b = 0;
      if (d.residual >= 1) skip_bytes += 4 * (D + 2) * cq * P, skip_f += kResidualFixed / 2 + cq * P / add, skip_b += kResidualFixed / 2 + cq * P;
      for (const DenseKernel& t : g.layers) {
        if (t.residual == l + 1) skip_bytes += 4 * D * cq * Pq, skip_b += kResidualFixed / 2 + cq * Pq / add;
      }
      const long root = conv_root_bytes(d.conv, d.pool, cq, ring_depth, grad, conv_root_act_planes(d)) + static_cast<long>(skip_bytes);
      *bytes = std::max(conv_tile_bytes(d.conv, ci, cq, ring_depth, l > 0, grad, conv_sram_align(hw.core)), root);
      KernelEstimate e = conv_estimate(d, hw, ci, cq, l > 0, grad, ring_depth);
      e.root_fwd += skip_f, e.root_bwd += skip_b, e.root += skip_f + skip_b;
      return e;
    }
    const int ni = max_slice(g, l, p_in), no = max_slice(g, l + 1, p_out);
    const bool dx = l > 0;
    *bytes = tile_sram_bytes(ni, no, ring_depth, dx, grad);
    const double fmac = hw.core.fmac_fp32;
    KernelEstimate e;
    e.fwd = ni * (no / fmac + kFwdTask) + kSampleEnd / 2;
    e.bwd = no * ((dx ? 2 : 1) * ni / fmac + kBwdTask) + kSampleEnd / 2;
    // The update: W += -lr V (vaxpy, FMAC rate), V *= momentum (vmuls, multiply rate).
    e.update_per_batch = static_cast<double>(ni) * no * (1 / fmac + 1.0 / hw.core.mul_fp32) + kUpdateFixed;
    // With replicas, V += the summed gradients and the buffer cleared (adder rate).
    if (grad) e.update_per_batch += 2.0 * ni * no / hw.core.add_fp32;
    const bool last = l + 1 == static_cast<int>(g.layers.size());
    e.root = kRootFixed + no * (2 + 2 * act_cost(d.act, d.act_par)) + (last ? kLossFixed + 8.0 * no : 0);
    // A residual connection's target root adds the source's values (a vadd) and keeps and sends
    // the sum's gradient (a vmov, a send); the source's root adds that gradient (a vadd) and
    // sends its values once more.
    if (d.residual >= 0) e.root += kResidualFixed + no * (0.5 + 2.0);
    // A LayerNorm at the root (codegen.cc): about 10 vector ops over the outputs forward and 12
    // backward, 4 sums and the scalar work between them.
    if (d.ln.on) e.root += kLayerNormFixed + no * 22.0;
    for (const DenseKernel& t : g.layers) {
      if (t.residual == l + 1) e.root += kResidualFixed + no * (0.5 + 1.0);
    }
    return e;
  }

  double layer_time(int l, int p_in, int p_out) const {
    long bytes = 0;
    const KernelEstimate e = estimate(l, p_in, p_out, &bytes);
    const DenseKernel& d = g.layers[static_cast<size_t>(l)];
    if (d.conv.on) {
      // A slice's planes are one descriptor each way: fewer than 65536 elements.
      const long ci = (d.conv.c + p_in - 1) / p_in, cq = (d.conv.co + p_out - 1) / p_out;
      const long ni = ci * d.conv.h * d.conv.w, no = cq * d.conv.ho * d.conv.wo;
      if (bytes > sram || ni > 65535 || no > 65535) return kInfeasible + static_cast<double>(bytes);
      return e.compute();
    }
    // A tile's column descriptors stride by its output slice: at most 2047 elements ...
    const int no = max_slice(g, l + 1, p_out);
    const long ni = max_slice(g, l, p_in);
    // ... and a whole tile is one descriptor (the update): fewer than 65536 elements.
    if (bytes > sram || no > 2047 || ni * no > 65535) return kInfeasible + static_cast<double>(bytes);
    return e.compute();
  }
};

}  // namespace

double KernelEstimate::compute() const { return std::max({fwd + bwd, root, stream}); }

double Plan::bound_cycles() const {
  double t = std::max(transmission, ring_trip / ring_depth);
  for (const auto& l : layers) t = std::max(t, l.est.compute() + l.est.update_per_batch / batch);
  return t;
}

double Plan::coupling() const {
  // The stages in pipeline order: the input transmission, then each layer's tiles and roots.
  // Two neighbours of nearly the same time run as one slower stage.
  std::vector<double> st{transmission};
  for (const auto& l : layers) {
    st.push_back(l.est.fwd + l.est.bwd + l.est.update_per_batch / batch);
    st.push_back(l.est.root);
  }
  const double b = bound_cycles();
  double t = b;
  for (size_t i = 0; i + 1 < st.size(); ++i) {
    const double hi = std::max(st[i], st[i + 1]), lo = std::min(st[i], st[i + 1]);
    if (hi <= 0) continue;
    double from = kSlack, weight = 1;
    if (i == 0) {
      // The channel and layer 0's tiles: as far as the tiles' backward bursts outlast their
      // input buffers (Plan::burst). A slower consumer keeps the buffers full, so its bursts
      // reach the channel sooner than a slower channel's gaps reach idle tiles.
      from = st[1] >= st[0] ? kCoupleFromConsumer : kCoupleFromProducer;
      weight = burst;
    }
    t = std::max(t, hi * (1 + weight * kCoupling * std::clamp((lo / hi - from) / (1 - from), 0.0, 1.0)));
  }
  return b > 0 ? t / b - 1 : 0;
}

double Plan::cycles_per_sample() const { return bound_cycles() * (1 + coupling()); }

double Plan::cycles_per_batch() const {
  const double samples = std::ceil(static_cast<double>(batch) / replicas);
  // The lookahead samples enter while layer 0 would wait idle for the minibatch's last gradient:
  // they hide that idle part of the fill and drain (not layer 0's own forward, backward and
  // update of the last sample, nor the first sample's transmission), at most F samples' time.
  double wait = latency;
  if (lookahead0 > 0 && !layers.empty()) {
    const KernelEstimate& e = layers.front().est;
    const double idle = std::max(0.0, latency - transmission - (e.fwd + e.bwd + e.update_per_batch));
    wait -= std::min(idle, lookahead0 * cycles_per_sample());
  }
  // A convolution's tiles and roots take a sample whole in bulk passes: its pipeline is
  // scheduled pass by pass (schedule()).
  for (const LayerPlan& l : layers) {
    if (l.conv.on) return schedule(static_cast<int>(samples)) + reduce;
  }
  // Elsewhere every sample's time is added to the trip: the dense chain's estimate is calibrated
  // so (docs/compiler.md, "Coupled stages").
  return samples * cycles_per_sample() + wait + reduce;
}

double Plan::schedule(int n) const {
  // Each layer's tiles (their slowest) and its roots are one server each, which runs one pass at
  // a time, a forward one when one is ready (the lower task ID), each kind in sample order:
  // tiles F (forward) and B (backward), roots RF and RB (the last layer's RB is its loss, after
  // RF). A pass is ready when what it consumes has arrived, a wavelet a cycle after its producer
  // ended (in_words into a convolution's ring, out_words of sums or of dz; a dense layer streams
  // its wavelets as they come, so its passes follow their producers at once). A tile asks for
  // sample s's input when its pass of s - 1 starts and slot s - ring_depth is free (its B ended);
  // layer 0's inputs come through the channel, `transmission` cycles each.
  const int L = static_cast<int>(layers.size());
  if (L == 0 || n <= 0) return 0;
  constexpr double kNone = std::numeric_limits<double>::infinity();
  enum { kF, kRF, kRB, kB };
  std::vector<std::array<std::vector<double>, 4>> start(static_cast<size_t>(L)), end(static_cast<size_t>(L));
  for (int l = 0; l < L; ++l) {
    for (int k = 0; k < 4; ++k) {
      start[static_cast<size_t>(l)][static_cast<size_t>(k)].assign(static_cast<size_t>(n), kNone);
      end[static_cast<size_t>(l)][static_cast<size_t>(k)].assign(static_cast<size_t>(n), kNone);
    }
  }
  auto E = [&](int l, int k, int s) { return end[static_cast<size_t>(l)][static_cast<size_t>(k)][static_cast<size_t>(s)]; };
  auto S0 = [&](int l, int k, int s) { return start[static_cast<size_t>(l)][static_cast<size_t>(k)][static_cast<size_t>(s)]; };
  const int depth = std::max(1, ring_depth);
  std::vector<double> arrive(static_cast<size_t>(n), kNone);  // layer 0's inputs
  double channel_free = 0;
  // When tile pass F(l, s)'s sums are in at the root: it takes them once its planes of s - 1
  // have left (q_words), a wavelet a cycle.
  auto sums_in = [&](int l, int s) {
    const LayerPlan& lp = layers[static_cast<size_t>(l)];
    if (E(l, kF, s) == kNone) return kNone;
    if (!lp.conv.on) return E(l, kF, s);
    const double prev = s == 0 ? 0.0 : E(l, kRF, s - 1);
    return prev == kNone ? kNone : std::max(E(l, kF, s), prev + lp.est.q_words) + lp.est.out_words;
  };
  auto ready = [&](int l, int k, int s) -> double {
    const LayerPlan& lp = layers[static_cast<size_t>(l)];
    const double in = lp.conv.on ? lp.est.in_words : 0, out = lp.conv.on ? lp.est.out_words : 0;
    switch (k) {
      case kF: {
        // Its input, asked for when the pass before started and a slot is free; and that pass's
        // sums gone to the root (task 2 blocked until then).
        double ask = s == 0 ? 0 : S0(l, kF, s - 1);
        if (s >= depth) ask = std::max(ask, E(l, kB, s - depth));
        if (ask == kNone) return kNone;
        const double sent = s == 0 ? 0.0 : sums_in(l, s - 1);
        if (l == 0) {
          double& a = arrive[static_cast<size_t>(s)];
          if (a == kNone && (s == 0 || arrive[static_cast<size_t>(s) - 1] != kNone)) {
            a = std::max(ask, channel_free) + transmission;
            channel_free = a;
          }
          return std::max(a, sent);
        }
        const double got = E(l - 1, kRF, s);
        return got == kNone ? kNone : std::max(std::max(got, ask) + in, sent);
      }
      case kRF: return sums_in(l, s);
      case kRB: {
        if (l + 1 == L) return E(l, kRF, s);
        const LayerPlan& nx = layers[static_cast<size_t>(l) + 1];
        return E(l + 1, kB, s) == kNone ? kNone : E(l + 1, kB, s) + (nx.conv.on ? nx.est.in_words : 0);
      }
      default: return E(l, kRB, s) == kNone ? kNone : E(l, kRB, s) + out;
    }
  };
  auto length = [&](int l, int k) {
    const KernelEstimate& e = layers[static_cast<size_t>(l)].est;
    const double rf = layers[static_cast<size_t>(l)].conv.on ? e.root_fwd : e.root / 2;
    const double rb = layers[static_cast<size_t>(l)].conv.on ? e.root_bwd : e.root / 2;
    return std::max(1.0, k == kF ? e.fwd : k == kB ? e.bwd : k == kRF ? rf : rb);
  };
  // Servers 2l (tiles: F, B) and 2l + 1 (roots: RF, RB): the next pass of each kind.
  std::vector<std::array<int, 2>> next(static_cast<size_t>(2 * L), std::array<int, 2>{0, 0});
  std::vector<double> free_at(static_cast<size_t>(2 * L), 0);
  for (;;) {
    int best = -1, best_k = 0;
    double best_t = kNone;
    for (int v = 0; v < 2 * L; ++v) {
      const int l = v / 2, kf = v % 2 ? kRF : kF, kb = v % 2 ? kRB : kB;
      const auto& nv = next[static_cast<size_t>(v)];
      const double rf = nv[0] < n ? ready(l, kf, nv[0]) : kNone, rb = nv[1] < n ? ready(l, kb, nv[1]) : kNone;
      const double t = std::max(free_at[static_cast<size_t>(v)], std::min(rf, rb));
      if (t < best_t) {
        best_t = t;
        best = v;
        best_k = rf <= t ? kf : kb;
      }
    }
    if (best < 0) break;
    const int l = best / 2, slot = best_k == kF || best_k == kRF ? 0 : 1;
    const int s = next[static_cast<size_t>(best)][static_cast<size_t>(slot)]++;
    start[static_cast<size_t>(l)][static_cast<size_t>(best_k)][static_cast<size_t>(s)] = best_t;
    const double e = best_t + length(l, best_k);
    end[static_cast<size_t>(l)][static_cast<size_t>(best_k)][static_cast<size_t>(s)] = e;
    free_at[static_cast<size_t>(best)] = e;
  }
  double t = 0;
  for (int l = 0; l < L; ++l) {
    const KernelEstimate& e = layers[static_cast<size_t>(l)].est;
    t = std::max(t, E(l, kB, n - 1) + e.update_per_batch);
  }
  return t;
}

long tile_sram_bytes(int in_len, int out_len, int ring_depth, bool dx, bool grad) {
  const long ni = in_len, no = out_len;
  return (grad ? 12 : 8) * ni * no + 4 * no + (dx ? 4 * ni : 0) + 4L * ring_depth * ni + kCodeBytes;
}

// Weights and momentum, the tap table (4 words a tap), the ring of input slices, the plane of
// sums and of dz, dx (codegen.cc conv_tile_source).
long conv_tile_bytes(const ConvParams& c, int ci, int co, int ring_depth, bool dx, bool grad, int align) {
  const long taps = static_cast<long>(ci) * c.kh * c.kw, ni = static_cast<long>(ci) * c.h * c.w;
  const long no = static_cast<long>(co) * c.ho * c.wo;
  return (grad ? 12 : 8) * co * taps + 16 * taps + 4L * ring_depth * ni + 8 * no + (dx ? 4 * ni : 0) + 4L * align + kCodeBytes;
}

// The sums, dz, scratch and 1.0s over the channels' planes, the ring of activated planes and of
// pooled ones, the pooled gradient, a pooling row's scratch and its table of 1 / count (a padded
// average's, codegen.cc pool_div_table) (codegen.cc conv_root_source).
long conv_root_bytes(const ConvParams& c, const PoolParams& q, int co, int ring_depth, bool grad, int act_planes) {
  const long P = static_cast<long>(c.ho) * c.wo, Pq = q.kind == PoolParams::kNone ? P : static_cast<long>(q.hq) * q.wq;
  const long table = q.kind == PoolParams::kAvg && !pool_uniform(q) ? 4L * Pq : 0;
  return 4L * co * P * (4 + ring_depth + act_planes) + 4L * co * Pq * (ring_depth + 1) +
         4L * (P + 3L * std::max(1, q.wq) + (grad ? 12 : 8) * co + 16) + table + kCodeBytes;
}

int conv_root_act_planes(const DenseKernel& d) {
  return act_needs_pre(d.act) ? act_temps(d.act, d.act_par) : 0;
}

double LayerPlan::macs() const {
  if (conv.on) {
    double window = 0;  // every tap's valid window, per output channel
    for (const ConvTap& t : conv_taps(conv)) window += static_cast<double>(t.oy1 - t.oy0) * (t.ox1 - t.ox0);
    return window * conv.co * (dx ? 3 : 2);
  }
  return static_cast<double>(in) * out * (dx ? 3 : 2);
}

size_t LayerPlan::weight_index(int a, int b, long i) const {
  if (conv.on) {
    const long t = static_cast<long>(in_ch(a)) * conv.kh * conv.kw;  // the tile's taps per output channel
    const long o = i / t, k = i % t;
    return static_cast<size_t>((out_ch0(b) + o) * conv.taps() + static_cast<long>(in_ch0(a)) * conv.kh * conv.kw + k);
  }
  const long no = out_len(b), k = i / no, o = i % no;
  return static_cast<size_t>(out_off[static_cast<size_t>(b)] + o) * in + in_off[static_cast<size_t>(a)] + k;
}

std::map<std::pair<int, int>, long> weight_elements(const Plan& plan) {
  std::map<std::pair<int, int>, long> seg;
  for (const LayerPlan& l : plan.layers) {
    for (int a = 0; a < l.p_in; ++a) {
      for (int b = 0; b < l.p_out; ++b) {
        seg[l.tile_xy(a, b)] = l.conv.on ? static_cast<long>(l.out_ch(b)) * l.in_ch(a) * l.conv.kh * l.conv.kw
                                         : static_cast<long>(l.in_len(a)) * l.out_len(b);
      }
    }
    for (int b = 0; b < l.p_out; ++b) seg[l.root_xy(b)] = static_cast<long>(l.bias_count(b)) * (l.ln ? 3 : 1);
  }
  return seg;
}

std::map<int, std::vector<int>> weight_columns(const Plan& plan) {
  std::map<int, std::vector<int>> cols;
  for (const auto& [xy, n] : weight_elements(plan)) cols[xy.first].push_back(xy.second);
  for (auto& [x, rows] : cols) std::sort(rows.rbegin(), rows.rend());
  return cols;
}

namespace {

// One copy of the model on `hw`'s fabric (the whole fabric, or a replica's band of it) with at
// most `budget` PEs; `grad`: its PEs keep a gradient buffer (replicas).
Plan place_copy(const KernelGraph& g, const HwConfig& hw, const PlaceOptions& opt, long long budget, bool grad) {
  const int L = static_cast<int>(g.layers.size());
  const int W = hw.fabric.width, H = hw.fabric.height;
  const long sram = static_cast<long>(hw.core.sram_kb) * 1024;
  if (sram <= kCodeBytes) {
    throw CompileError("core.sram_kb = " + std::to_string(hw.core.sram_kb) + " leaves no room for data: the kernels' code takes " +
                       std::to_string(kCodeBytes / 1024) + " KB of every PE's SRAM");
  }

  // Enough SRAM at all? Weights and momentum take 8 bytes per parameter, plus one tile's
  // buffers and code on every PE.
  {
    const long long need = (grad ? 12LL : 8LL) * g.parameters();
    const long long per_pe = sram - kCodeBytes;
    const long long fabric_pes = static_cast<long long>(W) * H;
    const bool budget_binds = budget < fabric_pes;
    const long long have = std::min(budget, fabric_pes) * per_pe;
    if (need > have) {
      throw CompileError("the model does not fit: its " + std::to_string(g.parameters()) + " parameters need " +
                         std::to_string(need / 1024) + " KB of SRAM for weights and momentum, the " +
                         (budget_binds ? "PE budget (compile.max_pes = " + std::to_string(opt.max_pes) + ")"
                                       : std::to_string(W) + " x " + std::to_string(H) + " fabric") +
                         " has " + std::to_string(have / 1024) + " KB (short by " + std::to_string((need - have) / 1024) +
                         " KB); use " + (budget_binds ? "a larger compile.max_pes (0: the whole fabric)" : "a larger fabric") +
                         ", or weight-streaming mode (--mode weight-streaming)");
    }
  }
  if (W < 3 || H < 3) throw CompileError("the fabric is too small: layer-pipelined mode needs at least 3 x 3 PEs");

  const bool auto_ring = opt.ring_depth == 0;
  Search s{g, hw, opt, sram, auto_ring ? kMinRing : opt.ring_depth, grad};
  std::vector<int> p(static_cast<size_t>(L) + 1, 1);  // p[l] = layer l's p_in; p[l+1] its p_out; p[L] = 1
  // A residual connection's two boundaries (the source k, the sum l + 1) take the same slices:
  // the larger of their counts, until every connection agrees (chained connections share
  // boundaries: one pass left 784-48-48-48-10's first boundary at 7 slices and its second at 8,
  // and the first residual net had no root to start from).
  auto tie = [&](std::vector<int>& q) {
    for (bool moved = true; moved;) {
      moved = false;
      for (int l = 0; l < L; ++l) {
        const int k = g.layers[static_cast<size_t>(l)].residual;
        if (k < 1) continue;
        const int v = std::max(q[static_cast<size_t>(k)], q[static_cast<size_t>(l) + 1]);
        moved = moved || q[static_cast<size_t>(k)] != v || q[static_cast<size_t>(l) + 1] != v;
        q[static_cast<size_t>(k)] = q[static_cast<size_t>(l) + 1] = v;
      }
    }
  };
  auto pes_of = [&](const std::vector<int>& q) {
    long long n = 0;
    for (int l = 0; l < L; ++l) n += static_cast<long long>(q[static_cast<size_t>(l)]) * q[static_cast<size_t>(l) + 1] + q[static_cast<size_t>(l) + 1];
    return n;
  };
  // Staircase extent: A layers add p_in + 1 rows, B layers p_in + 1 columns.
  auto extent = [&](const std::vector<int>& q, int* w, int* h) {
    int x = 1, y = 0, mx = 1, my = 0;
    for (int l = 0; l < L; ++l) {
      const int pin = q[static_cast<size_t>(l)], pout = q[static_cast<size_t>(l) + 1];
      if (l % 2 == 0) {
        mx = std::max(mx, x + pout);
        my = std::max(my, y + pin + 1);
        y += pin + 1;
      } else {
        mx = std::max(mx, x + pin + 1);
        my = std::max(my, y + pout);
        x += pin + 1;
      }
    }
    *w = mx;
    *h = my;
  };
  auto worst = [&](const std::vector<int>& q, int* which) {
    double t = -1;
    for (int l = 0; l < L; ++l) {
      const double tl = s.layer_time(l, q[static_cast<size_t>(l)], q[static_cast<size_t>(l) + 1]);
      if (tl > t) {
        t = tl;
        *which = l;
      }
    }
    return t;
  };
  // West channels: the rows the fabric gives them (hw/fabric.cc). Layer 0's rows are centred on
  // the channel nearest the fabric's middle; each row takes its inputs from the channel nearest
  // it, and the last layer's root takes the labels from the one nearest it.
  const int nch = hw.io.channels(H);
  if (nch < 1) throw CompileError("layer-pipelined mode needs a West I/O channel for its input (io.channels_per_edge is 0)");
  auto ch_row = [&](int i) { return hw.io.channel_row(H, i); };
  auto nearest = [&](int row) {
    int best = 0;
    for (int i = 1; i < nch; ++i) {
      if (std::abs(ch_row(i) - row) < std::abs(ch_row(best) - row)) best = i;
    }
    return best;
  };
  const int mid = ch_row(nch / 2);
  auto top_row = [&](const std::vector<int>& q) {
    int w = 0, h = 0;
    extent(q, &w, &h);
    return std::clamp(mid - q[0] / 2, 0, std::max(0, H - h));
  };
  // The staircase fits the fabric and the budget, and the column-0 bus can color its rows'
  // inputs: every row fed through a bus router takes a color of its own there (routing.cc), and
  // the label's and loss's paths may need two more.
  // A residual connection's slices each take two nets between the source's and the target's
  // roots, and the slices' paths cross one another (the source roots lie on one line, the
  // target roots on another, in orders that do not nest: routing.cc), so every such net needs a
  // color of its own where they cross, beside the few nets of the tiles they pass: at most
  // (colors - kResidualColorReserve) / 2 slices.
  const int residual_cap = std::max(1, (hw.router.colors - kResidualColorReserve) / 2);
  auto fits = [&](const std::vector<int>& q) {
    int w = 0, h = 0;
    extent(q, &w, &h);
    if (w > W || h > H || pes_of(q) > budget) return false;
    for (size_t l = 0; l < g.layers.size(); ++l) {
      const DenseKernel& d = g.layers[l];
      if (d.residual >= 1 && q[static_cast<size_t>(d.residual)] > residual_cap) return false;
      if (d.ln.on && q[l + 1] > 1) return false;  // one root normalises each sample
    }
    std::vector<int> cross(static_cast<size_t>(H) + 1, 0);  // difference array over the bus rows
    const int y0 = top_row(q);
    for (int a = 0; a < q[0]; ++a) {
      const int from = ch_row(nearest(y0 + a)), to = y0 + a;
      ++cross[static_cast<size_t>(std::min(from, to))];
      --cross[static_cast<size_t>(std::max(from, to)) + 1];
    }
    int n = 0;
    for (int yy = 0; yy < H; ++yy) {
      n += cross[static_cast<size_t>(yy)];
      if (n + 2 > hw.router.colors) return false;
    }
    return true;
  };
  const double channel_rate = std::min(1.0, hw.io.channel_gbps * 1e3 / (32.0 * hw.fabric.clock_mhz));
  // Cycles per sample of the busiest input channel or bus link (Plan::transmission): a channel
  // moves channel_rate wavelets a cycle; row a's inputs run from its channel's row along column 0
  // to the row of its tiles (routing.cc), and a link of that bus moves one wavelet a cycle each
  // way, for every row beyond it fed from that side.
  auto transmission_of = [&](const std::vector<int>& q) {
    std::vector<double> load(static_cast<size_t>(nch), 0.0);
    std::vector<double> south(static_cast<size_t>(H) + 1, 0.0), north(static_cast<size_t>(H) + 1, 0.0);  // difference arrays
    const int y0 = top_row(q);
    const std::vector<int> off = split(g.layers.front().in, q[0], unit_of(g, 0));
    for (int a = 0; a < q[0]; ++a) {
      const int c = nearest(y0 + a), from = ch_row(c), to = y0 + a;
      const double n = off[static_cast<size_t>(a) + 1] - off[static_cast<size_t>(a)];
      load[static_cast<size_t>(c)] += n;
      if (to > from) {  // links from..to-1 southward (link y joins rows y and y + 1)
        south[static_cast<size_t>(from)] += n;
        south[static_cast<size_t>(to)] -= n;
      } else if (to < from) {
        north[static_cast<size_t>(to)] += n;
        north[static_cast<size_t>(from)] -= n;
      }
    }
    double bus = 0, sn = 0, nn = 0;
    for (int yy = 0; yy < H; ++yy) {
      sn += south[static_cast<size_t>(yy)];
      nn += north[static_cast<size_t>(yy)];
      bus = std::max({bus, sn, nn});
    }
    int y = y0, root = y0;  // the last layer's first root row (LayerPlan::root_xy(0))
    for (int l = 0; l < L; ++l) {
      if (l % 2 == 0) {
        root = y + q[static_cast<size_t>(l)];
        y += q[static_cast<size_t>(l)] + 1;
      } else {
        root = y;
      }
    }
    load[static_cast<size_t>(nearest(root))] += 1;  // the label
    return std::max(*std::max_element(load.begin(), load.end()) / channel_rate, bus);
  };
  // A sample's round trip from a layer-0 tile's forward pass to its backward pass (Plan::
  // ring_trip): every layer's work on it and every link of the chains it crosses. One link:
  // out of a core and into the next through the ramps, a hop, the receiving task's decode and
  // its op's first step.
  const double hop_cycles = 2.0 * hw.router.ramp_latency + hw.router.hop_latency + hw.core.decode_latency + 1;
  auto ring_trip_of = [&](const std::vector<int>& q) {
    double trip = 0;
    for (int l = 0; l < L; ++l) {
      long bytes = 0;
      const int pi = q[static_cast<size_t>(l)], po = q[static_cast<size_t>(l) + 1];
      trip += s.estimate(l, pi, po, &bytes).compute() + hop_cycles * (pi + (l > 0 ? po : 0));
    }
    return trip;
  };
  // The search's time per sample: the slowest layer, the busiest input channel, and with a
  // fixed ring a sample's round trip over it (an automatic ring is sized to cover the trip).
  auto objective = [&](const std::vector<int>& q, int* which) {
    double t = std::max(worst(q, which), transmission_of(q));
    if (!auto_ring) t = std::max(t, ring_trip_of(q) / opt.ring_depth);
    return t;
  };
  if (!fits(p)) {
    throw CompileError("the fabric is too small for " + std::to_string(L) + " layers (" + std::to_string(W) + " x " +
                       std::to_string(H) + ", compile.max_pes " + std::to_string(opt.max_pes) + ")");
  }
  // Greedy: split the slowest layer's inputs or outputs further while that lowers the time per
  // sample; when the input channels bind, layer 0's input rows spread over more channels
  // instead (more PEs buy nothing else). Each step only adds PEs, so a larger budget follows the
  // same path further: never slower.
  for (int iter = 0; iter < 100000; ++iter) {
    int l = 0;
    const double t = objective(p, &l);
    const bool channel_bound = transmission_of(p) >= worst(p, &l);
    std::vector<int> best;
    double best_t = t;
    long long best_pes = 0;
    if (channel_bound) {
      // The fewest more input rows that reach another channel (rows between two channels take
      // the nearer one's, so one more row seldom helps).
      const int lim = units_of(g, 0);
      for (int v = p[0] + 1; v <= lim; ++v) {
        std::vector<int> q = p;
        q[0] = v;
        if (!fits(q)) break;  // taller or more PEs from here on
        int dummy = 0;
        const double tq = objective(q, &dummy);
        if (tq < t) {
          best = q;
          best_t = tq;
          break;
        }
      }
    }
    // Boundary k split further: the next slice count that shrinks its largest slice, tied and
    // fitting the fabric (false if none).
    auto split = [&](int k, std::vector<int>* q) {
      if (k >= L) return false;  // the last layer keeps one output slice (one root computes the loss)
      const int lim = units_of(g, k), pk = p[static_cast<size_t>(k)];
      if (pk >= lim) return false;
      *q = p;
      int& v = (*q)[static_cast<size_t>(k)];
      v = std::min(lim, std::max(pk + 1, pk + pk / 8));
      // Slices of whole channels (a convolution's boundaries): a count that leaves the largest
      // slice as it was buys nothing (16 channels in 4 or 5 slices: 4 in the largest), and the
      // search would stop there; take the fewest more that shrink it.
      // (Also where a convolution's planes pool to one element each: the unit is 1 but the
      // slices are still whole channels, 4 channels in 3 slices as large as in 2.)
      const bool chans = (k < L && g.layers[static_cast<size_t>(k)].conv.on) || (k > 0 && g.layers[static_cast<size_t>(k) - 1].conv.on);
      if (unit_of(g, k) > 1 || chans) {
        while (v < lim && max_slice(g, k, v) >= max_slice(g, k, pk)) ++v;
      }
      tie(*q);
      return fits(*q);
    };
    for (int k : {l, l + 1}) {
      if (channel_bound) break;
      std::vector<int> q;
      if (!split(k, &q)) continue;
      int dummy = 0;
      const double tq = objective(q, &dummy);
      const long long pq = pes_of(q);
      if (tq < best_t || (tq == best_t && !best.empty() && pq < best_pes)) {
        best = q;
        best_t = tq;
        best_pes = pq;
      }
    }
    if (best.empty() && t >= kInfeasible) {
      // Several layers over SRAM by as much (a CNN's roots of whole planes, one after another):
      // splitting one does not lower the worst, and the greedy step above stalls. Take the split
      // that lowers their summed excess most without raising the worst.
      auto excess = [&](const std::vector<int>& q) {
        double e = 0;
        for (int j = 0; j < L; ++j) e += std::max(0.0, s.layer_time(j, q[static_cast<size_t>(j)], q[static_cast<size_t>(j) + 1]) - kInfeasible);
        return e;
      };
      double best_e = excess(p);
      for (int j = 0; j < L; ++j) {
        if (s.layer_time(j, p[static_cast<size_t>(j)], p[static_cast<size_t>(j) + 1]) < kInfeasible) continue;
        for (int k : {j, j + 1}) {
          std::vector<int> q;
          int dummy = 0;
          if (!split(k, &q) || objective(q, &dummy) > t) continue;
          if (const double e = excess(q); e < best_e) best = q, best_e = e;
        }
      }
    }
    if (best.empty()) break;
    p = best;
  }
  // Slack: a layer whose tiles take nearly the time per sample couples with its neighbours (a
  // tile waits for its root's gradient while the root waits for the partial sums), and the
  // pipeline then runs slower than its slowest stage (the demo's loss layer on the whole wafer:
  // 356 cycles a sample against 320). Split such layers' tiles below kSlack of the bound while
  // the PEs allow and the estimate does not rise.
  for (int iter = 0; iter < 100000; ++iter) {
    int dummy = 0;
    const double bound = objective(p, &dummy);
    auto tiles_time = [&](const std::vector<int>& q, int l) {
      long bytes = 0;
      const KernelEstimate e = s.estimate(l, q[static_cast<size_t>(l)], q[static_cast<size_t>(l) + 1], &bytes);
      return e.fwd + e.bwd;
    };
    int l = -1;
    for (int k = 0; k < L; ++k) {
      if (tiles_time(p, k) > kSlack * bound && (l < 0 || tiles_time(p, k) > tiles_time(p, l))) l = k;
    }
    if (l < 0) break;
    std::vector<int> best;
    double best_t = tiles_time(p, l);
    for (int k : {l, l + 1}) {
      if (k == 0 || k >= L) continue;  // layer 0's rows are the channels' (the search's); one loss root
      const int lim = units_of(g, k);
      // The fewest more slices that shorten the tiles (a slice count that leaves the longest
      // slice as it was changes nothing).
      for (int v = p[static_cast<size_t>(k)] + 1; v <= lim; ++v) {
        std::vector<int> q = p;
        q[static_cast<size_t>(k)] = v;
        tie(q);
        if (!fits(q)) break;
        const double tq = tiles_time(q, l);
        if (tq >= tiles_time(p, l)) continue;
        if (objective(q, &dummy) <= bound && tq < best_t) {
          best = q;
          best_t = tq;
        }
        break;
      }
    }
    if (best.empty()) break;
    p = best;
  }
  {
    int l = 0;
    if (worst(p, &l) >= kInfeasible) {
      long bytes = 0;
      s.estimate(l, p[static_cast<size_t>(l)], p[static_cast<size_t>(l) + 1], &bytes);
      // A LayerNorm keeps its layer's outputs on one root: that layer's tiles, and the next
      // layer's inputs, stay in one slice, which no budget changes.
      const bool ln_bound = g.layers[static_cast<size_t>(l)].ln.on || (l > 0 && g.layers[static_cast<size_t>(l) - 1].ln.on);
      if (g.layers[static_cast<size_t>(l)].conv.on) {
        const DenseKernel& d = g.layers[static_cast<size_t>(l)];
        throw CompileError("the convolution '" + d.name + "' does not fit: a convolution's PEs hold whole planes (a tile keeps " +
                           std::to_string(s.ring_depth) + " samples' input planes of " + std::to_string(d.conv.h) + " x " +
                           std::to_string(d.conv.w) + " in its ring, its output planes of " + std::to_string(d.conv.ho) + " x " +
                           std::to_string(d.conv.wo) + " and their gradient), and with its channels spread as far as the budget allows "
                           "its PEs still need " + std::to_string(bytes) + " bytes of SRAM (the core has " + std::to_string(sram) +
                           "); use more SRAM per PE (core.sram_kb), a shallower ring (compile.ring_depth), or weight-streaming mode (--mode weight-streaming)");
      }
      throw CompileError("layer '" + g.layers[static_cast<size_t>(l)].name + "' does not fit: its tiles need " +
                         std::to_string(bytes) + " bytes of SRAM per PE (the core has " + std::to_string(sram) + ") " +
                         (ln_bound ? std::string("in the one slice the LayerNorm '") +
                                         g.layers[static_cast<size_t>(l > 0 && !g.layers[static_cast<size_t>(l)].ln.on ? l - 1 : l)].ln.node +
                                         "' leaves it (its outputs stay on one root; normalising over several roots is not built "
                                         "yet); use more SRAM per PE (core.sram_kb) or a narrower layer"
                                   : "with the PEs the fabric and compile.max_pes allow; use a larger fabric or budget, or "
                                     "weight-streaming mode (--mode weight-streaming)"));
    }
  }

  Plan plan;
  plan.batch = opt.batch;
  plan.ring_depth = s.ring_depth;
  plan.sram_align = conv_sram_align(hw.core);
  plan.in_flight = opt.in_flight;
  int w = 0, h = 0;
  extent(p, &w, &h);
  int y = top_row(p), x = 1;
  for (int l = 0; l < L; ++l) {
    LayerPlan lp;
    const DenseKernel& d = g.layers[static_cast<size_t>(l)];
    lp.index = l;
    lp.a_type = l % 2 == 0;
    lp.in = d.in;
    lp.out = d.out;
    lp.p_in = p[static_cast<size_t>(l)];
    lp.p_out = p[static_cast<size_t>(l) + 1];
    lp.in_off = split(d.in, lp.p_in, unit_of(g, l));
    lp.out_off = split(d.out, lp.p_out, unit_of(g, l + 1));
    lp.conv = d.conv;
    lp.pool = d.pool;
    lp.ln = d.ln.on;
    lp.x0 = x;
    lp.y0 = y;
    lp.dx = l > 0;
    lp.residual = d.residual;
    lp.residual_pre = d.residual_pre;
    lp.est = s.estimate(l, lp.p_in, lp.p_out, &lp.tile_bytes);
    if (lp.a_type) y += lp.p_in + 1;
    else x += lp.p_in + 1;
    plan.pes += lp.pes();
    plan.layers.push_back(std::move(lp));
  }
  plan.used_width = w;
  plan.used_height = 0;
  for (const auto& l : plan.layers) plan.used_height = std::max(plan.used_height, l.root_xy(l.p_out - 1).second + 1);
  for (const auto& l : plan.layers) plan.used_height = std::max(plan.used_height, l.tile_xy(l.p_in - 1, l.p_out - 1).second + 1);

  const LayerPlan& l0 = plan.layers.front();
  std::vector<double> load(static_cast<size_t>(nch), 0.0);
  for (int a = 0; a < l0.p_in; ++a) {
    const int c = nearest(l0.tile_xy(a, 0).second);
    plan.row_channel.push_back(c);
    load[static_cast<size_t>(c)] += l0.in_len(a);
  }
  plan.loss_channel = nearest(plan.layers.back().root_xy(0).second);
  load[static_cast<size_t>(plan.loss_channel)] += 1;  // the label
  plan.channel_rate = channel_rate;
  plan.transmission = transmission_of(p);  // the busiest channel (load / rate) or bus link
  plan.ring_trip = ring_trip_of(p);
  if (auto_ring) {
    // Enough ring to keep a round trip's samples in flight at the pipeline's rate, as far as
    // every tile's SRAM allows (at least kMinRing, which the search made fit).
    int slowest = 0;
    const double rate = std::max(transmission_of(p), worst(p, &slowest));
    // Twice the estimated trip: the estimate is rough (the whole-fabric demo's measured trip is
    // about 26 % longer), and a deeper ring only costs a few bytes where tiles are small.
    int depth = std::clamp(static_cast<int>(std::ceil(2 * plan.ring_trip / rate)), kMinRing, 64);
    auto fits_ring = [&](int d) {
      for (const LayerPlan& l : plan.layers) {
        if (l.conv.on) {
          const int ci = (l.conv.c + l.p_in - 1) / l.p_in, cq = (l.conv.co + l.p_out - 1) / l.p_out;
          if (conv_tile_bytes(l.conv, ci, cq, d, l.dx, grad, conv_sram_align(hw.core)) > sram || conv_root_bytes(l.conv, l.pool, cq, d, grad, conv_root_act_planes(g.layers[static_cast<size_t>(l.index)])) > sram) return false;
          continue;
        }
        const int ni = max_slice(g, l.index, l.p_in), no = max_slice(g, l.index + 1, l.p_out);
        if (tile_sram_bytes(ni, no, d, l.dx, grad) > sram) return false;
        // A root keeps d outputs too (and the loss root's lookahead stash at most d gradients),
        // beside its nine vectors of the slice (ten with a gradient buffer; codegen.cc).
        if (4L * no * ((grad ? 10 : 9) + 2L * d) + kCodeBytes > sram) return false;
      }
      return true;
    };
    while (depth > kMinRing && !fits_ring(depth)) --depth;
    plan.ring_depth = depth;
    for (LayerPlan& l : plan.layers) {
      const int ni = max_slice(g, l.index, l.p_in), no = max_slice(g, l.index + 1, l.p_out);
      if (l.conv.on) {
        const int ci = (l.conv.c + l.p_in - 1) / l.p_in, cq = (l.conv.co + l.p_out - 1) / l.p_out;
        l.tile_bytes = std::max(conv_tile_bytes(l.conv, ci, cq, depth, l.dx, grad, conv_sram_align(hw.core)), conv_root_bytes(l.conv, l.pool, cq, depth, grad, conv_root_act_planes(g.layers[static_cast<size_t>(l.index)])));
      } else {
        l.tile_bytes = tile_sram_bytes(ni, no, depth, l.dx, grad);
      }
    }
  }
  // Layer 0's tiles' backward bursts (every gradient of a sample, one vaxpy of the input slice
  // each) against what their input queue and the router's buffer hold of the inputs they would
  // have taken meanwhile (Plan::burst; with replicas the data tasks' queue is the third).
  if (!plan.layers.front().conv.on) {  // a convolution's tiles take their input slices asynchronously
    const LayerPlan& l = plan.layers.front();
    const double ni = max_slice(g, l.index, l.p_in), no = max_slice(g, l.index + 1, l.p_out);
    const double fmac = hw.core.fmac_fp32;
    const double burst_inputs = no * (ni / fmac + kBwdTask) / (no / fmac + kFwdTask);
    const std::vector<int> depths = hw.core.inq();
    const double held = depths[static_cast<size_t>(grad ? std::min<size_t>(2, depths.size() - 1) : 0)] + hw.router.buffer_depth;
    plan.burst = std::clamp((burst_inputs - held) / held, 0.0, 1.0);
  }
  // One minibatch's fill and drain: a sample's forward and backward through every layer.
  plan.latency = plan.transmission;
  for (const auto& l : plan.layers) {
    plan.latency += l.est.fwd + l.est.bwd + l.est.root + l.est.update_per_batch + 2.0 * (l.p_in + l.p_out);
  }
  if (plan.in_flight > 1) {
    const int cover = static_cast<int>(std::ceil(plan.latency / plan.cycles_per_sample()));
    plan.lookahead0 = std::max(0, std::min({cover, plan.ring_depth, plan.batch - 1}));
  }
  return plan;
}

// The rows a replica's band starts at and how many West channels lie north of it: bands start
// half a spacing above a channel, so that every band holds its channels at the rows a fabric of
// the band's height would (hw/config.h channel_row), and copies shifted by whole bands line up.
struct Bands {
  int y0 = 0, first_channel = 0, rows = 0;  // rows: what the bands may cover in all
};

Bands bands_of(const HwConfig& hw) {
  const int H = hw.fabric.height, s = hw.io.spacing, nch = hw.io.channels(H);
  Bands b;
  const int off = hw.io.channel_row(H, 0), half = (s - 1) / 2;
  while (b.first_channel < nch && off + b.first_channel * s - half < 0) ++b.first_channel;
  b.y0 = off + b.first_channel * s - half;
  b.rows = std::min(H - b.y0, (nch - b.first_channel) * s);
  return b;
}

// Plan `c` (one copy placed on a band-high fabric) as R copies stacked from bands.y0, and the
// cycles a minibatch's gradient sum takes (codegen.cc, "The replicas' gradient sum"): per
// column, each half's stream of the column's K elements passes its copies' PEs one by one (a
// few cycles each: the ramps, a hop, an op's start), the middle copy takes both halves' streams
// and sends the sums out both ways one after the other (K elements each), and the multicasts
// cross the halves' rows.
void replicate(Plan* c, const HwConfig& hw, const Bands& bands, int R, int band) {
  for (LayerPlan& l : c->layers) l.y0 += bands.y0;
  for (int& ch : c->row_channel) ch += bands.first_channel;
  c->loss_channel += bands.first_channel;
  c->replicas = R;
  c->band = band;
  c->band_channels = band / hw.io.spacing;
  c->used_height = bands.y0 + (R - 1) * band + c->used_height;
  c->pes *= R;
  c->lookahead0 = 0;
  const std::map<std::pair<int, int>, long> seg = weight_elements(*c);
  const double per_pe = kRelayFixed + 2.0 * hw.router.ramp_latency + hw.router.hop_latency + hw.core.decode_latency;
  const int m = R / 2, half = std::max(m, R - 1 - m), sides = (m > 0) + (R - 1 > m);
  // A column's sum starts once its PEs' layers have taken the minibatch's last gradient; the
  // layers before the column's first one are then still in their backward passes of the last
  // sample (one tile pass each), which the sum overlaps: only what it outlasts them by counts.
  // (A dense layer's pass is a few hundred cycles; a CNN's first convolution's, 40,000, hides the
  // sum of the dense layers' columns.)
  std::map<std::pair<int, int>, int> layer_of;
  for (const LayerPlan& l : c->layers) {
    for (int a = 0; a < l.p_in; ++a) {
      for (int b = 0; b < l.p_out; ++b) layer_of[l.tile_xy(a, b)] = l.index;
    }
    for (int b = 0; b < l.p_out; ++b) layer_of[l.root_xy(b)] = l.index;
  }
  double t = 0;
  for (const auto& [x, rows] : weight_columns(*c)) {
    double k = 0;
    int first = static_cast<int>(c->layers.size());
    for (int y : rows) {
      k += static_cast<double>(seg.at({x, y}));
      first = std::min(first, layer_of.at({x, y}));
    }
    double behind = 0;
    for (int j = 0; j < first; ++j) behind += c->layers[static_cast<size_t>(j)].est.bwd;
    const double pes = static_cast<double>(rows.size());
    t = std::max(t, 2 * sides * k + (half + 1) * pes * per_pe + 2.0 * half * band * hw.router.hop_latency - behind);
  }
  c->reduce = std::max(0.0, t);
}

}  // namespace

// place_copy, and with compile.ring_depth 0 (auto), where the least auto ring (kMinRing samples)
// does not fit a convolution's PEs (whole planes of 32 x 32 and more), the deepest shallower
// ring that does (3, 2, then 1): a mapping that overlaps less beats none. Every error is the
// auto ring's.
Plan place_copy_ring(const KernelGraph& g, const HwConfig& hw, const PlaceOptions& opt, long long budget, bool grad) {
  try {
    return place_copy(g, hw, opt, budget, grad);
  } catch (const CompileError&) {
    if (opt.ring_depth != 0 || g.first_conv() < 0) throw;
    for (int d = kMinRing - 1; d >= 1; --d) {
      PlaceOptions o = opt;
      o.ring_depth = d;
      try {
        return place_copy(g, hw, o, budget, grad);
      } catch (const CompileError&) {
      }
    }
    throw;
  }
}

Plan place_layers(const KernelGraph& g, const HwConfig& hw, const PlaceOptions& opt) {
  const int W = hw.fabric.width, H = hw.fabric.height;
  if (g.layers.empty()) throw CompileError("the model has no layers to place");
  // Two minibatches in flight are not built for a convolution's PEs yet.
  if (const int l = g.first_conv(); l >= 0 && opt.in_flight > 1) {
    throw CompileError("the convolution '" + g.layers[static_cast<size_t>(l)].name +
                       "' with train.in_flight 2 is not supported in layer-pipelined mode yet; use train.in_flight 1, or "
                       "--mode weight-streaming");
  }
  // Branches and gated joins: weight streaming's rows take them; layer-pipelined regions route a
  // chain (and a residual sum) only, for now.
  if (const int l = g.first_branch(); l >= 0) {
    const DenseKernel& d = g.layers[static_cast<size_t>(l)];
    throw CompileError((d.input >= 0 ? "the branch '" + d.name + "' (a layer reading an earlier value than the last layer's output)"
                                     : "the join '" + d.residual_node + "' (a " + (d.join_sub ? "Sub" : "Mul") + " of the output of " + d.name + ")") +
                       " is not supported in layer-pipelined mode yet; use --mode weight-streaming");
  }
  // Residual connections (DenseKernel::residual): the source's roots send their values to the
  // target's roots, which send the sum's gradient back (codegen.cc); both sides' slices must
  // agree, so the search keeps their boundaries' partitions equal.
  for (const DenseKernel& d : g.layers) {
    if (d.residual < 0) continue;
    const std::string what = "the residual connection '" + d.residual_node + "' (into the output of " + d.name + ")";
    if (d.residual == 0) {
      throw CompileError(what + " adds the model input, which layer-pipelined mode does not keep on the wafer; "
                         "use --mode weight-streaming");
    }
    if (opt.in_flight > 1) {
      throw CompileError(what + " with train.in_flight 2 is not supported in layer-pipelined mode yet; use train.in_flight 1 "
                         "or --mode weight-streaming");
    }
  }
  // A LayerNorm: one root holds the layer's outputs (it normalises each sample over all of
  // them); its parameters join the bias's update (and with replicas its segment of the column's
  // gradient sum), which two minibatches in flight do not cover yet.
  if (const int l = g.first_layernorm(); l >= 0 && opt.in_flight > 1) {
    throw CompileError("the LayerNorm '" + g.layers[static_cast<size_t>(l)].ln.node + "' (on the output of " +
                       g.layers[static_cast<size_t>(l)].name + ") with train.in_flight 2 is not supported yet; use train.in_flight 1");
  }
  if (opt.batch < 1) throw CompileError("train.batch must be at least 1");
  if (opt.ring_depth < 0 || opt.ring_depth > 64) throw CompileError("compile.ring_depth must be 0 (auto) or in 1..64");
  if (opt.in_flight < 1 || opt.in_flight > 2) throw CompileError("train.in_flight must be 1 or 2");
  if (opt.max_pes < 0) throw CompileError("compile.max_pes must be 0 (the whole fabric) or positive");
  if (opt.replicas < 0) throw CompileError("compile.replicas must be 0 (auto) or positive");
  if (opt.replicas > 1 && opt.in_flight > 1) {
    throw CompileError("compile.replicas " + std::to_string(opt.replicas) +
                       " with train.in_flight 2 is not supported: use one of them (a column's gradient sum waits "
                       "for layer 0's roots, which wait for the next layer's tiles to take their lookahead samples, "
                       "which those take only after the sum)");
  }
  if (opt.replicas > opt.batch) {
    throw CompileError("compile.replicas " + std::to_string(opt.replicas) + " exceeds train.batch " + std::to_string(opt.batch) +
                       ": every copy needs at least one sample of each minibatch");
  }
  const long long budget = opt.max_pes > 0 ? opt.max_pes : static_cast<long long>(W) * H;
  // One copy on the whole fabric: today's plan, and every error of a model that does not fit.
  Plan best;
  if (opt.replicas <= 1) best = place_copy_ring(g, hw, opt, budget, false);
  if (opt.replicas == 1 || (opt.replicas == 0 && opt.in_flight > 1)) return best;
  const Bands bands = bands_of(hw);
  const int s = hw.io.spacing;
  auto copy_at = [&](int R, int band) {
    HwConfig h = hw;
    h.fabric.height = band;
    h.io.channels_per_edge = band / s;
    Plan c = place_copy_ring(g, h, opt, budget / R, true);
    replicate(&c, hw, bands, R, band);
    return c;
  };
  if (opt.replicas > 1) {
    const int R = opt.replicas, band = bands.rows / R / s * s;
    const std::string room = "compile.replicas " + std::to_string(R) + " does not fit: each copy gets a band of " +
                             std::to_string(band) + " rows (" + std::to_string(band / s) + " West channels) and " +
                             std::to_string(budget / R) + " PEs";
    if (band < 3) throw CompileError(room + "; use fewer replicas (0: as many as raise samples/s), a taller fabric or a larger budget");
    try {
      return copy_at(R, band);
    } catch (const CompileError& e) {
      throw CompileError(room + ", and there " + e.what() + "; use fewer replicas (0: as many as raise samples/s), a larger fabric or budget");
    }
  }
  // compile.replicas 0: every count whose copies fit, the most estimated samples/s (each count's
  // copy only gains from more PEs or SRAM, so neither ever lowers the choice's estimate).
  auto rate = [](const Plan& p) { return p.batch / p.cycles_per_batch(); };
  for (int R = 2; R <= opt.batch; ++R) {
    const int band = bands.rows / R / s * s;
    if (band < std::max(3, s)) break;
    try {
      Plan c = copy_at(R, band);
      if (rate(c) > rate(best)) best = std::move(c);
    } catch (const CompileError&) {
      break;  // smaller bands and budgets from here on
    }
  }
  return best;
}

}  // namespace wafersim::compiler
