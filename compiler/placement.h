// Pass 3: layer-pipelined placement. Each dense kernel gets a rectangle of tiles plus a line of
// root PEs; the rectangles form a staircase down and to the right from the west edge, so that
// every layer's outputs leave its roots straight into the next layer's tiles (docs/compiler.md).
//
//   A-type layer (inputs along rows):      B-type layer (inputs along columns):
//     x slice a enters row a from the west   x slice a enters column a from the north
//     partial sums reduce down column b      partial sums reduce east along row b
//     into root b below the tiles            into root b east of the tiles
//
// Layers alternate A, B, A, ...; layer l's output partition is layer l+1's input partition.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "compiler/kernel_graph.h"
#include "hw/config.h"

namespace wafersim::compiler {

struct PlaceOptions {
  // PEs the model's regions may use (0, the default: the whole fabric, the most samples/s, as a
  // CS-2 maps a model; scripts/run-demo takes 16 to keep the main job fast).
  int max_pes = 0;
  int batch = 16;      // samples per weight update
  // Samples in flight per tile within a minibatch; 0 (the default): enough for a sample's
  // round trip at the pipeline's rate, at least 4, as SRAM allows (Plan::ring_depth says).
  int ring_depth = 0;
  // Minibatches in flight (train.in_flight): 1, each minibatch enters after the last one's
  // update (plain SGD); 2, the next minibatch's first lookahead() samples enter before it
  // (docs/training.md, "Two minibatches in flight").
  int in_flight = 1;
  // Copies of the model trained data-parallel on the wafer (compile.replicas): 0 (the default),
  // as many as raise the estimated samples/s; N, exactly N. Copy r takes samples r, r + N, ...
  // of each minibatch; the copies' gradients are summed on the wafer before the same update.
  int replicas = 0;
};

// Cycle estimates of the cost model (per sample unless named otherwise).
struct KernelEstimate {
  double fwd = 0, bwd = 0, update_per_batch = 0, root = 0;
  // A convolution's PEs take a sample's slice whole before they work on it and send their
  // result before they take the next (codegen.cc conv_tile_source): per sample, the longest of
  // those series (the input in, the work, the output out), 0 for dense layers.
  double stream = 0;
  // A convolution's passes over whole samples (Plan::schedule): its roots' forward and backward
  // shares of `root`, and the words of a tile's input slice and of a root's planes of sums (and
  // of dz), each a wavelet a cycle.
  // And the words of a root's pooled planes out.
  double root_fwd = 0, root_bwd = 0, in_words = 0, out_words = 0, q_words = 0;
  double compute() const;  // the busiest PE's cycles per sample, update spread over the batch
};

struct LayerPlan {
  int index = 0;
  bool a_type = true;
  int in = 0, out = 0;
  int p_in = 1, p_out = 1;
  std::vector<int> in_off, out_off;  // slice starts; size p + 1
  int x0 = 0, y0 = 0;                // tile (0, 0)
  bool dx = false;                   // computes input gradients (every layer but the first)
  // A residual connection (DenseKernel::residual): -1, or the boundary k >= 1 whose values its
  // roots add to their activated outputs; boundary k's partition is this layer's output's.
  int residual = -1;
  bool residual_pre = false;         // the sum before the activation (DenseKernel::residual_pre)
  KernelEstimate est;
  long tile_bytes = 0;               // largest tile's SRAM need
  // A convolution (DenseKernel::conv, pool): its slices hold whole channels, in_off and out_off
  // count features (channel planes of its input, pooled planes of its output).
  ConvParams conv;
  PoolParams pool;
  bool ln = false;                   // a LayerNorm at its (one) root: gamma and beta beside the bias

