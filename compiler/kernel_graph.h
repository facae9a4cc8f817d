// Pass 2: the ONNX graph matched to the kernels of the library. A supported model is a chain of
// dense layers (Gemm, or MatMul + Add, each fused with the activation that follows it) ending in
// softmax cross-entropy, where a layer's activated output may add an earlier layer's input of
// the same width (a residual connection, h + act(W h + b)), and convolutions with their pooling;
// Flatten, Reshape and Identity only rename values. Every node that does
// not match is listed with its name, so --validate-only can report them all at once.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/input_prep.h"
#include "compiler/onnx_model.h"

namespace wafersim::compiler {

// The dense kernels' activations, each defined in compiler/activations/ (activation.h). kGelu:
// x Phi(x) (torch's default, the Erf form); kGeluTanh: its tanh approximation. Some take their
// derivative at the pre-activation (act_needs_pre: the GELUs), the others at the output.
// kChain: an activation followed by scalar steps (compiler/activations/chain.cc).
enum class Activation { kNone, kRelu, kSigmoid, kTanh, kLeakyRelu, kGelu, kGeluTanh, kElu, kSelu, kSoftplus, kSoftsign, kHardSigmoid, kClip, kSilu, kHardSwish, kMish, kChain };
const char* activation_name(Activation a);
bool act_needs_pre(Activation a);

// An activation's parameters: LeakyRelu's and Elu's alpha (a); HardSigmoid's alpha and beta
// (a, b); Clip's min and max (a, b).
struct ActParams {
  float a = 0, b = 0;
  // Activation::kChain: the activation `base` (its parameters a and b), then `posts` scalar
  // steps y = y mul[i] + add[i]: a Mul, Div, Add, Sub or Neg of the activated output by a
  // constant, which the kernel graph fuses (0.5 * relu(fc(h)), 2 * sigmoid(z) - 1).
  static constexpr int kMaxPosts = 4;
  Activation base = Activation::kNone;
  int posts = 0;
  float mul[kMaxPosts] = {1, 1, 1, 1}, add[kMaxPosts] = {0, 0, 0, 0};
};
// "relu", or a chain's "relu * 0.5 + 1" (reports).
std::string activation_text(Activation a, const ActParams& p);

// A pattern the rewrite passes recognised (fuse_gelu, fuse_layernorm): its ONNX nodes, the value
// it reads and the value it writes. The kernel graph takes a GELU as one activation and a
// LayerNorm as a step of the dense kernel before it.
struct FusedOp {
  std::string kind;                    // "Gelu", "Activation" (fuse_activations') or "LayerNorm"
  Activation act = Activation::kGelu;  // Gelu: its form; Activation: which
  ActParams par;                       // Activation: its parameters
  std::vector<std::string> nodes;
  std::string input, output;
  std::string scale, bias;             // LayerNorm: the initializers ("" if absent)
  int axis = -1;                       // LayerNorm: the first normalised axis (negative)
  float eps = 1e-5f;
};

// Layer normalisation of a dense kernel's output over its features, between the bias and the
// activation: u = gamma (z - mean) / sqrt(var + eps) + beta, per sample; or (`post`) of the
// activated output, after the activation: u = LayerNorm(act(z)) (nn.Sequential(Linear, GELU,
// LayerNorm)), the activation's derivative then taken after the normalisation's backward.
struct LayerNormParams {
  bool on = false;
  bool post = false;
  std::string node;                    // the first ONNX node of the pattern
  std::string scale, bias;             // initializer names ("": none, gamma 1 or beta 0, not trained)
  float eps = 1e-5f;
  std::vector<float> g, b;             // gamma and beta (out each)
};

// A 2-D convolution (fuse_dense's Conv2d: Conv + bias + activation) over NCHW planes, as both
// modes run it (docs/weight-streaming.md#convolutions, docs/compiler.md): group 1, dilation 1,
// explicit pads. Its weights are the ONNX tensor [co, c, kh, kw], here co x (c kh kw).
struct ConvParams {
  bool on = false;
  int c = 0, h = 0, w = 0;      // input channels and plane
  int co = 0, ho = 0, wo = 0;   // output channels and plane (before any pooling)
  int kh = 1, kw = 1, sh = 1, sw = 1, pt = 0, pl = 0;
  int taps() const { return c * kh * kw; }
};

// Pooling of a convolution's activated output, channel by channel: MaxPool and AveragePool
// (pads below the window's size: a max skips them, an average counts them when count_pad, as
// torch's count_include_pad, and divides by the inputs in the window otherwise; ceil_mode's
// last windows may run past the bottom and right pads by eb and er, which no count includes),
// GlobalAveragePool (kh x kw = the whole plane).
struct PoolParams {
  enum Kind { kNone, kMax, kAvg };
  Kind kind = kNone;
  std::string node;
  int kh = 1, kw = 1, sh = 1, sw = 1;
  int pt = 0, pl = 0, pb = 0, pr = 0;  // pads: top, left, bottom, right
  int eb = 0, er = 0;                  // ceil_mode: the last windows' reach past pb and pr
  bool count_pad = false;              // an average's divisor counts the pads
  int hq = 0, wq = 0;                  // the pooled plane
  // Windows that cross the plane's edge (pads, or ceil_mode's reach).
  bool padded() const { return pt != 0 || pl != 0 || pb != 0 || pr != 0 || eb != 0 || er != 0; }
};

// One fused kernel: y = act(W x + b), with W stored here as out x in, row-major, in fp32.
// A convolution (conv.on) is the same kernel over planes: in = c h w and out = co hq wq are
// the boundary widths (features per sample), W is co x (c kh kw) and b has co elements.
struct DenseKernel {
  std::string name;         // the Gemm/MatMul node's name
  std::string weight, bias; // initializer names ("" bias: the kernel has zeros and writes none back)
  bool weight_in_out = false;  // the initializer is laid out in x out (MatMul, or Gemm transB=0)
  float alpha = 1, beta = 1;   // Gemm scales, folded into w and b (and unfolded on write-back)
  int in = 0, out = 0;
  Activation act = Activation::kNone;
  ActParams act_par;        // the activation's parameters (LeakyRelu's slope, Clip's bounds, ...)
  LayerNormParams ln;       // a LayerNorm between the bias and the activation (or after it: ln.post)
  std::string act_node;     // the fused activation's node name
  // A residual connection: the activated output plus boundary `residual`'s values (0: the
  // model input, l: layer l's input; at most this layer's own), which have this layer's width:
  // y = act(W x + b) + x_k, the next layer's input. -1: none. `residual_node`: the Add.
  int residual = -1;
  std::string residual_node;
  // The join is a product rather than a sum (a gated unit: y = act(W x + b) * x_k, the Mul of
  // two layers' outputs); `residual` its other operand. Weight streaming only.
  bool join_mul = false;
  // The join is a difference (weight streaming): 1, y = act(W x + b) - x_k; 2, y = x_k - act(W x + b).
  int join_sub = 0;
  // A branch: the value this layer reads when it is not the previous layer's output (-1): 0 the
  // model input, k the output of layer k - 1 (a gated unit's second layer, a projection
  // shortcut). Weight streaming only.
  int input = -1;
  // The residual's sum is taken before the activation (a pre-activation residual, as ResNet's
  // blocks and torch's relu(fc(h) + h) export it): y = act(W x + b + x_k), the activation's
  // derivative taken at the sum, and the source's share of the gradient is the one after it.
  bool residual_pre = false;
  ConvParams conv;
  PoolParams pool;          // after the activation (conv only)
  std::vector<float> w;     // out x in (conv: co x c kh kw)
  std::vector<float> b;     // out (conv: co)
  // The weight matrix's rows (outputs per pass) and columns.
  int w_out() const { return conv.on ? conv.co : out; }
  int w_in() const { return conv.on ? conv.taps() : in; }
};

// A node the kernels cannot take, and why.
struct Unsupported {
  std::string node, op, why;
};

struct KernelGraph {
  std::string input_name;
  int in_features = 0;
  std::vector<InputPrep> input_prep;  // the model's own preprocessing of its input (input_prep.h)
  std::vector<DenseKernel> layers;
  std::string loss_node;       // the graph's loss node; "" when the loss was chosen by option
  bool output_softmax = false; // the graph ends in Softmax/LogSoftmax, absorbed by the loss kernel
  std::vector<Unsupported> unsupported;  // in graph order
  std::vector<std::string> notes;        // what was fused or folded, for the report
  std::string ir_summary;                // the graph IR it was checked against (compile.cc)
  std::string ir_rewritten;              // the same after the rewrite passes (compiler/passes/)
  std::string ir_passes;                 // what each pass did ("fuse_dense: 3, dead_code: 1")
  std::string ir_fused;                  // the patterns recognised ("2 Dense (from 4 nodes), 1 LayerNorm (from 9 nodes)")
  std::string ir_training;               // autodiff's training graph, or "autodiff: no gradient rule yet for ..." 

