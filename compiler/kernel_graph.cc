#include "compiler/kernel_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <tuple>

#include "compiler/activation.h"

namespace wafersim::compiler {
namespace {

std::string node_ref(const OnnxNode& n) { return "node '" + n.name + "' (" + n.op_type + ")"; }

std::string num(float v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.9g", static_cast<double>(v));
  return b;
}

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

const OnnxTensor* float_init(const OnnxModel& m, const std::string& name, const OnnxNode& n) {
  auto it = m.initializers.find(name);
  if (it == m.initializers.end()) return nullptr;
  if (it->second.elem_type != kOnnxFloat) {
    throw CompileError(node_ref(n) + ": initializer '" + name + "' has dtype " +
                       onnx_elem_type_name(it->second.elem_type) + "; only float (fp32) weights are supported");
  }
  const auto& v = it->second.f32;
  const auto bad = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
  if (bad != v.end()) {
    throw CompileError(node_ref(n) + ": initializer '" + name + "' holds " + (std::isnan(*bad) ? "NaN" : "an infinity") +
                       " (element " + std::to_string(bad - v.begin()) + "); weights must be finite numbers");
  }
  return &it->second;
}

// The tracked activation: which value name holds it and how many features it has.
struct Flow {
  std::string value;
  int features = 0;
  bool known = true;    // false after an unsupported node: later nodes are still checked
  int dense = -1;       // the dense kernel whose output this is (-1: the model input)
  bool activated = false;
  bool pending_matmul = false;  // output of a MatMul still waiting for its Add
  size_t rank = 2;      // of the value: the input's rank, then [batch, features]
  bool residual = false;  // the output of a residual Add
  bool residual_raw = false;  // that Add took a layer output before any activation (one may follow)
  int c = 0, h = 0, w = 0;  // rank 4: the NCHW planes (channels, height, width)
  bool pooled = false;    // a convolution's pooled output
  // A Pad of zeros around the planes (top, left, bottom, right), taken as the pads of the Conv
  // or AveragePool after it (count_include_pad: torch exports AvgPool2d's padding so).
  std::vector<int64_t> pad = {};
  std::string pad_node = "";
};

// A Gemm flag (transA, transB): 0 or 1, nothing else.
bool flag_value(const OnnxNode& n, const char* key, bool* value, std::string* why) {
  const OnnxAttr* a = n.attr(key);
  *value = a && a->i != 0;
  if (a && a->kind != OnnxAttr::kInt) *why = std::string(key) + " must be an integer, 0 or 1";
  else if (a && a->i != 0 && a->i != 1) *why = std::string(key) + " = " + std::to_string(a->i) + " must be 0 or 1";
  return why->empty();
}

// alpha and beta are folded into the weights and unfolded on write-back: both must survive the
// round trip (finite, not subnormal, so that 1/alpha is finite too).
bool foldable(float v) { return std::isfinite(v) && std::fpclassify(v) != FP_SUBNORMAL && std::isfinite(1.0f / v); }

}  // namespace

int KernelGraph::first_layernorm() const {
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].ln.on) return static_cast<int>(l);
  }
  return -1;
}

int KernelGraph::first_branch() const {
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].input >= 0 || layers[l].join_mul || layers[l].join_sub) return static_cast<int>(l);
  }
  return -1;
}

int KernelGraph::first_conv() const {
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].conv.on) return static_cast<int>(l);
  }
  return -1;
}

int KernelGraph::first_residual() const {
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].residual >= 0) return static_cast<int>(l);
  }
  return -1;
}

long long KernelGraph::parameters() const {
  long long n = 0;
  for (const auto& l : layers) n += static_cast<long long>(l.w_in()) * l.w_out() + l.w_out() + (l.ln.on ? 2LL * l.out : 0);
  return n;
}

