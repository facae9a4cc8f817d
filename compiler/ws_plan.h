// Weight-streaming mapping: every layer in turn on the same grid of PEs (docs/weight-streaming.md).
//
//   West channels                                         East channels
//   row 0 (channel row)  PE PE PE ... PE  --dW chain-->   dW of feature slice K_0
//   row 1 (channel row)  PE PE PE ... PE  --dW chain-->   dW of feature slice K_1
//     ...                 |  |  |      |   partial sums go south, results come back north
//   root row             PE PE PE ... PE  --db chain-->   loss, bias gradients
//                        column c holds the samples c*m .. c*m+m-1 of this system's shard
//
// Feature row a holds slice K_a of every layer's input activations for its column's samples.
// A layer's weights w[o][k], k in K_a, stream into row a from its West channel and are
// multicast along the row; each PE adds w * x[k] into its partial sum for output o (a vaxpy over
// its m samples). Partial sums reduce south down each column into the root, which adds the bias,
// applies the activation and sends y[o] back north; each row keeps its own slice as the next
// layer's input. Backward, the weights stream again in reverse layer order: every PE holds the
// whole dy (gathered through the root), adds w * dy[o] into dx[k], and sends its samples' part of
// dW[o][k] east along the row, where the partial sums of the columns add up and leave through the
// East channel to SwarmX and MemoryX.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compiler/kernel_graph.h"
#include "hw/config.h"