  int in_len(int a) const { return in_off[static_cast<size_t>(a) + 1] - in_off[static_cast<size_t>(a)]; }
  int out_len(int b) const { return out_off[static_cast<size_t>(b) + 1] - out_off[static_cast<size_t>(b)]; }
  std::pair<int, int> tile_xy(int a, int b) const { return a_type ? std::pair{x0 + b, y0 + a} : std::pair{x0 + a, y0 + b}; }
  std::pair<int, int> root_xy(int b) const { return a_type ? std::pair{x0 + b, y0 + p_in} : std::pair{x0 + p_in, y0 + b}; }
  int pes() const { return p_in * p_out + p_out; }
  // A convolution's planes: its input's (h w), its output's before (ho wo) and after the pooling.
  int in_plane() const { return conv.h * conv.w; }
  int out_plane() const { return conv.ho * conv.wo; }
  int pooled_plane() const { return out / conv.co; }
  // Channels of input slice a and output slice b, and the first of each.
  int in_ch(int a) const { return in_len(a) / in_plane(); }
  int out_ch(int b) const { return out_len(b) / pooled_plane(); }
  int in_ch0(int a) const { return in_off[static_cast<size_t>(a)] / in_plane(); }
  int out_ch0(int b) const { return out_off[static_cast<size_t>(b)] / pooled_plane(); }
  // Tile (a, b)'s element i of its weights (dense: k-major, in slice x out slice; a convolution:
  // output-major, out channels x (in channels kh kw)) in the layer's matrix (out x in; co x c kh
  // kw), and root b's first bias and count. codegen.cc lays tiles out and tlm/trainer.cc reads
  // them back with these.
  size_t weight_index(int a, int b, long i) const;
  // A sample's multiply-adds: forward, the weight gradient and (not in the first layer) dx.
  double macs() const;
  int bias_first(int b) const { return conv.on ? out_ch0(b) : out_off[static_cast<size_t>(b)]; }
  int bias_count(int b) const { return conv.on ? out_ch(b) : out_len(b); }
};

struct Plan {
  std::vector<LayerPlan> layers;
  int batch = 32, ring_depth = 4, in_flight = 1;
  int sram_align = 16;                  // conv_sram_align: convolution tiles' arrays start on it
  int used_width = 0, used_height = 0;  // bounding box, bus column included
  std::vector<int> row_channel;         // layer 0 row a -> West channel index
  int loss_channel = 0;                 // West channel of labels in and losses out
  double channel_rate = 1;              // wavelets per cycle per channel
  double transmission = 0;              // cycles per sample of the busiest input channel or bus link
  // A sample's round trip from a layer-0 tile's forward pass to its backward pass: every layer's
  // time per sample and a few cycles per link of its chains (placement.cc).
  double ring_trip = 0;
  double latency = 0;                   // estimated fill + drain of one minibatch, cycles
  int pes = 0;                          // tiles and roots, every copy's
  // Replicas (PlaceOptions::replicas): `layers`, row_channel and loss_channel describe copy 0;
  // copy r sits r * band rows further south on the channels r * band_channels further on, with
  // the same colors. With more than one, every tile and root keeps its gradients in a buffer
  // beside the momentum, and after a minibatch each column of PEs sums them on the wafer in a
  // fixed copy order (a northward stream) and hands the sums back (a southward one): `reduce`
  // cycles a minibatch (docs/compiler.md, "Replicas").
  int replicas = 1;
  int band = 0, band_channels = 0;
  double reduce = 0;
  // The layer whose roots add boundary k's values (a residual connection), or -1.
  int residual_target(int k) const {
    for (const LayerPlan& l : layers) {
      if (l.residual == k) return l.index;
    }
    return -1;
  }
  int samples_of(int r) const { return (batch - r + replicas - 1) / replicas; }  // copy r's samples of a minibatch
  std::pair<int, int> at(std::pair<int, int> xy, int r) const { return {xy.first, xy.second + r * band}; }
  int channel(int c, int r) const { return c + r * band_channels; }