  int classes() const { return layers.empty() ? 0 : layers.back().out; }
  // The value layer l reads (l in a chain; DenseKernel::input for a branch).
  int input_of(int l) const { return layers[static_cast<size_t>(l)].input < 0 ? l : layers[static_cast<size_t>(l)].input; }
  // Whether the graph has branches or gated (Mul) joins, which only weight streaming trains: the
  // first such layer, or -1.
  int first_branch() const;
  // The first layer with a residual connection, or -1.
  int first_residual() const;
  // The first layer with a LayerNorm, or -1.
  int first_layernorm() const;
  // The first convolution, or -1.
  int first_conv() const;
  long long parameters() const;
};

// Matches the model's nodes to kernels. Throws CompileError for problems that stop the match
// (no float input, a symbolic dimension other than the batch, an unknown loss option); ops that
// do not match are collected in `unsupported` instead. `loss_option` names the loss to use
// when the graph has none ("softmax_xent"; "graph" requires one in the graph).
// `fused`: the GELUs and LayerNorms of the graph (compile.cc finds them with the passes).
// What the graph IR's fold_constants computed (compile.cc): the ONNX nodes it folded into
// constants (the shape arithmetic torch exports for x.view(x.size(0), -1): Shape, Gather,
// Unsqueeze, Concat, ...) and their integer values, a leading batch-sized element as 0 (Reshape's
// "keep this dimension").
struct FoldedValues {
  std::set<std::string> nodes;
  std::map<std::string, std::vector<int64_t>> ints;
};
KernelGraph build_kernel_graph(const OnnxModel& m, const std::string& loss_option, const std::vector<FusedOp>& fused = {},
                               const FoldedValues& folded = {});

}  // namespace wafersim::compiler