namespace wafersim::compiler {

// The host side's pace as the estimate sees it: weight wavelets per cycle into one system
// (MemoryX, SwarmX and the bridge, the slowest), and cycles from a request to the first word.
struct WsHostPace {
  double weights_per_cycle = 1e9;
  double latency_cycles = 0;
  double read_per_cycle = 1e9;  // MemoryX's READ rate in words per cycle (each pass reads its layer)
  double reduce_cycles = 0;  // the gradients' reduction through SwarmX into MemoryX after the last result
  double sample_cycles = 0;  // cycles per sample of a system's input stream (its workers side by side, the bridge)
  double grads_per_cycle = 1e9;  // gradient words per cycle out of a system (bridge, SwarmX link)
  bool prefetch = true;
};

struct WsOptions {
  int batch = 16;    // global minibatch, over all systems
  int systems = 1;   // data-parallel CS-2 systems; each takes batch / systems samples
  int columns = 0;   // sample columns per system (0: chosen, see place_ws)
  int rows = 0;      // feature rows (0: chosen, at most every West channel row but the root's and the
                     // narrowest layer's input)
  int max_pes = 0;   // PEs per system the mapping may take, (rows + 1) x columns (compile.max_pes; 0: no limit)
  // ws.layout: "rows" puts each feature row on a West channel row (at most one per channel);
  // "grid" puts bands of adjacent feature rows round each channel row, fed through relay PEs in
  // the two West edge columns, so the rows can cover the wafer (docs/weight-streaming.md).
  bool grid = false;
  bool auto_layout = false;  // ws.layout auto: the better estimate of the two layouts (ties: fewer PEs)
  // Grid only: the rows packed from the top, a channel's West and East bands before the next
  // channel's (shorter columns: a shorter turn per pass), rather than spread over every
  // channel's West band first (more channels: more I/O). 0: both tried (place_ws), 1: packed,
  // 2: spread.
  int pack = 0;
  int dw_block = 0;  // ws.dw_block: dW rows a row sends at once (0: chosen by the estimate; WsPlan::dw_block)
  WsHostPace pace;   // the host side, for the estimate that chooses rows and columns
};

// A feature-row PE's per-sample loops (ws_codegen.cc) are unrolled for this many samples a
// column or fewer; the estimate counts the instructions either way.
constexpr int kWsUnrolledSamples = 4;

struct WsLayerEst {
  long long weights = 0;        // parameters streamed per pass (weights; biases go to the roots)
  double stream_cycles = 0;     // one pass's weights through the busiest row channel
  // The same when a row PE takes its weights only in the cycles its main thread's ops leave the
  // SRAM write port free (the prefetch's writes wait for them: docs/core.md), per pass.
  double fwd_stream_cycles = 0, bwd_stream_cycles = 0;
  double fwd_cycles = 0;        // forward compute of the busiest PE
  double bwd_cycles = 0;        // backward compute of the busiest PE
  double egress_cycles = 0;     // backward: the dW rows out through the busiest row channel
  double turn_cycles = 0;       // per pass: the last values down the columns and back up, which the next pass waits for
  double bwd_turn_cycles = 0;   // the same after a backward pass (the gathered dy through the roots)
  double loss_cycles = 0;       // the last layer: the roots' loss and the logit gradients north, before its backward pass
};

struct WsPlan {
  int layers = 0;
  int fabric_width = 0;
  int batch = 16, systems = 1, shard = 16;  // shard = batch / systems
  int rows = 1, cols = 1, m = 1;            // m = the most samples a column holds, ceil(shard / cols)
  int cacc_pad = 0;  // the convolutions' plane of sums: elements past a multiple of the banks (ws_plan.cc)
  int rows_room = 1;                        // feature rows the fabric and the model allow (rows <= it)
  int pe_budget = 0;                        // WsOptions::max_pes (0: no limit)
  bool budget_bound = false;                // pe_budget chose fewer feature rows than rows_room
  std::vector<int> row_y;                   // fabric row of each feature row (rows: a channel row; grid: in a band)
  std::vector<int> row_channel;             // the West channel that feeds it (grid: its band's)
  // The grid layout (WsOptions::grid): bands of adjacent feature rows, each fed by one channel:
  // a West band holds its channel row and rows above it, an East band rows below its channel row
  // (the same row's East channel). A band's relays sit in the edge columns on its side: the
  // outer one (x 0 or W-1) takes the band's channel stream and passes each row its part, the
  // inner one (x 1 or W-2) gathers the rows' dW into the channel. The sample columns start at
  // x0 = 2. Band g: edge band_east[g] (0 West, 1 East), channel band_channel[g] at fabric row
  // band_y[g], feature rows band_first[g] .. band_first[g + 1] - 1 (ascending y; size bands + 1).
  bool grid = false;
  // Backward, a row PE sends its dW rows in blocks of this many outputs (grid, many columns):
  // one send per block down the row's reduction chain, whose wave across the columns then no
  // longer holds up every output (ws_codegen.cc). 1: output by output.
  int dw_block = 1;
  int x0 = 0;
  std::vector<int> band_channel, band_y, band_first, band_east;
  int bands() const { return static_cast<int>(band_channel.size()); }
  int band_of(int a) const {
    return static_cast<int>(std::upper_bound(band_first.begin(), band_first.end(), a) - band_first.begin()) - 1;
  }
  // Boundary j's features per output through the channel that feeds row a: its slice, in the
  // grid its band's slices (adjacent rows: one range of features).
  int channel_len(int j, int a) const {
    if (!grid) return len(j, a);
    const auto b = static_cast<size_t>(band_of(a));
    return off[static_cast<size_t>(j)][static_cast<size_t>(band_first[b + 1])] - off[static_cast<size_t>(j)][static_cast<size_t>(band_first[b])];
  }
  // The weights per output through the channel that feeds row a (a convolution's: c kh kw).
  int wchannel_len(int l, int a) const { return grid ? channel_len(in(l), a) : wlen(l, a); }
  // The row of band g nearest its channel (its head: the channel row in a West band, the row
  // below it in an East band).
  int band_head(int g) const {
    return band_east[static_cast<size_t>(g)] ? band_first[static_cast<size_t>(g)] : band_first[static_cast<size_t>(g) + 1] - 1;
  }
  bool east_fed(int a) const { return grid && band_east[static_cast<size_t>(band_of(a))] != 0; }
  // The order a band's dW leaves through its channel, per output: the head's slice, then the
  // other rows' nearest first.
  std::vector<int> egress_order(int g) const;
  int root_y = 0, root_channel = 0;
  // off[j][a]: start of feature row a's slice of boundary j (j = 0: the model input, j = l + 1:
  // layer l's output), size rows + 1; boundary `layers` (the logits) is not partitioned.
  std::vector<std::vector<int>> off;
  std::vector<int> width;                   // features at each boundary, size layers + 1
  std::vector<Activation> act;              // per layer
  std::vector<ActParams> act_par;         // per layer: the activation's parameters
  // Per layer: -1, or the boundary k whose values its activated output adds (DenseKernel::
  // residual): boundary l + 1 = act(layer l) + boundary k. Same width, so the same slices.
  std::vector<int> residual;
  // Per layer: the boundary (value) it reads, l in a chain (DenseKernel::input: a branch reads an
  // earlier one, the model input or an earlier layer's output), and whether its join with
  // residual[l] is a product (DenseKernel::join_mul: boundary l + 1 = act(layer l) * boundary k).
  // Boundary j is always the model input (j = 0) or layer j - 1's output; a layer's passes and
  // weights follow the partition of the boundary it reads (woff, wlen, by_feature).
  std::vector<int> input, join_mul;
  // Per layer: a join that is a difference (DenseKernel::join_sub): 1, act(layer l) - boundary k;
  // 2, boundary k - act(layer l); 0, none.
  std::vector<int> join_sub;
  int sub_join(int l) const { return l >= 0 && l < static_cast<int>(join_sub.size()) ? join_sub[static_cast<size_t>(l)] : 0; }
  int in(int l) const { return l >= 0 && l < static_cast<int>(input.size()) ? input[static_cast<size_t>(l)] : l; }
  bool mul_join(int l) const { return l >= 0 && l < static_cast<int>(join_mul.size()) && join_mul[static_cast<size_t>(l)] != 0; }
  // Boundary k's gradient from other readers than layer k (branches reading it, the join it
  // feeds), which the rows accumulate in G{k} until its turn (k > 0: the model input needs none).
  bool has_g(int k) const {
    if (k <= 0) return false;
    for (int l = 0; l < static_cast<int>(residual.size()); ++l) {
      if ((in(l) == k && l != k) || (residual[static_cast<size_t>(l)] == k && !root_sum(l + 1))) return true;
    }
    return false;
  }
  // Per layer: its residual sum is taken before the activation (DenseKernel::residual_pre):
  // boundary l + 1 = act(layer l + boundary k); the rows then apply the activation (rows_act).
  std::vector<int> residual_pre;
  bool res_pre(int l) const { return l >= 0 && l < static_cast<int>(residual_pre.size()) && residual_pre[static_cast<size_t>(l)] != 0; }
  // The boundary whose values boundary t adds (-1: none), and the boundary t that adds
  // boundary k's (-1: none).
  int residual_source(int t) const { return t >= 1 && t - 1 < static_cast<int>(residual.size()) ? residual[static_cast<size_t>(t) - 1] : -1; }
  int residual_target(int k) const {
    for (size_t l = 0; l < residual.size(); ++l) {
      if (residual[l] == k) return static_cast<int>(l) + 1;
    }
    return -1;
  }
  // A residual connection around convolutions (both ends convolutions' outputs) runs at the
  // roots, which hold every output plane of their samples: boundary t's sum (root_sum) and
  // boundary k's planes kept for it and its gradient added (root_kept).
  bool root_sum(int t) const { return residual_source(t) >= 0 && t >= 1 && is_conv(t - 1); }
  bool root_kept(int k) const { return k >= 1 && residual_target(k) >= 0 && is_conv(k - 1); }
  // Convolutions (docs/weight-streaming.md#convolutions), per layer: conv[l].on for a
  // convolution, with its pooling. A model with one runs on one feature row: each column's
  // PE holds its samples' planes whole. outs[l]: the outputs of a pass (a dense layer's width,
  // a convolution's channels); wcols[l]: a weight row's length (the input width; c kh kw).
  std::vector<ConvParams> conv;
  std::vector<PoolParams> pool;
  std::vector<int> outs, wcols;
  // Per layer: a LayerNorm after the bias, before the activation (at the roots, which hold every
  // output of their samples: docs/weight-streaming.md#layernorm), and its epsilon.
  // ln_post: after the activation (LayerNormParams::post): the roots apply the activation,
  // keeping y (or z where its derivative is taken there: LY), then normalise; backward the
  // normalisation's gradient, then the derivative, at the roots (the rows take none for it).
  std::vector<int> ln_on, ln_post;
  std::vector<float> ln_eps;
  bool has_ln(int l) const { return l >= 0 && l < static_cast<int>(ln_on.size()) && ln_on[static_cast<size_t>(l)] != 0; }
  bool has_ln_post(int l) const { return has_ln(l) && l < static_cast<int>(ln_post.size()) && ln_post[static_cast<size_t>(l)] != 0; }
  // The activation whose derivative the feature rows take at boundary l + 1 (none where the
  // roots take it: a LayerNorm after it).
  Activation rows_bwd_act(int l) const { return has_ln_post(l) ? Activation::kNone : act[static_cast<size_t>(l)]; }
  // The values per output a layer's roots take with the weights (the bias; with a LayerNorm also
  // gamma and beta: MemoryX holds them as one tensor, b then gamma then beta) and give back
  // (db; d gamma and d beta).
  int root_params(int l) const { return outs[static_cast<size_t>(l)] * (has_ln(l) ? 3 : 1); }
  bool any_ln() const {
    for (int v : ln_on) {
      if (v) return true;
    }
    return false;
  }
  bool is_conv(int l) const { return l >= 0 && l < static_cast<int>(conv.size()) && conv[static_cast<size_t>(l)].on; }
  // A convolution's dz (but the last layer's) goes to the rows output by output once the roots
  // have all of it, and each row reads one output's at a time into two buffers: a row holds two
  // outputs' planes of it, not the layer's (ws_codegen.cc).
  bool dz_streamed(int l) const { return is_conv(l) && l + 1 < layers; }
  // Whether the feature rows apply layer l's activation to the z its roots return (its
  // derivative is taken at z, which they keep: act_needs_pre). A convolution's roots apply
  // theirs before the pooling, keeping z themselves.
  // So do they where the residual sum comes before the activation (res_pre): they hold both.
  // Not where a LayerNorm follows the activation: the roots apply it.
  bool rows_act(int l) const { return (act_needs_pre(act[static_cast<size_t>(l)]) || res_pre(l)) && !is_conv(l) && !has_ln_post(l); }
  bool any_conv() const {
    for (const ConvParams& c : conv) {
      if (c.on) return true;
    }
    return false;
  }
  // Values per output and sample: down the columns to the root (a convolution's plane), and
  // back up (its pooled plane).
  int oplane(int l) const { return is_conv(l) ? conv[static_cast<size_t>(l)].ho * conv[static_cast<size_t>(l)].wo : 1; }
  int qplane(int l) const {
    if (!is_conv(l)) return 1;
    const PoolParams& q = pool[static_cast<size_t>(l)];
    return q.kind == PoolParams::kNone ? oplane(l) : q.hq * q.wq;
  }
  // The features of one unit of boundary j, which the rows' slices hold whole: a convolution's
  // input or output plane (its channels split over the rows), else 1.
  int unit(int j) const {
    if (j < layers && is_conv(j)) return conv[static_cast<size_t>(j)].h * conv[static_cast<size_t>(j)].w;
    if (j >= 1 && is_conv(j - 1)) return qplane(j - 1);
    return 1;
  }
  // A convolution's input channels in row a's slice (from channel ch0).
  int chans(int l, int a) const { return len(l, a) / unit(l); }
  // What the roots return per output and sample of layer l: a dense layer's value; a
  // convolution's pooled plane, then the plane its backward pass needs (y, or z where the
  // derivative is taken at z), which the row that owns the channel keeps (YR) and sends back down
  // with the pooled gradient at the start of the convolution's backward pass: the roots hold one
  // output's planes, not the layer's (docs/weight-streaming.md#convolutions).
  int ret_unit(int l) const { return is_conv(l) ? qplane(l) + oplane(l) : 1; }
  int ch0(int l, int a) const { return off[static_cast<size_t>(l)][static_cast<size_t>(a)] / unit(l); }
  // Row a's part of a weight row of layer l: from woff, wlen long (a convolution's: the taps of
  // the row's channels).
  int woff(int l, int a) const {
    return is_conv(l) ? ch0(l, a) * conv[static_cast<size_t>(l)].kh * conv[static_cast<size_t>(l)].kw : off[static_cast<size_t>(in(l))][static_cast<size_t>(a)];
  }
  int wlen(int l, int a) const {
    return is_conv(l) ? chans(l, a) * conv[static_cast<size_t>(l)].kh * conv[static_cast<size_t>(l)].kw : len(in(l), a);
  }
  // Row a's slice of convolution l: its channels (ConvParams::c) and their taps.
  ConvParams conv_slice(int l, int a) const {
    ConvParams c = conv[static_cast<size_t>(l)];
    c.c = chans(l, a);
    return c;
  }
  long row_bytes = 0, root_bytes = 0;       // SRAM need of a feature-row PE and of a root PE
  // The roots keep every layer's db and send each layer's west in one asynchronous send (where
  // SRAM holds them), else they send each output's db as it is summed (ws_codegen.cc).
  bool root_db_buffer = false;
  double channel_rate = 1;                  // wavelets per cycle per channel
  int sram_banks = 8;                       // core.sram_banks: the firmware lays out buffers read side by side apart
  std::vector<WsLayerEst> est;