  // The slowest kernel, the transmission, or a sample's round trip over the ring depth (a tile
  // keeps ring_depth samples' inputs until their backward pass: at most that many in flight).
  double bound_cycles() const;
  // What the pipeline loses to two stages of nearly the same time, as a share of bound_cycles().
  double coupling() const;
  // How far layer 0's tiles' backward bursts outlast their buffered inputs, 0..1 (placement.cc):
  // how much the channel and those tiles couple.
  double burst = 0;
  double cycles_per_sample() const;  // bound_cycles() * (1 + coupling())
  // With two minibatches in flight: the samples of the next minibatch that pass layer `layer`
  // with the weights before this minibatch's update (0 elsewhere). Only layer 0 takes any:
  // enough to fill its wait for the minibatch's last gradient (latency / cycles_per_sample),
  // at most the ring and less than a minibatch (placement.cc).
  int lookahead(int layer = 0) const { return layer == 0 ? lookahead0 : 0; }
  int lookahead0 = 0;
  // A copy's minibatch: with a convolution, schedule() of its samples; else its samples *
  // cycles_per_sample + latency; and the replicas' reduce.
  double cycles_per_batch() const;
  // The cycles of n samples through a copy's layers pass by pass (a convolution's tiles and roots
  // take a sample whole: placement.cc), and the last update.
  double schedule(int n) const;
};

// Copy 0's PEs that hold weights or biases, by column, each column's rows from south to north
// (the order of the gradient sum's northward stream).
std::map<int, std::vector<int>> weight_columns(const Plan& plan);
// Copy 0's weight PEs and the parameters each holds (a tile's weights, a root's biases): its
// segment of its column's gradient sum.
std::map<std::pair<int, int>, long> weight_elements(const Plan& plan);

// Chooses partitions and positions. Throws CompileError: the model's weights do not fit the
// fabric's SRAM (by how much; suggests weight streaming), the fabric or the PE budget is too
// small for the staircase, the fabric has no West I/O channel, compile.replicas copies do not
// fit (naming the band and the PEs each copy gets) or exceed the batch.
Plan place_layers(const KernelGraph& g, const HwConfig& hw, const PlaceOptions& opt);

// The SRAM bytes a tile of in_len x out_len needs (weights, momentum, buffers, code).
// `grad`: a gradient buffer beside the momentum (replicas).
long tile_sram_bytes(int in_len, int out_len, int ring_depth, bool dx, bool grad = false);
// A convolution's tile of `ci` input and `co` output channels, and its root of `co` channels
// (codegen.cc conv_tile_source, conv_root_source); `grad`: a gradient buffer (replicas).
long conv_tile_bytes(const ConvParams& c, int ci, int co, int ring_depth, bool dx, bool grad = false, int align = 16);
// The bytes a convolution tile aligns its ring, planes and dx to (codegen.cc conv_tile_source), so
// that their bank conflicts follow from the element offsets alone: a multiple of the banks.
int conv_sram_align(const CoreConfig& core);
// The cycles of a convolution tile's vector ops per sample (its taps over cq output channels of
// `slice`'s input channels), bank conflicts counted as the core does, averaged over the ring's
// slots: forward the vaxpy into the plane of sums, backward the vfmac into the tap's gradient and
// (dx) the vaxpy into dx.
struct ConvTapCycles {
  double fwd = 0, bwd = 0;
};
// `input_offset`: the input's base minus the plane's, in elements (0: both on a multiple of the banks).
ConvTapCycles conv_tap_cycles(const ConvParams& slice, int cq, bool dx, int ring_depth, const CoreConfig& core, long long input_offset = 0);
long conv_root_bytes(const ConvParams& c, const PoolParams& q, int co, int ring_depth, bool grad = false, int act_planes = 0);
// The planes a convolution root's activation adds per output channel: where its derivative is
// taken at z, y's and the programs' scratch beyond one (codegen.cc conv_root_source); else 0.
int conv_root_act_planes(const DenseKernel& d);

// The cycles of a vector op over n fp32 elements at `rate` a step with `reads` memory sources
// whose relative alignment is not known (placement.cc; docs/core.md).
double vec_op(const CoreConfig& core, double n, int reads, int rate, bool strided);
// One sample's softmax cross-entropy over n classes as codegen.cc's emit_softmax_loss runs it
// (a copy, the max by halving, the shift, exp, sum, log, reciprocal, the scaling), op by op.
double softmax_loss_cycles(const CoreConfig& core, int n);

}  // namespace wafersim::compiler
