#include "compiler/ws_plan.h"

#include <algorithm>

#include "compiler/onnx_model.h"

namespace wafersim::compiler {
namespace {

// Cost model of the generated firmware (cycles; calibrated against measured runs, see
// docs/weight-streaming.md).
constexpr double kWeightTask = 9;    // per weight wavelet: dispatch, vaxpy, pointer and counter updates
constexpr double kOutputEnd = 12;    // per output, forward: chain send and reset
constexpr double kBwdWeight = 14;    // per weight wavelet backward: dx vaxpy, dW product, chain send
constexpr long kCodeBytes = 1536;    // a PE's code besides the per-layer blocks
constexpr long kLayerCode = 1024;    // code per layer (forward and backward blocks)

std::vector<int> split(int n, int p) {
  std::vector<int> off(static_cast<size_t>(p) + 1);
  for (int i = 0; i <= p; ++i) off[static_cast<size_t>(i)] = static_cast<int>(static_cast<long long>(n) * i / p);
  return off;
}

std::string S(long long v) { return std::to_string(v); }

}  // namespace

double WsPlan::cycles_per_batch() const {
  double t = 0;
  for (const WsLayerEst& e : est) t += std::max(e.stream_cycles, e.fwd_cycles) + std::max(e.stream_cycles, e.bwd_cycles);
  return t;
}

WsPlan place_ws(const KernelGraph& g, const HwConfig& hw, const WsOptions& o) {
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
  p.batch = o.batch;
  p.systems = o.systems;
  p.shard = o.batch / o.systems;
  const int W = hw.fabric.width, H = hw.fabric.height;
  // Columns: the shard's samples spread over them, m per column.
  if (o.columns < 0) throw CompileError("ws columns must be >= 0 (got " + S(o.columns) + ")");
  if (o.columns > 0) {
    if (o.columns > W) throw CompileError(S(o.columns) + " sample columns do not fit a fabric " + S(W) + " wide");
    if (p.shard % o.columns != 0) {
      throw CompileError("the shard of " + S(p.shard) + " samples per system does not split over " + S(o.columns) +
                         " columns");
    }
    p.cols = o.columns;
  } else {
    p.cols = 1;
    for (int c = std::min(p.shard, W); c >= 1; --c) {
      if (p.shard % c == 0) {
        p.cols = c;
        break;
      }
    }
  }
  p.m = p.shard / p.cols;
  // Rows: every channel row but the last (the root's); each feature row needs a slice of every
  // layer's input.
  const int nch = std::min(hw.io.channels_per_edge, (H - 1) / hw.io.spacing + 1);
  if (nch < 2) {
    throw CompileError("weight-streaming mode needs at least 2 I/O channel rows (feature rows and a root row); the " +
                       S(W) + " x " + S(H) + " fabric has " + S(std::max(nch, 0)) +
                       " (io.channels_per_edge, io.spacing)");
  }
  int narrow = g.layers.front().in;
  for (const DenseKernel& d : g.layers) narrow = std::min(narrow, d.in);
  int rows = std::min(nch - 1, narrow);
  if (o.rows < 0) throw CompileError("ws rows must be >= 0 (got " + S(o.rows) + ")");
  if (o.rows > 0) {
    if (o.rows > nch - 1) {
      throw CompileError(S(o.rows) + " feature rows need " + S(o.rows + 1) + " I/O channel rows; the fabric has " + S(nch));
    }
    if (o.rows > narrow) {
      throw CompileError(S(o.rows) + " feature rows: the narrowest layer input has only " + S(narrow) + " features");
    }
    rows = o.rows;
  }
  p.rows = rows;
  const int first = (H - 1 - (nch - 1) * hw.io.spacing) / 2;
  for (int a = 0; a < rows; ++a) {
    p.row_channel.push_back(a);
    p.row_y.push_back(first + a * hw.io.spacing);
  }
  p.root_channel = rows;
  p.root_y = first + rows * hw.io.spacing;

  p.width.push_back(g.layers.front().in);
  for (const DenseKernel& d : g.layers) {
    p.width.push_back(d.out);
    p.act.push_back(d.act);
  }
  for (int j = 0; j < L; ++j) p.off.push_back(split(p.width[static_cast<size_t>(j)], rows));

  // SRAM of a feature-row PE: inputs of every layer, the gathered dy, dx, scratch; and of a root.
  const long sram = static_cast<long>(hw.core.sram_kb) * 1024;
  const long m = p.m;
  long worst_row = 0;
  for (int a = 0; a < rows; ++a) {
    long x = 0, dx = 0, dy = 0;
    for (int l = 0; l < L; ++l) {
      x += p.len(l, a) * m;
      if (l > 0) dx = std::max(dx, p.len(l, a) * m);
      dy = std::max(dy, static_cast<long>(p.width[static_cast<size_t>(l) + 1]) * m);
    }
    const long bytes = kCodeBytes + kLayerCode * L + 4 * (x + 2 * dx + dy + 3 * m + 8);
    worst_row = std::max(worst_row, bytes);
  }
  p.row_bytes = worst_row;
  const long nl = p.width.back();
  p.root_bytes = kCodeBytes + kLayerCode * L + 4 * (2 * nl * m + 5 * nl + 4 * m + 16);
  if (p.row_bytes > sram) {
    throw CompileError("weight-streaming: a feature-row PE needs " + S(p.row_bytes) + " bytes of SRAM (" + S(rows) +
                       " feature rows, " + S(p.m) + " samples per column), the core has " + S(sram) +
                       "; use more feature rows (lower io.spacing), more sample columns, or a smaller batch");
  }
  if (p.root_bytes > sram) {
    throw CompileError("weight-streaming: a root PE needs " + S(p.root_bytes) + " bytes of SRAM for " + S(nl) +
                       " logits x " + S(p.m) + " samples, the core has " + S(sram));
  }
  // One descriptor moves fewer than 65536 elements.
  for (int j = 0; j <= L; ++j) {
    if (static_cast<long long>(p.width[static_cast<size_t>(j)]) * p.cols * m > 65535) {
      throw CompileError("weight-streaming: boundary " + S(j) + " (" + S(p.width[static_cast<size_t>(j)]) +
                         " features x " + S(p.shard) + " samples) is longer than one descriptor (65535); use a smaller batch");
    }
  }

  p.channel_rate = std::min(1.0, hw.io.channel_gbps * 1e3 / (32.0 * hw.fabric.clock_mhz));
  const double fmac = hw.core.fmac_fp32, add = hw.core.add_fp32;
  for (int l = 0; l < L; ++l) {
    WsLayerEst e;
    const DenseKernel& d = g.layers[static_cast<size_t>(l)];
    e.weights = static_cast<long long>(d.in) * d.out;
    int maxlen = 0;
    for (int a = 0; a < rows; ++a) maxlen = std::max(maxlen, p.len(l, a));
    const double per_row = static_cast<double>(maxlen) * d.out;
    e.stream_cycles = per_row / p.channel_rate;
    e.fwd_cycles = per_row * (kWeightTask + m / fmac) + d.out * (kOutputEnd + m / add) + rows * 2.0;
    e.bwd_cycles = per_row * (kBwdWeight + (l > 0 ? 2 : 1) * m / fmac + 1 / add) + d.out * 4.0 + rows * 2.0;
    p.est.push_back(e);
  }
  return p;
}

}  // namespace wafersim::compiler