  // Whether row a runs layer j's passes feature by feature (a vector op over the m samples per
  // input feature) rather than sample by sample (one over its slice per sample): when its slice
  // is shorter than the samples, as in narrow layers split over many rows (ws_codegen.cc).
  bool by_feature(int l, int a) const { return len(in(l), a) < m; }
  // Column c's samples: col_m(c) of them from col_start(c) (the first shard % cols columns hold
  // one more than the others).
  int col_m(int c) const { return shard / cols + (c < shard % cols ? 1 : 0); }
  int col_start(int c) const { return c * (shard / cols) + std::min(c, shard % cols); }
  int len(int j, int a) const { return off[static_cast<size_t>(j)][static_cast<size_t>(a) + 1] - off[static_cast<size_t>(j)][static_cast<size_t>(a)]; }
  int pes() const { return (rows + 1) * cols + (grid ? 2 * rows : 0); }
  // Passes per minibatch: forward 0..L-1, then backward L-1..0 (pass 2L-1-l is layer l's).
  int passes() const { return 2 * layers; }
  // The passes whose weights stream in: all but the first layer's backward pass, which computes
  // only dW (dW = dy^T x needs no weights; there is no dx of the model's input to compute).
  int streamed_passes() const { return 2 * layers - 1; }
  bool streams(int ps) const { return ps < streamed_passes(); }
};

// One tap (ci, ky, kx) of a convolution, in the firmware's order (input channel, kernel row,
// kernel column), with the output rows [oy0, oy1) and columns [ox0, ox1) whose input element
// lies inside the plane (the padding is skipped, not multiplied).
struct ConvTap {
  int ci = 0, ky = 0, kx = 0, oy0 = 0, oy1 = 0, ox0 = 0, ox1 = 0;
};
std::vector<ConvTap> conv_taps(const ConvParams& c);

// Pooling of one channel's plane (y: ho x wo) into out (hq x wq), as a root does it: max with
// vmax (fmax) over the window's taps in order; average as the taps' sum in order times the
// fp32 reciprocal of the count; a window of the whole plane (GlobalAveragePool) as vsum's sum
// from 0 times that. Backward, dy (ho x wo, set to 0 first) from dout: max passes each
// window's gradient to its first largest element (row by row; every tap adds 0 or it); average
// adds (1 / count) dout to each element (fused); the whole plane's takes dout / count each.
// Padded (codegen.cc emit_pool_fwd/bwd's padded path): a max starts from -inf and an average
// from 0, each tap over the windows that have it (pool_span); an average whose counts differ
// multiplies by each window's pool_inv, and backward adds dout pool_inv (rounded) to each
// element, tap by tap.
void pool_forward(const ConvParams& c, const PoolParams& q, const float* y, float* out);
// Whether pooling q of c's outputs is one window of the whole plane (GlobalAveragePool's).
inline bool whole_plane(const ConvParams& c, const PoolParams& q) {
  return q.kind == PoolParams::kAvg && !q.padded() && q.kh == c.ho && q.kw == c.wo && q.hq == 1 && q.wq == 1;
}
// A MaxPool over the whole plane (torch's AdaptiveMaxPool2d(1)): its taps run in a loop, one
// element each, not unrolled (a 28 x 28 plane's 784 taps would not fit the code's SRAM).
inline bool whole_plane_max(const ConvParams& c, const PoolParams& q) {
  return q.kind == PoolParams::kMax && !q.padded() && q.kh == c.ho && q.kw == c.wo && q.hq == 1 && q.wq == 1;
}
// A padded pooling's window tap (ky, kx): the pooled rows [y0, y1) and columns [x0, x1) whose
// window has that element inside the plane (the others see padding there).
struct PoolSpan {
  int y0 = 0, y1 = 0, x0 = 0, x1 = 0;
};
PoolSpan pool_span(const ConvParams& c, const PoolParams& q, int ky, int kx);
// Whether an average pooling divides every window by the same count (kh kw): unpadded, or its
// pads counted and no window past them (ceil_mode). Otherwise each window's divisor is the
// inputs in it, or its part inside the padded plane: pool_inv's table.
inline bool pool_uniform(const PoolParams& q) { return !q.padded() || (q.count_pad && q.eb == 0 && q.er == 0); }
// fp32(1 / count) of pooled element (py, px)'s window.
float pool_inv(const ConvParams& c, const PoolParams& q, int py, int px);
void pool_backward(const ConvParams& c, const PoolParams& q, const float* y, const float* out, const float* dout, float* dy);

// The one estimate of a minibatch (the compile report shows it; the trainer bounds a run by it):
// per layer, each pass takes the longer of its weight stream (the wafer's channels or the host
// link, the slower, plus a request's latency and MemoryX's READ without prefetch) and its
// compute, plus the turn down the columns and back; per minibatch, the inputs (each row channel
// carries its slice of every sample of the shard before the first weights, and a column starts
// once the stream has passed it), the first READ and request (with prefetch) and the gradients'
// reduction after the last result.
struct WsEstimate {
  struct Layer {
    double host = 0;               // the layer's weights (and biases) over the host link
    double stream_f = 0;           // forward pass: weight stream and its waits
    double stream_b = 0;           // backward pass (0 for the first layer: it streams nothing)
    double fwd = 0, bwd = 0;       // the passes, turns included
  };
  std::vector<Layer> layers;
  double input_cycles = 0;         // the minibatch's inputs through the busiest channel or from the host's workers, before the first pass
  double cycles_per_batch = 0;     // one system, one minibatch
};
WsEstimate ws_estimate(const KernelGraph& g, const WsPlan& p, const WsHostPace& pace);

// Chooses rows, columns and slices: of the feature rows and sample columns not set, the pair
// whose mapping fits SRAM and the PE budget and has the lowest ws_estimate (ties: fewer PEs,
// then more rows). More SRAM or a larger budget only adds candidates, so the estimate never
// gets worse. Throws CompileError: batch not divisible by systems or columns, too few I/O
// channel rows, a layer narrower than the feature rows, a mapping larger than the PE budget,
// or PEs whose activations do not fit their SRAM (by how much).
WsPlan place_ws(const KernelGraph& g, const HwConfig& hw, const WsOptions& o);

// The compile report of weight-streaming mode: the mapping, per layer the weight-stream time
// (channel- or host-bound) beside the compute estimate of each pass, and samples/s.
nlohmann::json ws_compile_report(const KernelGraph& g, const WsPlan& p, const HwConfig& hw, const WsHostPace& pace);
std::string ws_report_text(const nlohmann::json& report);

}  // namespace wafersim::compiler
