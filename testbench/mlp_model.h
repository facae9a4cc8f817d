// Small fully connected ONNX models for compiler and training tests, written with the ONNX
// protobuf API the way torch.onnx.export writes nn.Linear stacks (Flatten, Gemm transB=1,
// activations), with reproducible pseudo-random weights; and synthetic datasets to train them on.
#pragma once

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tlm/dataset.h"

namespace wafersim::test {

// A Clip node's bounds (as torch exports nn.Hardtanh(-0.25, 0.5) at opset 11 and above: scalar
// initializers as its inputs 1 and 2), narrow enough that both bind on a small model's values.
inline void add_clip_bounds(onnx::GraphProto* g, onnx::NodeProto* n, const std::string& prefix) {
  for (auto [name, v] : {std::pair<const char*, float>{"min", -0.25f}, {"max", 0.5f}}) {
    auto* t = g->add_initializer();
    t->set_name(prefix + "/" + name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    t->add_float_data(v);
    n->add_input(t->name());
  }
}

struct MlpSpec {
  std::vector<int> widths = {16, 8, 6, 4};
  std::string act = "Relu";
  uint64_t seed = 7;
  int64_t opset = 13;
  // Hidden layers whose input and output widths agree add their input to their activated
  // output (h = h + act(fc(h)), an Add as torch exports it; scripts/make_model.py --residual).
  bool residual = false;
  // Layers a residual block spans: 1, h + act(fc(h)); 2, h + act(fc2(act(fc1(h)))) where fc1's
  // input and fc2's output widths agree (blocks do not overlap).
  int residual_span = 1;
  // The sum before the activation instead (h = act(fc(h) + h), scripts/make_model.py --residual
  // pre; one-layer blocks).
  bool residual_pre = false;
  // A LayerNormalization (opset 17) on each hidden layer's output, before its activation, with
  // scale and bias initializers near 1 and 0 (scripts/make_model.py --layernorm).
  bool layernorm = false;
  // The LayerNorm after the activation instead (scripts/make_model.py --layernorm post).
  bool layernorm_post = false;
  // Each hidden activation followed by * post_mul + post_add (Mul and Add of scalar constants,
  // scripts/make_model.py --post-act), where post_mul != 1 or post_add != 0.
  float post_mul = 1, post_add = 0;
  // Branches (weight streaming): each hidden layer with a second layer of the same shape reading
  // its input (scripts/make_model.py --branch): "glu", act(fc(h)) * gate(h); "glu_gate_first",
  // gate(h) * act(fc(h)) with the gate's Gemm first in the graph; "proj", act(fc(h)) + proj(h);
  // "sub", act(fc(h)) - side(h) (the side layer's output the flow: x_k - y), "sub_side_first" the
  // same with the side's Gemm first (the flow act(fc(h)): y - x_k).
  std::string branch = {};
};

inline float lcg_uniform(uint64_t* s) {  // in [-1, 1)
  *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
  return static_cast<float>((*s >> 40) & 0xffffff) / 8388608.0f - 1.0f;
}

// The test models' common parts: an ONNX model of the default domain at `opset` with an empty
// graph named `name`, and a [batch, dims...] float value.
inline onnx::GraphProto* new_test_model(onnx::ModelProto* m, int64_t opset, const std::string& name) {
  m->set_ir_version(7);
  m->set_producer_name("wafersim-test");
  auto* op = m->add_opset_import();
  op->set_domain("");
  op->set_version(opset);
  auto* g = m->mutable_graph();
  g->set_name(name);
  return g;
}

inline void batch_value(onnx::ValueInfoProto* v, const std::string& name, const std::vector<int>& dims) {
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  for (int d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

inline void write_ffn(const std::string& path, const MlpSpec& spec);

inline void write_mlp(const std::string& path, const MlpSpec& spec) {
  if (spec.branch == "ffn") return write_ffn(path, spec);
  onnx::ModelProto m;
  auto* g = new_test_model(&m, spec.opset, "mlp");
  batch_value(g->add_input(), "input", {spec.widths.front()});
  uint64_t s = spec.seed;
  auto* flat = g->add_node();
  flat->set_name("/flatten/Flatten");
  flat->set_op_type("Flatten");
  flat->add_input("input");
  flat->add_output("flat");
  std::string cur = "flat";
  const size_t L = spec.widths.size() - 1;
  std::vector<std::string> inputs;  // each layer's input value
  size_t block_end = 0;             // the first layer a new residual block may start at
  for (size_t l = 0; l < L; ++l) {
    const int in = spec.widths[l], out = spec.widths[l + 1];
    const std::string fc = "fc" + std::to_string(l + 1);
    const float scale = 1.0f / std::sqrt(static_cast<float>(in));
    auto add_init = [&](const std::string& name, std::vector<int64_t> dims, size_t n) {
      auto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::FLOAT);
      for (auto d : dims) t->add_dims(d);
      for (size_t i = 0; i < n; ++i) t->add_float_data(lcg_uniform(&s) * scale);
    };
    // A layer of this shape on this layer's input (the layer itself, or MlpSpec::branch's
    // second one): its output.
    const std::string h_in = cur;
    auto side = [&](const std::string& nm) {
      add_init(nm + ".weight", {out, in}, static_cast<size_t>(in) * out);
      add_init(nm + ".bias", {out}, static_cast<size_t>(out));
      auto* n = g->add_node();
      n->set_name("/" + nm + "/Gemm");
      n->set_op_type("Gemm");
      n->add_input(h_in);
      n->add_input(nm + ".weight");
      n->add_input(nm + ".bias");
      n->add_output("/" + nm + "/Gemm_output_0");
      auto* tb = n->add_attribute();
      tb->set_name("transB");
      tb->set_type(onnx::AttributeProto::INT);
      tb->set_i(1);
      return n->output(0);
    };
    const bool branch = !spec.branch.empty() && l + 1 < L;
    const bool sub = spec.branch == "sub" || spec.branch == "sub_side_first";
    const std::string side_name = (spec.branch == "proj" ? "proj" : sub ? "side" : "gate") + std::to_string(l + 1);
    std::string first_side;
    if (branch && (spec.branch == "glu_gate_first" || spec.branch == "sub_side_first")) first_side = side(side_name);
    inputs.push_back(cur);
    cur = side(fc);
    auto layernorm = [&] {
      const std::string nm = "norm" + std::to_string(l + 1);
      add_init(nm + ".weight", {out}, static_cast<size_t>(out));  // scale * u(-1, 1), then moved to near 1
      for (auto& v : *g->mutable_initializer(g->initializer_size() - 1)->mutable_float_data()) v = 1.0f + 0.25f * v / scale;
      add_init(nm + ".bias", {out}, static_cast<size_t>(out));
      auto* ln = g->add_node();
      ln->set_name("/" + nm + "/LayerNormalization");
      ln->set_op_type("LayerNormalization");
      ln->add_input(cur);
      ln->add_input(nm + ".weight");
      ln->add_input(nm + ".bias");
      cur = "/" + nm + "/LayerNormalization_output_0";
      ln->add_output(cur);
      auto* ax = ln->add_attribute();
      ax->set_name("axis");
      ax->set_type(onnx::AttributeProto::INT);
      ax->set_i(-1);
    };
    if (l + 1 < L && spec.layernorm && !spec.layernorm_post) layernorm();
    // A residual block ending at layer l adds its input here (before the activation: pre) or
    // after the activation (post).
    auto residual_add = [&] {
      const size_t span = static_cast<size_t>(spec.residual_span), first = l + 1 >= span ? l + 1 - span : L;
      if (spec.residual && first < L && first >= block_end && spec.widths[first] == out) {
        block_end = l + 1;
        auto* r = g->add_node();
        r->set_name("/Add_" + std::to_string(l + 1));
        r->set_op_type("Add");
        r->add_input(spec.residual_pre ? cur : inputs[first]);  // torch's order: fc(h) + h, or h + act(fc(h))
        r->add_input(spec.residual_pre ? inputs[first] : cur);
        cur = "/Add_" + std::to_string(l + 1) + "_output_0";
        r->add_output(cur);
      }
    };
    if (l + 1 < L && spec.residual_pre) residual_add();
    if (l + 1 < L && (spec.act == "Gelu" || spec.act == "GeluTanh")) {
      // GELU as torch 1.13 exports it (scripts/make_model.py --act gelu, gelu_tanh), its
      // constants as scalar initializers.
      const std::string pre = "/act" + std::to_string(l + 1) + "/";
      auto scalar = [&](const std::string& name, float v) {
        auto* t = g->add_initializer();
        t->set_name(pre + name);
        t->set_data_type(onnx::TensorProto::FLOAT);
        t->add_float_data(v);
        return pre + name;
      };
      int k = 0;
      auto op = [&](const std::string& type, const std::string& x, const std::string& y) {
        auto* o = g->add_node();
        o->set_name(pre + type + "_" + std::to_string(k));
        o->set_op_type(type);
        o->add_input(x);
        if (!y.empty()) o->add_input(y);
        o->add_output(pre + type + "_" + std::to_string(k++) + "_output_0");
        return o->output(0);
      };
      const std::string x = cur;
      if (spec.act == "Gelu") {
        const std::string e = op("Add", op("Erf", op("Div", x, scalar("sqrt2", 1.41421354f)), ""), scalar("one", 1.0f));
        cur = op("Mul", op("Mul", x, e), scalar("half", 0.5f));
      } else {
        const std::string cube = op("Mul", x, op("Mul", x, x));
        const std::string inner = op("Add", x, op("Mul", scalar("k", 0.044715f), cube));
        const std::string t = op("Add", scalar("one", 1.0f), op("Tanh", op("Mul", scalar("c", 0.797884583f), inner), ""));
        cur = op("Mul", scalar("half", 0.5f), op("Mul", x, t));
      }
    } else if (l + 1 < L) {
      auto* a = g->add_node();
      a->set_name("/act" + std::to_string(l + 1) + "/" + spec.act);
      a->set_op_type(spec.act);
      a->add_input(cur);
      if (spec.act == "Clip") add_clip_bounds(g, a, "/act" + std::to_string(l + 1));
      cur = "/act" + std::to_string(l + 1) + "/" + spec.act + "_output_0";
      a->add_output(cur);
    }
    if (l + 1 < L && (spec.post_mul != 1.0f || spec.post_add != 0.0f)) {
      for (const auto& [op, v] : {std::pair<const char*, float>{"Mul", spec.post_mul}, {"Add", spec.post_add}}) {
        const std::string nm = "/post" + std::to_string(l + 1) + "/" + op;
        auto* t = g->add_initializer();
        t->set_name(nm + "_c");
        t->set_data_type(onnx::TensorProto::FLOAT);
        t->add_float_data(v);
        auto* o = g->add_node();
        o->set_name(nm);
        o->set_op_type(op);
        o->add_input(cur);
        o->add_input(nm + "_c");
        cur = nm + "_output_0";
        o->add_output(cur);
      }
    }
    if (l + 1 < L && spec.layernorm && spec.layernorm_post) layernorm();
    if (l + 1 < L && !spec.residual_pre) residual_add();
    if (branch) {
      const std::string other = first_side.empty() ? side(side_name) : first_side;
      auto* j = g->add_node();
      j->set_name("/join" + std::to_string(l + 1));
      j->set_op_type(spec.branch == "proj" ? "Add" : sub ? "Sub" : "Mul");
      // torch's order: the operand written first (a difference: always act(fc(h)) - side(h)).
      j->add_input(first_side.empty() || sub ? cur : other);
      j->add_input(first_side.empty() || sub ? other : cur);
      cur = "/join" + std::to_string(l + 1) + "_output_0";
      j->add_output(cur);
    }
  }
  g->mutable_node(g->node_size() - 1)->set_output(0, "logits");
  batch_value(g->add_output(), "logits", {spec.widths.back()});
  std::ofstream f(path, std::ios::binary);
  m.SerializeToOstream(&f);
}

// MlpSpec::branch "ffn" (scripts/make_model.py --branch ffn): widths [in, d, h1, ..., classes]
// give fc1 (in -> d, the activation), per hidden width hK a transformer's gated feed-forward
// block with its residual connection, h = h + downK(act(upK(h)) * gateK(h)), then head (d ->
// classes); the activation an ONNX op (Tanh, Relu, Sigmoid).
inline void write_ffn(const std::string& path, const MlpSpec& spec) {
  onnx::ModelProto m;
  auto* g = new_test_model(&m, spec.opset, "ffn");
  batch_value(g->add_input(), "input", {spec.widths.front()});
  uint64_t s = spec.seed;
  auto node = [&](const std::string& type, const std::string& name, std::vector<std::string> in) {
    auto* n = g->add_node();
    n->set_name(name);
    n->set_op_type(type);
    for (const auto& i : in) n->add_input(i);
    n->add_output(name + "_output_0");
    return n;
  };
  auto gemm = [&](const std::string& nm, const std::string& in, int fin, int fout) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(fin));
    for (const auto& [suffix, n] : {std::pair<std::string, int>{".weight", fin * fout}, {".bias", fout}}) {
      auto* t = g->add_initializer();
      t->set_name(nm + suffix);
      t->set_data_type(onnx::TensorProto::FLOAT);
      if (suffix == ".weight") t->add_dims(fout), t->add_dims(fin);
      else t->add_dims(fout);
      for (int i = 0; i < n; ++i) t->add_float_data(lcg_uniform(&s) * scale);
    }
    auto* n = node("Gemm", "/" + nm + "/Gemm", {in, nm + ".weight", nm + ".bias"});
    auto* tb = n->add_attribute();
    tb->set_name("transB");
    tb->set_type(onnx::AttributeProto::INT);
    tb->set_i(1);
    return n->output(0);
  };
  const std::vector<int>& w = spec.widths;
  const int d = w[1];
  std::string h = node(spec.act, "/act1/" + spec.act, {gemm("fc1", "input", w[0], d)})->output(0);
  for (size_t k = 2; k + 1 < w.size(); ++k) {
    const std::string K = std::to_string(k - 1);
    const std::string a = node(spec.act, "/act_up" + K + "/" + spec.act, {gemm("up" + K, h, d, w[k])})->output(0);
    const std::string gm = node("Mul", "/Mul_" + K, {a, gemm("gate" + K, h, d, w[k])})->output(0);
    h = node("Add", "/Add_" + K, {h, gemm("down" + K, gm, w[k], d)})->output(0);
  }
  gemm("head", h, d, w.back());
  g->mutable_node(g->node_size() - 1)->set_output(0, "logits");  // the head's Gemm: the logits
  batch_value(g->add_output(), "logits", {w.back()});
  std::ofstream f(path, std::ios::binary);
  m.SerializeToOstream(&f);
}

// A small CNN as torch.onnx.export writes nn.Sequential(Conv2d, act, pool, ..., Flatten,
// Linear, ...) (scripts/make_model.py --conv): NCHW input "input" [batch, c, h, w], per conv
// layer a Conv (conv1, conv2, ...; weight [co, c, k, k], bias) with strides and pads, the
// activation, and a MaxPool / AveragePool (k x k, stride k) or GlobalAveragePool; then Flatten
// and Gemm layers to the widths of `dense` (the first from the planes), activations between.
struct ConvLayerSpec {
  int co = 4, k = 3, stride = 1, pad = 0;
  std::string pool;  // "", "MaxPool", "AveragePool", "GlobalAveragePool"
  int pool_k = 2;
  int pool_stride = 0;  // 0: pool_k (windows side by side); below pool_k they overlap
  int pool_pad = 0;     // on every side
  bool count_pad = false;  // AveragePool's count_include_pad
  bool ceil = false;       // ceil_mode
  // A residual connection: this layer's output (same planes) adds the input of conv layer
  // res_from, before the activation (res_pre: ResNet's act(conv(.) + x)) or after it; then the
  // pooling.
  int res_from = -1;
  bool res_pre = false;
};
struct CnnSpec {
  int c = 1, h = 8, w = 8;
  std::vector<ConvLayerSpec> convs;
  std::vector<int> dense = {4};  // widths after the planes' features
  std::string act = "Relu";
  uint64_t seed = 5;
  int opset = 13;  // 14 for HardSwish
  int features() const { return c * h * w; }
};

// Residual blocks of two 3 x 3 convolutions (padded: they keep the planes) after a stem
// convolution over 2 x h x w: ResNet's act(conv(act(conv(x))) + x) and a MaxPool after it, the
// sum after the activation and an AveragePool, then ResNet's order again (a block whose input
// is the sum before it) and GlobalAveragePool; `act` between.
inline CnnSpec residual_conv_spec(int h, int w, const std::string& act) {
  CnnSpec spec;
  spec.c = 2, spec.h = h, spec.w = w;
  spec.act = act;
  ConvLayerSpec plain{4, 3, 1, 1, ""}, b{4, 3, 1, 1, "MaxPool", 2}, d{4, 3, 1, 1, "AveragePool", 2}, f{4, 3, 1, 1, "GlobalAveragePool"};
  const ConvLayerSpec stem = plain, a = plain, c = plain, e = plain;
  b.res_from = 1, b.res_pre = true;
  d.res_from = 3;
  f.res_from = 5, f.res_pre = true;
  spec.convs = {stem, a, b, c, d, e, f};
  spec.dense = {3};
  return spec;
}

// Two convolutions with overlapping pooling windows (3 x 3, stride 2): MaxPool, then
// AveragePool, then dense layers of 6 and 3, over 2 x h x w.
inline CnnSpec overlap_pool_spec(int h, int w) {
  CnnSpec spec;
  spec.c = 2, spec.h = h, spec.w = w;
  ConvLayerSpec a{4, 3, 1, 1, "MaxPool", 3}, b{5, 3, 1, 1, "AveragePool", 3};
  a.pool_stride = b.pool_stride = 2;
  spec.convs = {a, b};
  spec.dense = {6, 3};
  return spec;
}

// Three convolutions with padded pooling, as ResNet's stem and torch's AvgPool2d(padding) pool:
// MaxPool 3 x 3 stride 2 pad 1; AveragePool 3 x 3 stride 1 pad 1 without the pads counted (each
// window divides by its inputs); AveragePool 2 x 2 stride 2 pad 1 with them counted; then
// dense layers of 6 and 3, over 2 x h x w.
inline CnnSpec padded_pool_spec(int h, int w) {
  CnnSpec spec;
  spec.c = 2, spec.h = h, spec.w = w;
  ConvLayerSpec a{4, 3, 1, 1, "MaxPool", 3}, b{3, 3, 1, 1, "AveragePool", 3}, c{4, 3, 1, 1, "AveragePool", 2};
  a.pool_stride = 2, b.pool_stride = 1, c.pool_stride = 2;
  a.pool_pad = b.pool_pad = c.pool_pad = 1;
  c.count_pad = true;
  spec.convs = {a, b, c};
  spec.dense = {6, 3};
  return spec;
}

// Activations whose derivative is taken at z after convolutions (the roots keep z):
// HardSwish (an ONNX op from opset 14) before a MaxPool (y taken again from z backward), an
// AveragePool, and no pooling; then dense layers of 6 and 3, over 2 x h x w.
inline CnnSpec pre_act_conv_spec(int h, int w) {
  CnnSpec spec;
  spec.c = 2, spec.h = h, spec.w = w;
  spec.convs = {{4, 3, 1, 1, "MaxPool", 2}, {3, 3, 1, 1, "AveragePool", 2}, {4, 3, 1, 1, "", 2}};
  spec.dense = {6, 3};
  spec.act = "HardSwish";
  spec.opset = 14;
  return spec;
}

// ceil_mode pooling, the last windows running past the plane: MaxPool 2 x 2 stride 2 over 13
// rows (7 windows), AveragePool 2 x 2 stride 2 counting its pads and AveragePool 3 x 3 stride 2
// pad 1 not counting them, each over planes that leave a last window short.
inline CnnSpec ceil_pool_spec() {
  CnnSpec spec;
  spec.c = 2, spec.h = 13, spec.w = 11;
  ConvLayerSpec a{4, 3, 1, 1, "MaxPool", 2}, b{3, 3, 1, 1, "AveragePool", 2}, c{4, 3, 1, 1, "AveragePool", 3};
  a.pool_stride = b.pool_stride = c.pool_stride = 2;
  a.ceil = b.ceil = c.ceil = true;
  b.count_pad = true;
  c.pool_pad = 1;
  spec.convs = {a, b, c};
  spec.dense = {6, 3};
  return spec;
}

inline void write_cnn(const std::string& path, const CnnSpec& spec) {
  onnx::ModelProto m;
  auto* g = new_test_model(&m, spec.opset, "cnn");
  batch_value(g->add_input(), "input", {spec.c, spec.h, spec.w});
  uint64_t s = spec.seed;
  auto add_init = [&](const std::string& name, std::vector<int64_t> dims, float scale) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    size_t n = 1;
    for (auto d : dims) t->add_dims(d), n *= static_cast<size_t>(d);
    for (size_t i = 0; i < n; ++i) t->add_float_data(lcg_uniform(&s) * scale);
  };
  auto ints = [](onnx::NodeProto* n, const std::string& key, std::vector<int64_t> v) {
    auto* a = n->add_attribute();
    a->set_name(key);
    a->set_type(onnx::AttributeProto::INTS);
    for (auto x : v) a->add_ints(x);
  };
  int k = 0;
  auto node = [&](const std::string& type, std::vector<std::string> ins) {
    auto* n = g->add_node();
    n->set_name("/" + type + "_" + std::to_string(k));
    n->set_op_type(type);
    for (auto& i : ins) n->add_input(i);
    n->add_output("/" + type + "_" + std::to_string(k++) + "_output_0");
    return n;
  };
  std::string cur = "input";
  int c = spec.c, h = spec.h, w = spec.w;
  std::vector<std::string> conv_in;
  for (size_t l = 0; l < spec.convs.size(); ++l) {
    const ConvLayerSpec& cv = spec.convs[l];
    conv_in.push_back(cur);
    auto residual_add = [&] {
      cur = node("Add", {cur, conv_in[static_cast<size_t>(cv.res_from)]})->output(0);
    };
    const std::string name = "conv" + std::to_string(l + 1);
    const float scale = 1.0f / std::sqrt(static_cast<float>(c * cv.k * cv.k));
    add_init(name + ".weight", {cv.co, c, cv.k, cv.k}, scale);
    add_init(name + ".bias", {cv.co}, scale);
    auto* n = node("Conv", {cur, name + ".weight", name + ".bias"});
    ints(n, "kernel_shape", {cv.k, cv.k});
    ints(n, "strides", {cv.stride, cv.stride});
    ints(n, "pads", {cv.pad, cv.pad, cv.pad, cv.pad});
    ints(n, "dilations", {1, 1});
    cur = n->output(0);
    c = cv.co, h = (h + 2 * cv.pad - cv.k) / cv.stride + 1, w = (w + 2 * cv.pad - cv.k) / cv.stride + 1;
    if (cv.res_from >= 0 && cv.res_pre) residual_add();
    auto* an = node(spec.act, {cur});
    if (spec.act == "Clip") add_clip_bounds(g, an, "/clip" + std::to_string(l + 1));
    cur = an->output(0);
    if (cv.res_from >= 0 && !cv.res_pre) residual_add();
    if (cv.pool == "GlobalAveragePool") {
      cur = node(cv.pool, {cur})->output(0);
      h = w = 1;
    } else if (!cv.pool.empty()) {
      auto* p = node(cv.pool, {cur});
      ints(p, "kernel_shape", {cv.pool_k, cv.pool_k});
      const int ps = cv.pool_stride > 0 ? cv.pool_stride : cv.pool_k;
      ints(p, "strides", {ps, ps});
      const int pp = cv.pool_pad;
      ints(p, "pads", {pp, pp, pp, pp});
      auto flag = [&](const char* key) {
        auto* a = p->add_attribute();
        a->set_name(key);
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(1);
      };
      if (cv.count_pad) flag("count_include_pad");
      if (cv.ceil) flag("ceil_mode");
      cur = p->output(0);
      auto windows = [&](int n) {  // torch's rule
        const int span = n + 2 * pp - cv.pool_k;
        int out = span / ps + 1;
        if (cv.ceil && span % ps != 0 && out * ps < n + pp) ++out;
        return out;
      };
      h = windows(h), w = windows(w);
    }
  }
  auto* f = node("Flatten", {cur});
  auto* ax = f->add_attribute();
  ax->set_name("axis");
  ax->set_type(onnx::AttributeProto::INT);
  ax->set_i(1);
  cur = f->output(0);
  int width = c * h * w;
  for (size_t l = 0; l < spec.dense.size(); ++l) {
    const std::string fc = "fc" + std::to_string(l + 1);
    const int out = spec.dense[l];
    const float scale = 1.0f / std::sqrt(static_cast<float>(width));
    add_init(fc + ".weight", {out, width}, scale);
    add_init(fc + ".bias", {out}, scale);
    auto* n = node("Gemm", {cur, fc + ".weight", fc + ".bias"});
    auto* tb = n->add_attribute();
    tb->set_name("transB");
    tb->set_type(onnx::AttributeProto::INT);
    tb->set_i(1);
    cur = n->output(0);
    if (l + 1 < spec.dense.size()) {
      auto* an = node(spec.act, {cur});
      if (spec.act == "Clip") add_clip_bounds(g, an, "/clipd" + std::to_string(l + 1));
      cur = an->output(0);
    }
    width = out;
  }
  g->mutable_node(g->node_size() - 1)->set_output(0, "logits");
  batch_value(g->add_output(), "logits", {width});
  std::ofstream fo(path, std::ios::binary);
  m.SerializeToOstream(&fo);
}

// `count` samples of `features` values in 0..255 whose label depends on them (so a model can learn).
inline tlm::Dataset synthetic_dataset(size_t count, size_t features, int classes, uint64_t seed) {
  tlm::Dataset d;
  d.count = count;
  d.features = features;
  d.classes = classes;
  uint64_t s = seed;
  for (size_t i = 0; i < count; ++i) {
    const int label = static_cast<int>(i % static_cast<size_t>(classes));
    for (size_t k = 0; k < features; ++k) {
      const float base = (k % static_cast<size_t>(classes)) == static_cast<size_t>(label) ? 180.0f : 60.0f;
      d.x.push_back(std::max(0.0f, std::min(255.0f, base + 50.0f * lcg_uniform(&s))));
    }
    d.labels.push_back(label);
  }
  return d;
}

}  // namespace wafersim::test