KernelGraph build_kernel_graph(const OnnxModel& m, const std::string& loss_option, const std::vector<FusedOp>& fused,
                               const FoldedValues& folded) {
  std::map<std::string, size_t> group_of;  // a fused op's node -> its group
  for (size_t i = 0; i < fused.size(); ++i) {
    for (const std::string& n : fused[i].nodes) group_of[n] = i;
  }
  std::set<size_t> groups_seen;
  if (loss_option != "softmax_xent" && loss_option != "graph") {
    throw CompileError("loss '" + loss_option + "' is unknown (choose softmax_xent, or graph to require the graph's own)");
  }
  KernelGraph g;
  // The data input: the first float graph input. A second input may carry the labels of a loss.
  const OnnxValue* in = nullptr;
  std::set<std::string> label_inputs;
  for (const auto& v : m.inputs) {
    if (!in && v.elem_type == kOnnxFloat) in = &v;
    else label_inputs.insert(v.name);
  }
  if (!in) {
    // Token ids (an integer input an embedding's Gather reads): the graph IR and autodiff take
    // them (--validate-only shows the training graph), the wafer's kernels not yet.
    for (const auto& v : m.inputs) {
      if (v.elem_type != kOnnxInt64 && v.elem_type != kOnnxInt32) continue;
      g.input_name = v.name;
      g.unsupported.push_back({v.name, "Input", std::string("an integer input (dtype ") + onnx_elem_type_name(v.elem_type) +
                                                    ": token ids, read by an embedding's Gather) is not supported on the wafer yet; "
                                                    "the kernels take a float (fp32) input"});
      return g;
    }
    std::string got = m.inputs.empty() ? "no inputs" : "input '" + m.inputs[0].name + "' of dtype " +
                                                           onnx_elem_type_name(m.inputs[0].elem_type);
    throw CompileError(m.path + ": the model needs a float (fp32) input; it has " + got);
  }
  g.input_name = in->name;
  int64_t feat = 1;
  for (size_t i = 0; i < in->dims.size(); ++i) {
    if (in->dims[i] >= 0) {
      if (i > 0 || in->dims.size() == 1) feat *= in->dims[i];
      continue;
    }
    if (i == 0 && in->dims.size() > 1) continue;  // the batch dimension may stay symbolic
    const std::string sym = in->dim_params[i].empty() ? "?" : in->dim_params[i];
    throw CompileError(m.path + ": input '" + in->name + "' dimension " + std::to_string(i) + " is dynamic ('" + sym +
                       "'); only the batch dimension (0) may be: export with a fixed sample shape");
  }
  if (in->dims.empty()) throw CompileError(m.path + ": input '" + in->name + "' has no shape; export with a fixed sample shape");
  if (feat < 1 || feat > (int64_t{1} << 30)) {
    throw CompileError(m.path + ": input '" + in->name + "' has " + std::to_string(feat) + " features per sample; need 1 to 2^30");
  }
  g.in_features = static_cast<int>(feat);

  Flow f{in->name, g.in_features};
  f.rank = in->dims.size();
  if (f.rank == 4) f.c = static_cast<int>(in->dims[1]), f.h = static_cast<int>(in->dims[2]), f.w = static_cast<int>(in->dims[3]);
  if (f.rank == 3) f.c = static_cast<int>(in->dims[1]), f.h = 1, f.w = static_cast<int>(in->dims[2]);  // NCL: a 1-D convolution's
  auto unsupported = [&](const OnnxNode& n, const std::string& why) {
    g.unsupported.push_back({n.name, n.op_type, why});
    f.value = n.outputs.empty() ? "" : n.outputs[0];
    f.known = false;
  };
  // A node after an unsupported one is not blamed for it: the chain goes on through it unchecked.
  auto follow = [&](const OnnxNode& n) { f.value = n.outputs[0]; };
  auto uses_flow = [&](const OnnxNode& n) {
    return !n.inputs.empty() &&
           (n.inputs[0] == f.value ||
            ((n.op_type == "Add" || n.op_type == "Mul" || n.op_type == "Sub") && n.inputs.size() > 1 && n.inputs[1] == f.value));
  };
  // Layer l's input value (boundary l), recorded when its Gemm or MatMul takes it: what a
  // residual Add may add to a later layer's output.
  std::map<std::string, int> boundary;
  // Why a branch from value k cannot be taken ("" if it can): dense layers only, for now.
  auto branch_refusal = [&](int k) -> std::string {
    if (f.rank != 2 || (k > 0 && g.layers[static_cast<size_t>(k) - 1].conv.on) || g.first_conv() >= 0) {
      return "a branch (a layer reading an earlier value than the last layer's output) among convolutions is not supported yet";
    }
    if (g.layers[static_cast<size_t>(f.dense)].ln.on) return "a branch after a LayerNorm is not supported yet";
    return "";
  };
  // Why an activation here cannot fuse into the dense layer before it ("" if it can).
  auto activation_refusal = [&]() -> std::string {
    if (f.residual) {
      if (f.residual_raw) return "";  // act(W h + b + h_k): the sum is the activation's input
      return g.layers[static_cast<size_t>(f.dense)].residual_pre
                 ? "a second activation after a residual Add; each layer takes one"
                 : "an activation of a residual sum whose layer output was already activated (act(h + act(W h + b))); a residual "
                   "sum is taken either after the layer's activation or before it (act(W h + b + h))";
    }
    if (f.dense < 0 || f.activated) return "an activation must directly follow a dense layer";
    if (f.pooled) return "an activation after pooling; put it between the convolution and the pooling (a ReLU after a MaxPool is taken)";
    return "";
  };
  // Fuses activation `act` of node `n` (`what`, for the note) into the dense layer before it.
  auto fuse_activation = [&](const OnnxNode& n, Activation act, const ActParams& par, const std::string& what) {
    DenseKernel& d = g.layers[static_cast<size_t>(f.dense)];
    d.act = act;
    d.act_par = par;
    d.act_node = n.name;
    if (f.residual) {
      d.residual_pre = true;
      f.residual_raw = false;
    }
    g.notes.push_back(what + " fused into " + d.name + (d.residual_pre ? ", after its residual sum" : ""));
    f.pending_matmul = false;
    f.activated = true;
  };
  // A LayerNorm group `fa` (its first node `n`) as a step of the dense layer before it: "" if
  // taken, else why not.
  auto take_layernorm = [&](const OnnxNode& n, const FusedOp& fa) -> std::string {
    if (f.residual && f.residual_raw) return "a LayerNorm of a residual sum (post-norm, LayerNorm(h + W h + b)) is not supported yet";
    if (f.dense >= 0 && g.layers[static_cast<size_t>(f.dense)].input >= 0) return "a LayerNorm of a branch's output is not supported yet";
    if (f.dense < 0 || f.pending_matmul || f.residual || g.layers[static_cast<size_t>(f.dense)].ln.on ||
        g.layers[static_cast<size_t>(f.dense)].conv.on || f.pooled) {
      return "a LayerNorm is supported on a dense layer's output (after its bias, before or after its activation)";
    }
    // After the activation (nn.Sequential(Linear, GELU, LayerNorm)): the activation is taken
    // before the normalisation at the layer's root(s).
    const bool post = f.activated;
    if (fa.axis != -1) return "a LayerNorm over axis " + std::to_string(fa.axis) + "; only the feature axis (-1)";
    if (!(fa.eps > 0) || !std::isfinite(fa.eps)) return "epsilon = " + num(fa.eps) + " must be a positive number";
    if (fa.scale.empty() || fa.bias.empty()) return "a LayerNorm without its scale and bias (elementwise_affine=False) is not supported yet";
    DenseKernel& d = g.layers[static_cast<size_t>(f.dense)];
    LayerNormParams ln;
    ln.on = true;
    ln.post = post;
    ln.node = n.name;
    ln.eps = fa.eps;
    ln.scale = fa.scale;
    ln.bias = fa.bias;
    for (const auto& [name, dst, what] : {std::tuple{fa.scale, &ln.g, "scale"}, std::tuple{fa.bias, &ln.b, "bias"}}) {
      const OnnxTensor* t = float_init(m, name, n);
      if (!t || t->numel() != d.out) return std::string("the LayerNorm's ") + what + " must be an initializer of " + std::to_string(d.out) + " elements";
      *dst = t->f32;
    }
    d.ln = std::move(ln);
    g.notes.push_back("LayerNorm (" + std::to_string(fa.nodes.size()) + " node" + (fa.nodes.size() == 1 ? "" : "s") + " from " + node_ref(n) +
                      ") fused into " + d.name + (post ? " after its activation" : ""));
    return "";
  };
  // A Conv (with its bias) as a convolution kernel: "" if taken, else why not.
  auto take_conv = [&](const OnnxNode& n) -> std::string {
    if (f.pending_matmul) return "a MatMul needs its bias Add before the next layer";
    // A 1-D convolution (NCL values, weight [out, in, k]) is the 2-D kernel over planes of one row.
    const bool one_d = f.rank == 3;
    if (f.rank != 4 && !one_d) return "a Conv needs NCHW planes (a 4-D input) or NCL sequences (3-D); this one gets " + std::to_string(f.rank) + "-D values";
    const OnnxTensor* w = n.inputs.size() > 1 ? float_init(m, n.inputs[1], n) : nullptr;
    if (!w) return "the weight (input 1) must be an initializer";
    if (w->dims.size() != (one_d ? 3u : 4u)) {
      return "weight '" + w->name + "' has shape " + dims_str(w->dims) + (one_d ? "; a 1-D convolution needs [out, in, k]" : "; a 2-D convolution needs [out, in, kh, kw]");
    }
    auto ints = [&](const char* key, size_t len, int64_t dflt) {
      const OnnxAttr* a = n.attr(key);
      std::vector<int64_t> v = a && a->kind == OnnxAttr::kInts ? a->ints : std::vector<int64_t>{};
      if (one_d && v.size() == len / 2) {  // the row's: a height of 1, no pads above or below
        v = len == 4 ? std::vector<int64_t>{0, v[0], 0, v[1]} : std::vector<int64_t>{len == 2 && std::string(key) == "kernel_shape" ? 1 : dflt, v[0]};
      }
      if (v.empty()) v.assign(len, dflt);
      return v;
    };
    if (const OnnxAttr* a = n.attr("group"); a && a->i != 1) return "group = " + std::to_string(a->i) + "; the kernels take group 1 only (no grouped or depthwise convolutions yet)";
    if (const OnnxAttr* a = n.attr("auto_pad"); a && !a->s.empty() && a->s != "NOTSET") return "auto_pad = " + a->s + "; export with explicit pads";
    const auto dil = ints("dilations", 2, 1), st = ints("strides", 2, 1), ks = ints("kernel_shape", 2, 0);
    auto pads = ints("pads", 4, 0);
    if (dil.size() != 2 || st.size() != 2 || pads.size() != 4) return "a 2-D convolution needs 2 dilations, 2 strides and 4 pads";
    for (size_t i = 0; i < f.pad.size() && i < 4; ++i) pads[i] += f.pad[i];
    if (dil[0] != 1 || dil[1] != 1) return "dilations " + dims_str(dil) + "; the kernels take dilation 1 only";
    if (st[0] < 1 || st[1] < 1 || st[0] > 64 || st[1] > 64) return "strides " + dims_str(st) + " must be 1 to 64";
    for (int64_t v : pads) {
      if (v < 0 || v > 64) return "pads " + dims_str(pads) + " must be 0 to 64";
    }
    const int64_t co = w->dims[0], ci = w->dims[1], kh = one_d ? 1 : w->dims[2], kw = one_d ? w->dims[2] : w->dims[3];
    if (ks[0] && (ks.size() != 2 || ks[0] != kh || ks[1] != kw)) return "kernel_shape " + dims_str(ks) + " does not match weight '" + w->name + "' " + dims_str(w->dims);
    if (co < 1 || kh < 1 || kw < 1) return "weight '" + w->name + "' " + dims_str(w->dims) + " is empty";
    if (ci != f.c) return "weight '" + w->name + "' " + dims_str(w->dims) + " expects " + std::to_string(ci) + " input channels, the value has " + std::to_string(f.c);
    const int64_t ho = (f.h + pads[0] + pads[2] - kh) / st[0] + 1, wo = (f.w + pads[1] + pads[3] - kw) / st[1] + 1;
    if (f.h + pads[0] + pads[2] < kh || f.w + pads[1] + pads[3] < kw) {
      return "a " + std::to_string(kh) + " x " + std::to_string(kw) + " kernel does not fit the padded " + std::to_string(f.h) + " x " + std::to_string(f.w) + " plane";
    }
    if (co * ho * wo > (int64_t{1} << 30)) return "the output (" + std::to_string(co * ho * wo) + " values a sample) is too large";
    DenseKernel d;
    d.name = n.name;
    d.weight = w->name;
    d.conv.on = true;
    d.conv.c = f.c, d.conv.h = f.h, d.conv.w = f.w;
    d.conv.co = static_cast<int>(co), d.conv.ho = static_cast<int>(ho), d.conv.wo = static_cast<int>(wo);
    d.conv.kh = static_cast<int>(kh), d.conv.kw = static_cast<int>(kw), d.conv.sh = static_cast<int>(st[0]), d.conv.sw = static_cast<int>(st[1]);
    d.conv.pt = static_cast<int>(pads[0]), d.conv.pl = static_cast<int>(pads[1]);
    d.in = f.features;
    d.out = static_cast<int>(co * ho * wo);
    d.w = w->f32;
    d.b.assign(static_cast<size_t>(co), 0.0f);
    if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
      const OnnxTensor* b = float_init(m, n.inputs[2], n);
      if (!b || b->numel() != co) return "the bias (input 2) must be an initializer of " + std::to_string(co) + " elements";
      d.bias = b->name;
      d.b = b->f32;
    }
    boundary.emplace(f.value, static_cast<int>(g.layers.size()));
    g.layers.push_back(std::move(d));
    const DenseKernel& k = g.layers.back();
    f = Flow{n.outputs[0], k.out, true, static_cast<int>(g.layers.size()) - 1, false, false, one_d ? 3u : 4u};
    f.c = k.conv.co, f.h = k.conv.ho, f.w = k.conv.wo;
    return "";
  };
  // A pooling node after a convolution (and its activation): "" if taken, else why not.
  auto take_pool = [&](const OnnxNode& n) -> std::string {
    const std::string& op = n.op_type;
    if (f.dense < 0 || !g.layers[static_cast<size_t>(f.dense)].conv.on || (f.rank != 4 && f.rank != 3) ||
        g.layers[static_cast<size_t>(f.dense)].pool.kind != PoolParams::kNone) {
      return "pooling is supported on a convolution's output (after its activation), once";
    }
    DenseKernel& d = g.layers[static_cast<size_t>(f.dense)];
    // After a residual sum: a max pooling's backward needs its input, which the root keeps only
    // where the sum came before the activation (the input is then the activated output).
    if (f.residual && op == "MaxPool" && !d.residual_pre) {
      return "a MaxPool after a residual sum of an activated output (h + act(conv(h))) is not supported yet; an average pooling is, "
             "and a MaxPool after act(conv(h) + h)";
    }
    PoolParams pp;
    bool ceil = false;
    pp.node = n.name;
    pp.kind = op == "MaxPool" ? PoolParams::kMax : PoolParams::kAvg;
    if (op == "GlobalAveragePool") {
      pp.kh = f.h, pp.kw = f.w, pp.sh = f.h, pp.sw = f.w;
    } else {
      // A 1-D pooling (NCL) is the 2-D one over planes of one row: its sizes and pads widened.
      const bool one_d = f.rank == 3;
      const size_t nd = one_d ? 1 : 2;
      const OnnxAttr* ksa = n.attr("kernel_shape");
      if (!ksa || ksa->ints.size() != nd) return "kernel_shape must give " + std::to_string(nd) + " size" + (nd > 1 ? "s" : "");
      const OnnxAttr* st = n.attr("strides");
      if (st && st->ints.size() != nd) return "strides must give " + std::to_string(nd) + " value" + (nd > 1 ? "s" : "");
      auto out_of = [](const std::vector<int64_t>& v) { return std::any_of(v.begin(), v.end(), [](int64_t x) { return x < 1 || x > 4096; }); };
      if (out_of(ksa->ints) || (st && out_of(st->ints))) return "kernel_shape and strides must be 1 to 4096";
      const std::vector<int64_t> kv = one_d ? std::vector<int64_t>{1, ksa->ints[0]} : ksa->ints;
      const std::vector<int64_t> sv = !st ? std::vector<int64_t>{1, 1} : one_d ? std::vector<int64_t>{1, st->ints[0]} : st->ints;
      pp.kh = static_cast<int>(kv[0]), pp.kw = static_cast<int>(kv[1]);
      pp.sh = static_cast<int>(sv[0]), pp.sw = static_cast<int>(sv[1]);
      std::vector<int64_t> pads(4, 0);
      if (const OnnxAttr* a = n.attr("pads"); a && !a->ints.empty()) {
        if (a->ints.size() != 2 * nd) return "pads " + dims_str(a->ints) + " must give " + std::to_string(2 * nd) + " values";
        pads = one_d ? std::vector<int64_t>{0, a->ints[0], 0, a->ints[1]} : a->ints;
      }
      const OnnxAttr* cip = n.attr("count_include_pad");
      pp.count_pad = cip && cip->i != 0;
      if (!f.pad.empty()) {  // a Pad of zeros before an AveragePool: padding it counts
        if (op != "AveragePool" || std::any_of(pads.begin(), pads.end(), [](int64_t v) { return v != 0; })) {
          return "follows a Pad of zeros (" + f.pad_node + "), taken only before a Conv or an AveragePool without pads of its own";
        }
        pads = f.pad;
        pp.count_pad = true;
      }
      if (pads[0] < 0 || pads[1] < 0 || pads[2] < 0 || pads[3] < 0 || pads[0] >= kv[0] || pads[2] >= kv[0] ||
          pads[1] >= kv[1] || pads[3] >= kv[1]) {
        return "pads " + dims_str(pads) + " must be 0 to the window's size less 1";
      }
      pp.pt = static_cast<int>(pads[0]), pp.pl = static_cast<int>(pads[1]), pp.pb = static_cast<int>(pads[2]), pp.pr = static_cast<int>(pads[3]);
      if (const OnnxAttr* a = n.attr("ceil_mode"); a && a->i != 0) ceil = true;
      if (const OnnxAttr* a = n.attr("dilations"); a && std::any_of(a->ints.begin(), a->ints.end(), [](int64_t v) { return v != 1; })) {
        return "dilations " + dims_str(a->ints) + "; pooling takes dilation 1 only";
      }
      if (const OnnxAttr* a = n.attr("auto_pad"); a && !a->s.empty() && a->s != "NOTSET") return "auto_pad = " + a->s + " is not supported";
      if (const OnnxAttr* a = n.attr("storage_order"); a && a->i != 0) return "storage_order = 1 is not supported";
      if (n.outputs.size() > 1 && !n.outputs[1].empty()) return "MaxPool's indices output is not supported";
      if (pp.kh < 1 || pp.kw < 1 || pp.kh > f.h + pp.pt + pp.pb || pp.kw > f.w + pp.pl + pp.pr) {
        return "a " + std::to_string(pp.kh) + " x " + std::to_string(pp.kw) + " window does not fit the " + (pp.padded() ? "padded " : "") +
               std::to_string(f.h) + " x " + std::to_string(f.w) + " plane";
      }
      if (pp.sh < 1 || pp.sw < 1 || pp.sh > 64 || pp.sw > 64) return "strides must be 1 to 64";
    }
    // ceil_mode: one more window where the last would leave some of the padded plane unread,
    // if it starts inside the plane or its first pad (torch's rule); it reaches past the pad.
    auto windows = [&](int n, int k, int s, int p0, int p1, int* reach) {
      int out = (n + p0 + p1 - k) / s + 1;
      if (ceil && (n + p0 + p1 - k) % s != 0 && out * s < n + p0) ++out;
      *reach = std::max(0, (out - 1) * s + k - (n + p0 + p1));
      return out;
    };
    pp.hq = windows(f.h, pp.kh, pp.sh, pp.pt, pp.pb, &pp.eb), pp.wq = windows(f.w, pp.kw, pp.sw, pp.pl, pp.pr, &pp.er);
    f.pad.clear();
    d.pool = pp;
    d.out = d.conv.co * pp.hq * pp.wq;
    g.notes.push_back(node_ref(n) + " fused into " + d.name + " after its activation");
    f.value = n.outputs[0];
    f.h = pp.hq, f.w = pp.wq, f.features = d.out;
    f.activated = d.act != Activation::kNone;
    f.pooled = true;
    return "";
  };
  // An Add, Sub, Mul or Div of the model input (before any layer) by a constant that broadcasts
  // over one sample: the input workers' step (input_prep.h). "" if taken, else why not.
  auto take_input_prep = [&](const OnnxNode& n) -> std::string {
    if (!f.pad.empty()) return "follows a Pad of zeros (" + f.pad_node + "), taken only before a Conv or an AveragePool";
    const bool first = n.inputs[1] == f.value;  // the constant comes first: c - x, c / x
    const std::string& cname = n.inputs[first ? 0 : 1];
    const OnnxTensor* t = float_init(m, cname, n);
    if (!t) {
      return "an " + n.op_type + " of the model input is taken as preprocessing with a constant operand only; '" + cname +
             "' is computed (elementwise ops between activations are not supported yet)";
    }
    // The sample's dimensions (the batch left out) and the constant's, right-aligned.
    std::vector<int64_t> dims = f.rank == 4   ? std::vector<int64_t>{f.c, f.h, f.w}
                                : f.rank == 3 ? std::vector<int64_t>{f.c, f.w}
                                              : std::vector<int64_t>{f.features};
    const std::vector<int64_t>& cd = t->dims;
    const size_t r = dims.size() + 1;
    bool ok = cd.size() <= r && (cd.size() < r || cd[0] == 1);
    for (size_t i = 0; ok && i < cd.size() && i < dims.size(); ++i) {
      const int64_t c = cd[cd.size() - 1 - i], d = dims[dims.size() - 1 - i];
      ok = c == 1 || c == d;
    }
    if (!ok || t->numel() < 1) {
      return "its constant '" + cname + "' of shape " + dims_str(cd) + " does not broadcast over one sample of the input (" + dims_str(dims) + ")";
    }
    InputPrep p;
    p.node = n.name;
    p.kind = n.op_type == "Add" ? InputPrep::kAdd : n.op_type == "Sub" ? InputPrep::kSub : n.op_type == "Mul" ? InputPrep::kMul : InputPrep::kDiv;
    p.const_first = first;
    if (t->numel() == 1) {
      p.c = {t->f32[0]};
    } else {
      // Expanded to one value per feature: feature k's index in the constant, dimension by dimension.
      p.c.resize(static_cast<size_t>(f.features));
      for (int64_t k = 0; k < f.features; ++k) {
        int64_t rest = k, idx = 0, stride = 1;
        for (size_t i = 0; i < dims.size(); ++i) {
          const size_t di = dims.size() - 1 - i;
          const int64_t pos = rest % dims[di];
          rest /= dims[di];
          if (i < cd.size() && cd[cd.size() - 1 - i] != 1) idx += pos * stride;
          if (i < cd.size()) stride *= cd[cd.size() - 1 - i];
        }
        p.c[static_cast<size_t>(k)] = t->f32[static_cast<size_t>(idx)];
      }
    }
    if (p.kind == InputPrep::kDiv && !p.const_first && std::any_of(p.c.begin(), p.c.end(), [](float v) { return v == 0.0f; })) {
      return "divides the model input by zero ('" + cname + "')";
    }
    g.input_prep.push_back(std::move(p));
    g.notes.push_back(node_ref(n) + " of the model input by a constant: preprocessing, applied by the input workers as they feed each sample (after data.scale, data.mean and data.std)");
    f.value = n.outputs[0];
    return "";
  };
  // A Mul, Div, Add, Sub of the flow by a one-element float constant (either operand), or a
  // Neg of it: the step (y mul + add, or why the kernels cannot take it), or nothing.
  struct ScalarStep {
    float mul = 1, add = 0;
    std::string why;  // a step the kernels cannot take
  };
  auto scalar_operand = [&](const OnnxNode& n) -> std::optional<ScalarStep> {
    const std::string& op = n.op_type;
    if (op == "Neg" && n.inputs.size() == 1 && n.inputs[0] == f.value) return ScalarStep{-1, 0, ""};
    if ((op != "Mul" && op != "Div" && op != "Add" && op != "Sub") || n.inputs.size() != 2) return std::nullopt;
    const bool first = n.inputs[1] == f.value;
    if (!first && n.inputs[0] != f.value) return std::nullopt;
    auto it = m.initializers.find(n.inputs[first ? 0 : 1]);
    if (it == m.initializers.end() || it->second.elem_type != kOnnxFloat || it->second.numel() != 1 || it->second.f32.size() != 1) return std::nullopt;
    const float c = it->second.f32[0];
    ScalarStep st;
    if (!std::isfinite(c)) st.why = "its constant is not a finite number";
    if (op == "Mul") st.mul = c;
    if (op == "Add") st.add = c;
    if (op == "Sub") st.mul = first ? -1.0f : 1.0f, st.add = first ? c : -c;
    if (op == "Div") {
      if (first) st.why = "c / x (a reciprocal of the activations) is not supported yet";
      else if (c == 0.0f) st.why = "divides by zero";
      else st.mul = 1.0f / c;  // a multiplication by the reciprocal (activations/chain.cc)
    }
    return st;
  };
  // Takes step `st` of node `n` into the dense kernel's activation: "" if taken, else why not.
  auto take_scalar_step = [&](const OnnxNode& n, const ScalarStep& st) -> std::string {
    if (!st.why.empty()) return st.why;
    if (f.pending_matmul) return "a MatMul needs its bias Add before the next op";
    if (f.residual) return "a scalar step of a residual sum is not supported yet (it is taken on a layer's activated output)";
    if (f.pooled) return "a scalar step after pooling is not supported yet; put it before the pooling";
    DenseKernel& d = g.layers[static_cast<size_t>(f.dense)];
    if (d.ln.on && d.ln.post) return "a scalar step after a LayerNorm of the activated output is not supported yet";
    if (d.act != Activation::kChain) {
      ActParams p;
      p.a = d.act_par.a, p.b = d.act_par.b;
      p.base = d.act;
      d.act_par = p;
      d.act = Activation::kChain;
      if (d.act_node.empty()) d.act_node = n.name;
    }
    ActParams& p = d.act_par;
    if (p.posts == ActParams::kMaxPosts) return "more than " + std::to_string(ActParams::kMaxPosts) + " scalar steps after one activation";
    p.mul[p.posts] = st.mul, p.add[p.posts] = st.add;
    ++p.posts;
    g.notes.push_back(node_ref(n) + " fused into " + d.name + "'s activation (y * " + num(st.mul) + " + " + num(st.add) + ")");
    f.activated = true;
    f.value = n.outputs[0];
    return "";
  };
  const OnnxNode* softmax_node = nullptr;  // a Softmax/LogSoftmax, absorbed only after the last layer
  size_t softmax_layers = 0;

  // A node off the data's path: all its inputs initializers (an Identity of a parameter, as
  // torch shares equal ones), or folded into a constant by the graph IR (shape arithmetic).
  auto off_path = [&](const OnnxNode& n) {
    if (folded.nodes.count(n.name)) return true;
    if (n.inputs.empty()) return false;
    for (const std::string& i : n.inputs) {
      if (!i.empty() && !m.initializers.count(i)) return false;
    }
    return true;
  };
  for (const OnnxNode& n : m.nodes) {
    const std::string& op = n.op_type;
    if (off_path(n)) continue;
    if (auto gi = group_of.find(n.name); gi != group_of.end()) {
      // An activation fused from several nodes (fuse_gelu's GELUs, fuse_activations' SiLU,
      // HardSwish, Mish, Softsign): one activation at its first node, its other nodes taken; a
      // LayerNorm (fuse_layernorm's) likewise, a step of the dense kernel before it.
      if (!groups_seen.insert(gi->second).second) continue;
      const FusedOp& fa = fused[gi->second];
      const std::string what = fa.kind == "LayerNorm" ? "LayerNorm" : activation_name(fa.act);
      std::string why;
      if (f.known && !f.pad.empty()) {
        why = "follows a Pad of zeros (" + f.pad_node + "), taken only before a Conv or an AveragePool";
      } else if (f.known && std::find(n.inputs.begin(), n.inputs.end(), f.value) == n.inputs.end()) {
        why = "a " + what + " that does not continue the model's single chain of layers";
      } else if (f.known && fa.kind == "LayerNorm") {
        why = take_layernorm(n, fa);
      } else if (f.known && (why = activation_refusal()).empty()) {
        fuse_activation(n, fa.act, fa.par, what + " (" + std::to_string(fa.nodes.size()) + " nodes from " + node_ref(n) + ")");
      }
      if (!why.empty()) unsupported(n, why);
      f.value = fa.output;
      continue;
    }
    if (n.outputs.empty() || n.outputs[0].empty()) {
      unsupported(n, "has no output");  // the ONNX checker refuses this for known ops; custom domains too
      continue;
    }
    if (!n.domain.empty() && n.domain != "ai.onnx") {
      unsupported(n, "domain '" + n.domain + "' is not supported");
      continue;
    }
    if (auto sc = f.known && f.dense >= 0 && !f.pending_matmul ? scalar_operand(n) : std::nullopt; sc) {
      // A scalar step of a layer's activated output (activations/chain.cc).
      std::string why = take_scalar_step(n, *sc);
      if (!why.empty()) unsupported(n, why);
      continue;
    }
    if ((op == "Add" || op == "Sub" || op == "Mul" || op == "Div") && f.known && f.dense < 0 && g.layers.empty() && n.inputs.size() == 2 &&
        (n.inputs[0] == f.value || n.inputs[1] == f.value) && n.inputs[0] != n.inputs[1]) {
      // The model's own preprocessing of its input (input_prep.h): a constant operand.
      std::string why = take_input_prep(n);
      if (!why.empty()) unsupported(n, why);
      continue;
    }
    // A branch: a Gemm or MatMul of an earlier value (the model input, or an earlier layer's
    // output) while the flow holds the last layer's output, which a later join or layer reads.
    int branch = -1;
    if ((op == "Gemm" || op == "MatMul") && f.known && !uses_flow(n) && !n.inputs.empty() && f.dense >= 0 && !f.pending_matmul) {
      if (auto it = boundary.find(n.inputs[0]); it != boundary.end()) branch = it->second;
    }
    if (branch < 0 && !uses_flow(n) && op != "SoftmaxCrossEntropyLoss" && op != "NegativeLogLikelihoodLoss") {
      unsupported(n, "does not continue the model's single chain of layers (branches are not supported)");
      continue;
    }
    if (!f.pad.empty() && op != "Conv" && op != "AveragePool" && op != "MaxPool") {
      unsupported(n, "follows a Pad of zeros (" + f.pad_node + "), taken only before a Conv or an AveragePool");
      f.pad.clear();
      continue;
    }
    if (op == "Pad") {
      // torch exports AvgPool2d with a Pad of zeros before it (of no width without padding: a
      // rename; else the pool's pads, counted); a Pad of zeros before a Conv adds to its pads.
      if (!f.known) { follow(n); continue; }
      std::vector<int64_t> pads;
      if (const OnnxAttr* a = n.attr("pads"); a && a->kind == OnnxAttr::kInts) pads = a->ints;  // opset < 11
      if (auto it = n.inputs.size() > 1 ? m.initializers.find(n.inputs[1]) : m.initializers.end(); it != m.initializers.end()) {
        pads = it->second.i64;
      } else if (auto fv = n.inputs.size() > 1 ? folded.ints.find(n.inputs[1]) : folded.ints.end(); fv != folded.ints.end()) {
        pads = fv->second;  // computed as torch's F.pad exports it (the graph IR folded it)
      }
      const OnnxAttr* mode = n.attr("mode");
      bool zero = true;  // the constant: input 2 (opset >= 11) or the value attribute
      if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
        auto c = m.initializers.find(n.inputs[2]);
        zero = c != m.initializers.end() && c->second.numel() == 1 && !c->second.f32.empty() && c->second.f32[0] == 0.0f;
      }
      if (const OnnxAttr* v = n.attr("value"); v && v->f != 0.0f) zero = false;
      const bool none = std::all_of(pads.begin(), pads.end(), [](int64_t v) { return v == 0; });
      if (pads.empty() || (mode && !mode->s.empty() && mode->s != "constant") || !zero) {
        unsupported(n, "padding is supported as a Pad of zeros with constant pads, before a Conv or an AveragePool");
        continue;
      }
      if (!none) {
        const size_t r = pads.size() / 2;  // NCHW planes, or NCL sequences (r = 3)
        if ((f.rank != 4 && f.rank != 3) || pads.size() != 2 * f.rank || pads[0] || pads[1] || pads[r] || pads[r + 1] || !f.pad.empty() ||
            std::any_of(pads.begin(), pads.end(), [](int64_t v) { return v < 0 || v > 64; })) {
          unsupported(n, "pads " + dims_str(pads) + ": a Pad of zeros is taken around NCHW planes or NCL sequences only (0 to 64 each side), once");
          continue;
        }
        f.pad = r == 4 ? std::vector<int64_t>{pads[2], pads[3], pads[6], pads[7]} : std::vector<int64_t>{0, pads[2], 0, pads[5]};
        f.pad_node = n.name;
      }
      f.value = n.outputs[0];
      continue;
    }
    if (op == "Identity" || op == "Flatten" || op == "Reshape" || op == "Dropout") {
      if (op == "Reshape" && f.known) {
        auto it = n.inputs.size() > 1 ? m.initializers.find(n.inputs[1]) : m.initializers.end();
        auto fv = n.inputs.size() > 1 ? folded.ints.find(n.inputs[1]) : folded.ints.end();
        if ((it == m.initializers.end() || it->second.i64.empty()) && fv == folded.ints.end()) {
          unsupported(n, "the target shape must be a constant");
          continue;
        }
        // One sample per row: [batch or -1 or 0, features], or [0, -1] (keep the batch, flatten).
        const auto& d = fv != folded.ints.end() ? fv->second : it->second.i64;
        const bool ok = d.size() == 2 && ((d[1] == f.features && d[0] >= -1) || (d[0] == 0 && d[1] == -1));
        if (!ok) {
          unsupported(n, "reshape to " + dims_str(d) + " does not keep one sample per row of " +
                             std::to_string(f.features) + " features");
          continue;
        }
      }
      if (op == "Flatten" && f.known && f.rank >= 2) {
        const OnnxAttr* ax = n.attr("axis");
        const int64_t r = static_cast<int64_t>(f.rank), axis = ax ? ax->i : 1;
        if (axis < -r || axis > r) {
          unsupported(n, "axis " + std::to_string(axis) + " is outside [" + std::to_string(-r) + ", " + std::to_string(r) + "]");
          continue;
        }
        if ((axis < 0 ? axis + r : axis) != 1) {
          unsupported(n, "axis " + std::to_string(axis) + " does not keep one sample per row (only axis 1 does)");
          continue;
        }
      }
      if (op == "Dropout") g.notes.push_back(node_ref(n) + " treated as identity (no dropout on the wafer)");
      if (op == "Flatten" || op == "Reshape") f.rank = 2;
      f.value = n.outputs[0];
      continue;
    }
    if (op == "Conv") {
      if (!f.known) { follow(n); continue; }
      std::string why = take_conv(n);
      if (!why.empty()) { unsupported(n, why); continue; }
      continue;
    }
    if (op == "MaxPool" || op == "AveragePool" || op == "GlobalAveragePool") {
      if (!f.known) { follow(n); continue; }
      std::string why = take_pool(n);
      if (!why.empty()) { unsupported(n, why); continue; }
      continue;
    }
    if (op == "Gemm" || op == "MatMul") {
      if (!f.known) { follow(n); continue; }
      if (f.pending_matmul) { unsupported(n, "a MatMul needs its bias Add before the next layer"); continue; }
      if (f.rank == 4 || (f.rank == 3 && f.dense >= 0 && g.layers[static_cast<size_t>(f.dense)].conv.on)) {
        unsupported(n, "takes a convolution's planes; flatten them first (Flatten or Reshape to [N, features])");
        continue;
      }
      DenseKernel d;
      d.name = n.name;
      boundary.emplace(f.value, static_cast<int>(g.layers.size()));
      if (branch >= 0) {
        const std::string why = branch_refusal(branch);
        if (!why.empty()) { unsupported(n, why); continue; }
        d.input = branch;
        f.features = branch == 0 ? g.in_features : g.layers[static_cast<size_t>(branch) - 1].out;
        g.notes.push_back(node_ref(n) + ": a branch, reading " +
                          (branch == 0 ? std::string("the model input") : "the output of " + g.layers[static_cast<size_t>(branch) - 1].name) +
                          " (weight streaming)");
      }
      const OnnxTensor* w = n.inputs.size() > 1 ? float_init(m, n.inputs[1], n) : nullptr;
      if (!w) { unsupported(n, "the weight (input 1) must be an initializer"); continue; }
      if (w->dims.size() != 2) { unsupported(n, "weight '" + w->name + "' has shape " + dims_str(w->dims) + "; need 2-D"); continue; }
      bool trans_b = false;
      if (op == "Gemm") {
        bool trans_a = false;
        std::string why;
        if (!flag_value(n, "transA", &trans_a, &why) || !flag_value(n, "transB", &trans_b, &why)) { unsupported(n, why); continue; }
        if (trans_a) { unsupported(n, "transA=1 transposes the activations, which a chain of layers never produces"); continue; }
        if (const OnnxAttr* a = n.attr("alpha")) d.alpha = a->f;
        if (const OnnxAttr* b = n.attr("beta")) d.beta = b->f;
        if (!std::isfinite(d.alpha) || !std::isfinite(d.beta)) { unsupported(n, "alpha and beta must be finite numbers"); continue; }
        if (d.alpha == 0) { unsupported(n, "alpha = 0 makes the weights meaningless"); continue; }
        if (!foldable(d.alpha) || (d.beta != 0 && !foldable(d.beta))) {
          unsupported(n, "alpha = " + num(d.alpha) + ", beta = " + num(d.beta) +
                             ": a scale folded into the weights must have a finite inverse (not subnormal)");
          continue;
        }
      }
      d.weight = w->name;
      d.weight_in_out = !trans_b;
      d.in = static_cast<int>(trans_b ? w->dims[1] : w->dims[0]);
      d.out = static_cast<int>(trans_b ? w->dims[0] : w->dims[1]);
      if (d.out < 1) { unsupported(n, "weight '" + w->name + "' " + dims_str(w->dims) + " has no outputs"); continue; }
      if (d.in != f.features) {
        unsupported(n, "weight '" + w->name + "' " + dims_str(w->dims) + " expects " + std::to_string(d.in) +
                           " input features, the layer before gives " + std::to_string(f.features));
        continue;
      }
      d.w.resize(static_cast<size_t>(d.in) * d.out);
      bool overflow = false;
      for (int o = 0; o < d.out; ++o) {
        for (int i = 0; i < d.in; ++i) {
          const float v = d.weight_in_out ? w->f32[static_cast<size_t>(i) * d.out + o] : w->f32[static_cast<size_t>(o) * d.in + i];
          d.w[static_cast<size_t>(o) * d.in + i] = d.alpha * v;
          overflow |= !std::isfinite(d.alpha * v);
        }
      }
      if (overflow) { unsupported(n, "alpha = " + num(d.alpha) + " times the weights overflows fp32"); continue; }
      d.b.assign(static_cast<size_t>(d.out), 0.0f);
      if (op == "Gemm" && n.inputs.size() > 2 && !n.inputs[2].empty() && d.beta == 0) {
        g.notes.push_back(node_ref(n) + ": beta = 0, so the bias has no effect: it is not trained and written back unchanged");
      } else if (op == "Gemm" && n.inputs.size() > 2 && !n.inputs[2].empty()) {
        const OnnxTensor* b = float_init(m, n.inputs[2], n);
        if (!b) { unsupported(n, "the bias (input 2) must be an initializer"); continue; }
        if (b->numel() != d.out) {
          unsupported(n, "bias '" + b->name + "' " + dims_str(b->dims) + " must have " + std::to_string(d.out) + " elements (broadcast over the batch only)");
          continue;
        }
        d.bias = b->name;
        for (int o = 0; o < d.out; ++o) d.b[static_cast<size_t>(o)] = d.beta * b->f32[static_cast<size_t>(o)];
        if (std::any_of(d.b.begin(), d.b.end(), [](float v) { return !std::isfinite(v); })) {
          unsupported(n, "beta = " + num(d.beta) + " times the bias overflows fp32");
          continue;
        }
      }
      if (d.alpha != 1 || d.beta != 1) {
        g.notes.push_back(node_ref(n) + ": alpha and beta folded into the weights (written back unfolded)");
      }
      g.layers.push_back(std::move(d));
      f = Flow{n.outputs[0], g.layers.back().out, true, static_cast<int>(g.layers.size()) - 1, false, op == "MatMul", 2};
      continue;
    }
    if ((op == "Mul" || op == "Sub") && f.known && f.dense >= 0 && !f.pending_matmul && n.inputs.size() == 2 && n.inputs[0] != n.inputs[1] &&
        !m.initializers.count(n.inputs[0]) && !m.initializers.count(n.inputs[1]) && !folded.ints.count(n.inputs[0]) &&
        !folded.ints.count(n.inputs[1])) {
      // A gated join: the flow (a layer's output) times an earlier value of the same width
      // (silu(W1 x) * (W2 x), a GLU), or their difference (either order): weight streaming's
      // rows take it.
      const bool sub = op == "Sub";
      const std::string& other = n.inputs[0] == f.value ? n.inputs[1] : n.inputs[0];
      auto it = boundary.find(other);
      if (it == boundary.end()) {
        unsupported(n, sub ? "a Sub of two values is supported as a join: a layer's output minus an earlier layer's output or input, or the reverse"
                           : "a Mul of two values is supported as a gated join: a layer's output times an earlier layer's output or input");
        continue;
      }
      DenseKernel& d = g.layers[static_cast<size_t>(f.dense)];
      const int k = it->second, width = k == 0 ? g.in_features : g.layers[static_cast<size_t>(k) - 1].out;
      std::string why;
      if (d.conv.on || g.first_conv() >= 0) why = std::string("a join (") + op + ") among convolutions is not supported yet";
      else if (d.ln.on) why = std::string("a join (") + op + ") after a LayerNorm is not supported yet";
      else if (f.residual) why = "a Mul after a residual connection; each layer output takes one join";
      else if (width != d.out) {
        why = std::string(sub ? "subtracts" : "multiplies") + " '" + other + "' (" + std::to_string(width) + " features) and the output of " + d.name +
              " (" + std::to_string(d.out) + "); a join needs the same width";
      }
      if (!why.empty()) { unsupported(n, why); continue; }
      d.residual = k;
      d.residual_node = n.name;
      d.join_mul = !sub;
      d.join_sub = !sub ? 0 : n.inputs[0] == f.value ? 1 : 2;
      g.notes.push_back(node_ref(n) + (sub ? ": a difference of the output of " + d.name + " and " : ": gated join, the output of " + d.name + " times ") +
                        (k == 0 ? std::string("the model input") : "the output of " + g.layers[static_cast<size_t>(k) - 1].name) + " (weight streaming)");
      f.residual = true;
      f.residual_raw = false;
      f.activated = true;
      f.value = n.outputs[0];
      continue;
    }
    if (op == "Add") {
      if (!f.known) { follow(n); continue; }
      if (!f.pending_matmul) {
        // A residual connection: the flow (a layer's output, activated or not) plus an earlier
        // layer's input of the same width.
        const std::string& other = n.inputs.size() > 1 ? (n.inputs[0] == f.value ? n.inputs[1] : n.inputs[0]) : "";
        auto it = boundary.find(other);
        if (it == boundary.end() || f.dense < 0) {
          unsupported(n, "an Add is supported as the bias of a MatMul, or as a residual connection: a layer's output "
                         "plus an earlier layer's input");
          continue;
        }
        DenseKernel& d = g.layers[static_cast<size_t>(f.dense)];
        const int k = it->second, width = k == 0 ? g.in_features : g.layers[static_cast<size_t>(k) - 1].out;
        // Around convolutions (ResNet's blocks): planes of a convolution's output plus those of
        // an earlier one's, of the same shape; the sum before any pooling.
        const bool src_conv = k > 0 && g.layers[static_cast<size_t>(k) - 1].conv.on;
        if (d.conv.on != src_conv || (d.conv.on && k == 0)) {
          unsupported(n, k == 0 && d.conv.on ? "a residual connection from the model input's planes is not supported yet; its source must "
                                               "be an earlier convolution's output"
                                             : "a residual connection between a convolution's planes and a dense layer's features is not "
                                               "supported; both ends must be convolutions' outputs, or both dense layers'");
          continue;
        }
        if (d.conv.on && (f.pooled || d.pool.kind != PoolParams::kNone)) {
          unsupported(n, "a residual Add after pooling; the sum is supported on a convolution's output before its pooling");
          continue;
        }
        if (d.conv.on) {
          const ConvParams& sc = g.layers[static_cast<size_t>(k)].conv;
          if (sc.c != d.conv.co || sc.h != d.conv.ho || sc.w != d.conv.wo) {
            unsupported(n, "adds '" + other + "' (" + std::to_string(sc.c) + " x " + std::to_string(sc.h) + " x " + std::to_string(sc.w) +
                               ") to the output of " + d.name + " (" + std::to_string(d.conv.co) + " x " + std::to_string(d.conv.ho) + " x " +
                               std::to_string(d.conv.wo) + "); a residual connection needs the same planes");
            continue;
          }
        }
        if (f.residual) { unsupported(n, "a second Add after a residual connection; each layer output takes one"); continue; }
        if (d.ln.on && d.ln.post) {
          unsupported(n, "a residual Add after a LayerNorm of the activated output (h + LayerNorm(act(W h + b))) is not supported yet");
          continue;
        }
        if (std::any_of(g.layers.begin(), g.layers.end(), [&](const DenseKernel& e) { return e.residual == k; })) {
          unsupported(n, "'" + other + "' already feeds a residual connection; each layer input feeds at most one");
          continue;
        }
        if (width != d.out) {
          unsupported(n, "adds '" + other + "' (" + std::to_string(width) + " features) to the output of " + d.name + " (" +
                             std::to_string(d.out) + "); a residual connection needs the same width");
          continue;
        }
        d.residual = k;
        d.residual_node = n.name;
        g.notes.push_back(node_ref(n) + ": residual connection, " + (k == 0 ? std::string("the model input") : "the input of " + g.layers[static_cast<size_t>(k)].name) +
                          " added to the output of " + d.name);
        f.residual = true;
        f.residual_raw = !f.activated && !d.ln.on;
        f.activated = true;
        f.value = n.outputs[0];
        continue;
      }
      const OnnxTensor* b = n.inputs.size() > 1 ? float_init(m, n.inputs[1], n) : nullptr;
      DenseKernel& d = g.layers.back();
      if (!b || b->numel() != d.out) {
        unsupported(n, "the bias must be an initializer of " + std::to_string(d.out) + " elements");
        continue;
      }
      d.bias = b->name;
      for (int o = 0; o < d.out; ++o) d.b[static_cast<size_t>(o)] = b->f32[static_cast<size_t>(o)];
      g.notes.push_back(node_ref(n) + " fused into " + d.name + " as its bias");
      f.pending_matmul = false;
      f.value = n.outputs[0];
      continue;
    }
    if (const ActivationDef* ad = activation_by_onnx(op); ad && n.domain.empty()) {
      if (!f.known) { follow(n); continue; }
      // max(act(a), act(b)) = act(max(a, b)) for a ReLU or LeakyReLU: after a MaxPool it is
      // taken as the convolution's activation, before the pooling.
      const bool commutes = f.pooled && !f.activated && (ad->act == Activation::kRelu || ad->act == Activation::kLeakyRelu) &&
                            g.layers[static_cast<size_t>(f.dense)].pool.kind == PoolParams::kMax;
      if (const std::string why = commutes ? "" : activation_refusal(); !why.empty()) { unsupported(n, why); continue; }
      ActParams par;
      if (ad->params) {
        std::string why;
        ActInputs in;
        in.opset = m.opset;
        in.attr = [&](const char* key) { return n.attr(key); };
        in.given = [&](size_t i) { return i < n.inputs.size() && !n.inputs[i].empty(); };
        in.input = [&](size_t i) -> const std::vector<float>* {
          if (i >= n.inputs.size()) return nullptr;
          auto it = m.initializers.find(n.inputs[i]);
          return it == m.initializers.end() ? nullptr : &it->second.f32;
        };
        par = ad->params(in, &why);
        if (!why.empty()) { unsupported(n, why); continue; }
      }
      fuse_activation(n, ad->act, par, node_ref(n));
      f.value = n.outputs[0];
      continue;
    }
    if (op == "Softmax" || op == "LogSoftmax") {
      const OnnxAttr* ax = n.attr("axis");
      const int64_t axis = ax ? ax->i : (m.opset >= 13 ? -1 : 1);
      if (axis != -1 && axis != 1) { unsupported(n, "softmax over axis " + std::to_string(axis) + "; only the feature axis"); continue; }
      g.output_softmax = true;
      softmax_node = &n;
      softmax_layers = g.layers.size();
      f.value = n.outputs[0];
      f.activated = true;
      continue;
    }
    if (op == "SoftmaxCrossEntropyLoss" || op == "NegativeLogLikelihoodLoss") {
      const bool nll = op == "NegativeLogLikelihoodLoss";
      if (n.inputs.empty() || n.inputs[0] != f.value || (nll && !g.output_softmax)) {
        unsupported(n, nll ? "needs LogSoftmax of the last layer as its input" : "needs the last layer's logits as its input");
        continue;
      }
      const OnnxAttr* red = n.attr("reduction");
      if (red && red->s != "mean") { unsupported(n, "reduction '" + red->s + "'; only mean"); continue; }
      // torch writes ignore_index = -100: no label in [0, classes) equals it, so nothing is ignored.
      if (const OnnxAttr* ig = n.attr("ignore_index"); ig && !g.layers.empty() && ig->i >= 0 && ig->i < g.layers.back().out) {
        unsupported(n, "ignore_index = " + std::to_string(ig->i) + " is a class label; ignoring a class is not supported");
        continue;
      }
      if (n.inputs.size() > 2 && !n.inputs[2].empty()) { unsupported(n, "class weights are not supported"); continue; }
      g.loss_node = n.name;
      f.value = n.outputs[0];
      continue;
    }
    unsupported(n, "op " + op + " is not in the kernel library");
  }
  if (softmax_node && g.layers.size() != softmax_layers) {
    g.unsupported.push_back({softmax_node->name, softmax_node->op_type,
                             "a softmax between layers is not supported (only after the last one, where the loss absorbs it)"});
    g.output_softmax = false;
  }
  if (g.layers.empty() && g.unsupported.empty()) {
    throw CompileError(m.path + ": the model has no Gemm or MatMul layer to compile");
  }
  if (m.outputs.empty()) throw CompileError(m.path + ": the graph has no output (a model exports at least its logits)");
  const bool loss_refused = std::any_of(m.nodes.begin(), m.nodes.end(), [](const OnnxNode& n) {
    return n.op_type == "SoftmaxCrossEntropyLoss" || n.op_type == "NegativeLogLikelihoodLoss";
  });  // then `unsupported` says why, and "has no loss" would mislead
  if (loss_option == "graph" && g.loss_node.empty() && !loss_refused) {
    throw CompileError(m.path + ": --train.loss graph, but the graph has no SoftmaxCrossEntropyLoss or NegativeLogLikelihoodLoss");
  }
  // The checks of the last layer hold only when the chain was followed to its end (after an
  // unsupported node the layers found are not all of them).
  if (f.known && !g.layers.empty() && g.layers.back().residual >= 0) {
    const DenseKernel& d = g.layers.back();
    auto it = std::find_if(m.nodes.begin(), m.nodes.end(), [&](const OnnxNode& n) { return n.name == d.residual_node; });
    g.unsupported.push_back({d.residual_node, it == m.nodes.end() ? std::string("?") : it->op_type,
                             "a residual Add into the logits; the last layer feeds softmax cross-entropy directly"});
  }
  // Every layer's output is read: by the next layer, a branch or a join.
  if (f.known && g.first_branch() >= 0) {
    for (int j = 1; j < static_cast<int>(g.layers.size()); ++j) {
      bool read = false;
      for (int l = 0; l < static_cast<int>(g.layers.size()); ++l) read = read || g.input_of(l) == j || g.layers[static_cast<size_t>(l)].residual == j;
      if (!read) {
        g.unsupported.push_back({g.layers[static_cast<size_t>(j) - 1].name, "Gemm", "its output is not used by a later layer or join"});
      }
    }
  }
  if (f.known && !g.layers.empty() && g.layers.back().conv.on) {
    g.unsupported.push_back({g.layers.back().name, "Conv", "the last layer feeds softmax cross-entropy and must be a dense layer (Gemm or MatMul)"});
  } else if (f.known && !g.layers.empty() && g.layers.back().act != Activation::kNone) {
    const std::string& act = g.layers.back().act_node;
    auto it = std::find_if(m.nodes.begin(), m.nodes.end(), [&](const OnnxNode& n) { return n.name == act; });
    const DenseKernel& d = g.layers.back();
    const bool scaled = d.act == Activation::kChain && d.act_par.base == Activation::kNone;
    g.unsupported.push_back({act, it == m.nodes.end() ? std::string("?") : it->op_type,
                             scaled ? "a scalar step of the logits (a temperature) is not supported yet; the last layer feeds softmax "
                                      "cross-entropy directly"
                                    : "the last layer feeds softmax cross-entropy and must not have an activation"});
  }
  return g;
}

}  // namespace wafersim::compiler
