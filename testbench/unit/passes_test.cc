// The graph IR's rewrite passes (compiler/passes/, docs/graph-compiler.md step 2) on hand-built
// graphs: each pattern as torch 1.13 exports it is rewritten, a near miss of it is left alone,
// the IR's invariants hold after every pass, and on the dense-chain models the rewritten graph
// holds exactly the kernel graph's layers. The torch exports themselves (opsets 11-17) are the
// `graph_import` test's (scripts/test_graph_import.py).
#include <gtest/gtest.h>

#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/kernel_graph.h"
#include "compiler/onnx_model.h"
#include "compiler/passes/passes.h"
#include "mlp_model.h"
#include "test_support.h"

namespace wafersim::test {
namespace {

using compiler::OnnxAttr;
using compiler::OnnxTensor;
namespace ir = compiler::ir;
namespace passes = compiler::passes;

OnnxAttr I(int64_t v) { return ir::attr_int(v); }
OnnxAttr Is(std::vector<int64_t> v) { return ir::attr_ints(std::move(v)); }
OnnxAttr F(float v) { return ir::attr_float(v); }

// A graph written op by op, as an importer would leave it.
class Builder {
 public:
  int input(const std::string& name, std::vector<int64_t> shape) {
    const int t = tensor(name, ir::TensorKind::kInput, std::move(shape));
    m_g.inputs.push_back(t);
    return t;
  }
  int param(const std::string& name, std::vector<int64_t> shape) {
    OnnxTensor d;
    d.elem_type = compiler::kOnnxFloat;
    d.dims = shape;
    d.f32.assign(static_cast<size_t>(d.numel()), 0.25f);
    return data(name, ir::TensorKind::kParameter, std::move(d));
  }
  int scalar(float v) {
    OnnxTensor d;
    d.elem_type = compiler::kOnnxFloat;
    d.f32 = {v};
    return data("c" + std::to_string(m_g.tensors.size()), ir::TensorKind::kConstant, std::move(d));
  }
  int ints(std::vector<int64_t> v) {
    OnnxTensor d;
    d.elem_type = compiler::kOnnxInt64;
    d.dims = {static_cast<int64_t>(v.size())};
    d.i64 = std::move(v);
    return data("i" + std::to_string(m_g.tensors.size()), ir::TensorKind::kConstant, std::move(d));
  }
  int int_scalar(int64_t v) {
    const int t = ints({v});
    m_store.back().dims.clear();
    m_g.tensors[static_cast<size_t>(t)].shape.clear();
    return t;
  }
  // An op with one output; its shape from the IR's rule where it has one.
  int op(const std::string& kind, std::vector<int> in, std::map<std::string, OnnxAttr> attrs = {}) {
    ir::Op o;
    o.kind = kind;
    o.inputs = std::move(in);
    o.attrs = std::move(attrs);
    o.sources = {"/n" + std::to_string(m_g.ops.size()) + "/" + kind};
    const int t = tensor(o.sources[0] + "_output_0", ir::TensorKind::kValue, {});
    m_g.tensors[static_cast<size_t>(t)].shape_known = false;
    o.outputs = {t};
    m_g.ops.push_back(o);
    index();
    std::vector<int64_t> s;
    if (ir::infer_output_shape(m_g, m_g.ops.back(), 0, &s)) {
      m_g.tensors[static_cast<size_t>(t)].shape = s;
      m_g.tensors[static_cast<size_t>(t)].shape_known = true;
    }
    return t;
  }
  ir::Graph done(std::vector<int> outputs) {
    m_g.outputs = std::move(outputs);
    index();
    ir::verify(m_g);
    return m_g;
  }

 private:
  int tensor(const std::string& name, ir::TensorKind kind, std::vector<int64_t> shape) {
    ir::Tensor t;
    t.name = name;
    t.kind = kind;
    t.elem_type = compiler::kOnnxFloat;
    t.shape = std::move(shape);
    t.shape_known = true;
    m_g.tensors.push_back(t);
    return m_g.by_name[name] = static_cast<int>(m_g.tensors.size()) - 1;
  }
  int data(const std::string& name, ir::TensorKind kind, OnnxTensor d) {
    d.name = name;
    m_store.push_back(std::move(d));
    const int t = tensor(name, kind, m_store.back().dims);
    m_g.tensors[static_cast<size_t>(t)].data = &m_store.back();
    m_g.tensors[static_cast<size_t>(t)].elem_type = m_store.back().elem_type;
    return t;
  }
  // Producers and consumers from the ops (Editor::finish would also drop the constants no op
  // reads yet).
  void index() {
    for (ir::Tensor& t : m_g.tensors) {
      t.consumers.clear();
      t.producer = -1;
    }
    for (size_t i = 0; i < m_g.ops.size(); ++i) {
      for (int t : m_g.ops[i].inputs) {
        auto& c = m_g.tensors[static_cast<size_t>(t)].consumers;
        if (c.empty() || c.back() != static_cast<int>(i)) c.push_back(static_cast<int>(i));
      }
      for (int t : m_g.ops[i].outputs) m_g.tensors[static_cast<size_t>(t)].producer = static_cast<int>(i);
    }
  }

  ir::Graph m_g;
  std::deque<OnnxTensor> m_store;  // stable addresses
};

std::vector<std::string> kinds(const ir::Graph& g) {
  std::vector<std::string> k;
  for (const ir::Op& o : g.ops) k.push_back(o.kind);
  return k;
}

using Kinds = std::vector<std::string>;

const ir::Tensor& out_of(const ir::Graph& g, size_t op) { return g.tensors[static_cast<size_t>(g.ops[op].outputs[0])]; }

// torch's multi-head reshape: [S, N, D] -> [S, N x heads, D / heads] from Shape arithmetic.
TEST(Passes, FoldConstantsGivesTheShapesTorchComputes) {
  Builder b;
  const int x = b.input("x", {6, -1, 16});
  const int shape = b.op("Shape", {x});
  const int n = b.op("Gather", {shape, b.int_scalar(1)});
  const int heads = b.op("Mul", {n, b.int_scalar(2)});
  const int d = b.op("Div", {b.op("Gather", {shape, b.int_scalar(2)}), b.int_scalar(2)});
  const int target = b.op("Concat", {b.op("Unsqueeze", {b.int_scalar(6)}, {{"axes", Is({0})}}),
                                     b.op("Unsqueeze", {heads}, {{"axes", Is({0})}}), b.op("Unsqueeze", {d}, {{"axes", Is({0})}})},
                          {{"axis", I(0)}});
  const int r = b.op("Reshape", {x, target});
  ir::Graph g = b.done({b.op("Transpose", {r}, {{"perm", Is({1, 0, 2})}})});
  EXPECT_FALSE(g.tensors[static_cast<size_t>(r)].shape_known) << "the target is computed";
  std::vector<std::string> log;
  g = passes::run_passes(g, &log);
  EXPECT_EQ(kinds(g), (Kinds{"Reshape", "Transpose"}));
  EXPECT_EQ(out_of(g, 0).shape, (std::vector<int64_t>{6, -2, 8}));
  EXPECT_EQ(ir::shape_str(out_of(g, 1).shape), "[2N, 6, 8]");
  const ir::Tensor& t = g.tensors[static_cast<size_t>(g.ops[0].inputs[1])];
  EXPECT_EQ(t.kind, ir::TensorKind::kConstant);
  EXPECT_EQ(t.batch_multiple, (std::vector<int64_t>{0, 2, 0}));
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log[0].rfind("fold_constants: ", 0), 0u) << log[0];
}

TEST(Passes, FoldingLeavesParametersAndTheBatchAlone) {
  Builder b;
  const int x = b.input("x", {-1, 8});
  const int w = b.param("w", {4, 8});
  const int wt = b.op("Transpose", {w}, {{"perm", Is({1, 0})}});  // trained: not a constant
  const int n = b.op("Gather", {b.op("Shape", {x}), b.int_scalar(0)});
  const int cast = b.op("Cast", {n}, {{"to", I(1)}});  // N as a float: unknown here
  ir::Graph g = b.done({b.op("MatMul", {x, wt}), cast});
  g = passes::run_passes(g);
  EXPECT_EQ(kinds(g), (Kinds{"Transpose", "Cast", "MatMul"}));
  EXPECT_EQ(g.tensors[static_cast<size_t>(g.ops[1].inputs[0])].batch_multiple, (std::vector<int64_t>{1}));
}

// The decomposed form (torch below opset 17) and opset 17's LayerNormalization.
TEST(Passes, LayerNormFromBothForms) {
  auto decomposed = [](float power, bool scale) {
    Builder b;
    const int x = b.input("x", {-1, 6, 16});
    const int mean = b.op("ReduceMean", {x}, {{"axes", Is({-1})}});
    const int d = b.op("Sub", {x, mean});
    const int var = b.op("ReduceMean", {b.op("Pow", {d, b.scalar(power)})}, {{"axes", Is({-1})}});
    int y = b.op("Div", {d, b.op("Sqrt", {b.op("Add", {var, b.scalar(1e-5f)})})});
    if (scale) y = b.op("Add", {b.op("Mul", {y, b.param("g", {16})}), b.param("beta", {16})});
    return passes::run_passes(b.done({b.op("Relu", {y})}));
  };
  ir::Graph g = decomposed(2, true);
  ASSERT_EQ(kinds(g), (Kinds{"LayerNorm", "Relu"}));
  const ir::Op& ln = g.ops[0];
  EXPECT_EQ(ln.attr("axis")->i, -1);
  EXPECT_FLOAT_EQ(ln.attr("epsilon")->f, 1e-5f);
  EXPECT_EQ(g.tensors[static_cast<size_t>(ln.inputs[1])].name, "g");
  EXPECT_EQ(g.tensors[static_cast<size_t>(ln.inputs[2])].name, "beta");
  EXPECT_EQ(ln.sources.size(), 9u) << "every node it came from";
  EXPECT_EQ(kinds(decomposed(2, false)), (Kinds{"LayerNorm", "Relu"}));
  EXPECT_EQ(decomposed(3, false).ops.size(), 8u) << "a cube is no variance";

  Builder b;
  const int x = b.input("x", {-1, 6, 16});
  ir::Graph o = passes::run_passes(b.done({b.op("LayerNormalization", {x, b.param("g", {16}), b.param("beta", {16})},
                                                {{"axis", I(2)}, {"epsilon", F(1e-6f)}})}));
  ASSERT_EQ(kinds(o), (Kinds{"LayerNorm"}));
  EXPECT_EQ(o.ops[0].attr("axis")->i, -1) << "axis 2 of rank 3, counted from the end";
  EXPECT_FLOAT_EQ(o.ops[0].attr("epsilon")->f, 1e-6f);
}

TEST(Passes, GeluFromItsErfAndTanhForms) {
  auto erf_form = [](float root2) {
    Builder b;
    const int x = b.input("x", {-1, 8});
    const int a = b.op("Add", {b.op("Erf", {b.op("Div", {x, b.scalar(root2)})}), b.scalar(1)});
    return passes::run_passes(b.done({b.op("Mul", {b.op("Mul", {x, a}), b.scalar(0.5f)})}));
  };
  ir::Graph g = erf_form(1.4142135f);
  ASSERT_EQ(kinds(g), (Kinds{"Gelu"}));
  EXPECT_EQ(g.ops[0].attr("approximate")->s, "none");
  EXPECT_EQ(g.tensors[static_cast<size_t>(g.ops[0].inputs[0])].name, "x");
  EXPECT_EQ(erf_form(1.5f).ops.size(), 5u) << "not sqrt 2: not GELU";

  // The tanh form as torch exports gelu(approximate='tanh'): x * (x * x), constants first.
  Builder b;
  const int x = b.input("x", {-1, 8});
  const int cube = b.op("Mul", {x, b.op("Mul", {x, x})});
  const int inner = b.op("Mul", {b.scalar(0.7978845834732056f), b.op("Add", {x, b.op("Mul", {b.scalar(0.044715f), cube})})});
  const int a = b.op("Add", {b.scalar(1), b.op("Tanh", {inner})});
  ir::Graph t = passes::run_passes(b.done({b.op("Mul", {b.scalar(0.5f), b.op("Mul", {x, a})})}));
  ASSERT_EQ(kinds(t), (Kinds{"Gelu"}));
  EXPECT_EQ(t.ops[0].attr("approximate")->s, "tanh");
  EXPECT_EQ(t.ops[0].sources.size(), 9u);
}

// The activations torch exports as patterns (fuse_activations): SiLU and HardSwish (with its
// HardSigmoid's alpha and beta), Mish, Softsign; and near misses (another operand, a value read
// outside the pattern, a 2 for the 1) left as they are.
TEST(Passes, ActivationPatternsBecomeOneOpEach) {
  auto one = [](const std::function<int(Builder&, int)>& f) {
    Builder b;
    const int x = b.input("x", {-1, 8});
    return passes::run_passes(b.done({f(b, x)}));
  };
  EXPECT_EQ(kinds(one([](Builder& b, int x) { return b.op("Mul", {x, b.op("Sigmoid", {x})}); })), (Kinds{"Silu"}));
  EXPECT_EQ(kinds(one([](Builder& b, int x) { return b.op("Mul", {b.op("Sigmoid", {x}), x}); })), (Kinds{"Silu"}));
  ir::Graph h = one([](Builder& b, int x) { return b.op("Mul", {x, b.op("HardSigmoid", {x}, {{"alpha", F(0.25f)}})}); });
  ASSERT_EQ(kinds(h), (Kinds{"HardSwish"}));
  EXPECT_FLOAT_EQ(h.ops[0].attr("alpha")->f, 0.25f);
  ir::Graph m = one([](Builder& b, int x) { return b.op("Mul", {x, b.op("Tanh", {b.op("Softplus", {x})})}); });
  ASSERT_EQ(kinds(m), (Kinds{"Mish"}));
  EXPECT_EQ(m.ops[0].sources.size(), 3u);
  EXPECT_EQ(kinds(one([](Builder& b, int x) { return b.op("Div", {x, b.op("Add", {b.scalar(1), b.op("Abs", {x})})}); })), (Kinds{"Softsign"}));
  // Near misses.
  EXPECT_EQ(kinds(one([](Builder& b, int x) { return b.op("Mul", {b.op("Relu", {x}), b.op("Sigmoid", {x})}); })),
            (Kinds{"Relu", "Sigmoid", "Mul"}));
  EXPECT_EQ(kinds(one([](Builder& b, int x) { return b.op("Div", {x, b.op("Add", {b.scalar(2), b.op("Abs", {x})})}); })),
            (Kinds{"Abs", "Add", "Div"}));
  Builder b;
  const int x = b.input("x", {-1, 8});
  const int s = b.op("Sigmoid", {x});
  ir::Graph two = passes::run_passes(b.done({b.op("Mul", {x, s}), s}));  // the sigmoid is an output too
  EXPECT_EQ(kinds(two), (Kinds{"Sigmoid", "Mul"}));
  // After a dense layer the fused activation is the Dense op's.
  Builder d;
  const int in = d.input("x", {-1, 16});
  const int z = d.op("Gemm", {in, d.param("w", {8, 16}), d.param("b", {8})}, {{"transB", I(1)}});
  ir::Graph dense = passes::run_passes(d.done({d.op("Mul", {z, d.op("Sigmoid", {z})})}));
  ASSERT_EQ(kinds(dense), (Kinds{"Dense"}));
  EXPECT_EQ(dense.ops[0].attr("activation")->s, "silu");
}

TEST(Passes, DenseTakesItsBiasAndActivation) {
  Builder b;
  const int x = b.input("x", {-1, 6, 16});
  const int h = b.op("Relu", {b.op("Add", {b.op("MatMul", {x, b.param("w1", {16, 32})}), b.param("b1", {32})})});
  const int g2 = b.op("Gemm", {b.op("Flatten", {h}), b.param("w2", {4, 192}), b.param("b2", {4})}, {{"transB", I(1)}});
  const int leaky = b.op("LeakyRelu", {g2}, {{"alpha", F(0.1f)}});
  const int m3 = b.op("MatMul", {leaky, b.param("w3", {4, 4})});  // two readers: no activation fused
  ir::Graph g = passes::run_passes(b.done({b.op("Sigmoid", {m3}), m3}));
  ASSERT_EQ(kinds(g), (Kinds{"Dense", "Flatten", "Dense", "Dense", "Sigmoid"}));
  EXPECT_EQ(g.ops[0].attr("activation")->s, "relu");
  EXPECT_EQ(g.ops[0].attr("transB")->i, 0);
  EXPECT_EQ(ir::shape_str(out_of(g, 0).shape), "[N, 6, 32]");
  EXPECT_EQ(g.tensors[static_cast<size_t>(g.ops[0].inputs[2])].name, "b1");
  EXPECT_EQ(g.ops[2].attr("activation")->s, "leaky_relu");
  EXPECT_FLOAT_EQ(g.ops[2].attr("activation_alpha")->f, 0.1f);
  EXPECT_EQ(g.ops[2].attr("transB")->i, 1);
  EXPECT_EQ(g.ops[3].attr("activation")->s, "none");
  EXPECT_EQ(g.ops[3].inputs[2], -1) << "no bias";
}

TEST(Passes, SharedInitializersBecomeParametersOfTheirOwn) {
  Builder b;
  const int x = b.input("x", {-1, 4});
  const int bias = b.param("fc1.bias", {4});
  const int shared = b.op("Identity", {bias});  // torch: fc2.bias = Identity(fc1.bias)
  const int h = b.op("Add", {x, bias});
  ir::Graph g = passes::run_passes(b.done({b.op("Add", {h, shared})}));
  ASSERT_EQ(kinds(g), (Kinds{"Add", "Add"}));
  const ir::Tensor& p = g.tensors[static_cast<size_t>(g.ops[1].inputs[1])];
  EXPECT_EQ(p.kind, ir::TensorKind::kParameter);
  EXPECT_NE(p.name, "fc1.bias") << "its own parameter, trained on its own";
  EXPECT_EQ(p.data, g.tensors[static_cast<size_t>(g.ops[0].inputs[1])].data) << "with the same initial values";
}

// A Pad of zeros around the planes becomes the pads of the Conv or AveragePool reading it (the
// pool's zeros then counted, as torch's AvgPool2d exports them); a reflecting Pad, one before a
// MaxPool (whose pads are -inf, not 0) and one on the channels stay.
TEST(Passes, ZeroPadsFoldIntoTheConvOrAveragePoolAfterThem) {
  Builder b;
  const int x = b.input("x", {-1, 2, 8, 8});
  const int pad = b.op("Pad", {x, b.ints({0, 0, 1, 2, 0, 0, 1, 2})}, {{"mode", ir::attr_str("constant")}});
  const int c = b.op("Conv", {pad, b.param("w", {3, 2, 3, 3})}, {{"pads", Is({1, 0, 1, 0})}});
  const int pool = b.op("AveragePool", {b.op("Pad", {c, b.ints({0, 0, 1, 1, 0, 0, 1, 1})})}, {{"kernel_shape", Is({2, 2})}, {"strides", Is({2, 2})}});
  const int reflect = b.op("Pad", {pool, b.ints({0, 0, 1, 1, 0, 0, 1, 1})}, {{"mode", ir::attr_str("reflect")}});
  const int mp = b.op("MaxPool", {b.op("Pad", {reflect, b.ints({0, 0, 1, 1, 0, 0, 1, 1})})}, {{"kernel_shape", Is({2, 2})}});
  const int ch = b.op("Pad", {mp, b.ints({0, 1, 0, 0, 0, 1, 0, 0})});
  ir::Graph g = passes::run_passes(b.done({b.op("Relu", {ch})}));
  ASSERT_EQ(kinds(g), (Kinds{"Conv2d", "AveragePool", "Pad", "Pad", "MaxPool", "Pad", "Relu"}));
  EXPECT_EQ(g.ops[0].attr("pads")->ints, (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(g.ops[0].inputs[0], g.inputs[0]);
  EXPECT_EQ(g.ops[1].attr("pads")->ints, (std::vector<int64_t>{1, 1, 1, 1}));
  EXPECT_EQ(g.ops[1].attr("count_include_pad")->i, 1);
  EXPECT_EQ(ir::shape_str(out_of(g, 1).shape), "[N, 3, 6, 6]");
  // NCL sequences the same way (a 1-D convolution's pads: begin, end).
  Builder b1;
  const int s = b1.input("s", {-1, 2, 10});
  const int p1 = b1.op("Pad", {s, b1.ints({0, 0, 1, 0, 0, 2})});
  ir::Graph g1 = passes::run_passes(b1.done({b1.op("Conv", {p1, b1.param("w", {3, 2, 3})})}));
  ASSERT_EQ(kinds(g1), (Kinds{"Conv2d"}));
  EXPECT_EQ(g1.ops[0].attr("pads")->ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ir::shape_str(out_of(g1, 0).shape), "[N, 3, 11]");
}

// nn.ZeroPad2d((1, 2, 1, 0)) as torch 1.13 exports it at opset 17: the pads from
// ConstantOfShape, Concat, Reshape, a Slice reversing the rows (step -1), Transpose, Reshape and
// Cast, all folded, then the Pad taken as the Conv's pads (top 1, left 1, bottom 0, right 2).
TEST(Passes, TorchsPadArithmeticFoldsIntoTheConvsPads) {
  Builder b;
  const int x = b.input("x", {-1, 1, 8, 8});
  OnnxAttr zero;
  zero.tensor_type = compiler::kOnnxInt64;
  zero.ints = {0};
  const int zeros = b.op("ConstantOfShape", {b.ints({4})}, {{"value", zero}});
  const int cat = b.op("Concat", {b.ints({1, 2, 1, 0}), zeros}, {{"axis", I(0)}});
  const int rows = b.op("Reshape", {cat, b.ints({-1, 2})});
  const int rev = b.op("Slice", {rows, b.ints({-1}), b.ints({-9223372036854775807LL}), b.ints({0}), b.ints({-1})});
  const int tr = b.op("Transpose", {rev}, {{"perm", Is({1, 0})}});
  const int pads = b.op("Cast", {b.op("Reshape", {tr, b.ints({-1})})}, {{"to", I(7)}});
  const int padded = b.op("Pad", {x, pads, b.scalar(0.0f)}, {{"mode", ir::attr_str("constant")}});
  ir::Graph g = passes::run_passes(b.done({b.op("Conv", {padded, b.param("w", {2, 1, 3, 3})})}));
  ASSERT_EQ(kinds(g), (Kinds{"Conv2d"}));
  EXPECT_EQ(g.ops[0].attr("pads")->ints, (std::vector<int64_t>{1, 1, 0, 2}));
  EXPECT_EQ(ir::shape_str(out_of(g, 0).shape), "[N, 2, 7, 9]");
}

TEST(Passes, DeadCodeAndRenames) {
  Builder b;
  const int x = b.input("x", {-1, 4});
  const int y = b.op("Relu", {b.op("Identity", {x})});
  b.op("Exp", {b.op("Neg", {y})});  // read by nothing
  ir::Graph g = passes::run_passes(b.done({b.op("Dropout", {y})}));
  EXPECT_EQ(kinds(g), (Kinds{"Relu", "Dropout"})) << "the Dropout gives the graph's output: it keeps its name";
  EXPECT_EQ(g.ops[0].inputs[0], g.inputs[0]);
}

// On the dense chains the compiler takes today, the rewritten graph is exactly the kernel
// graph's layers: the same weights and biases, activations, in order.
TEST(Passes, DenseChainsRewriteToTheKernelGraphsLayers) {
  int checked = 0;
  for (const char* act : {"Relu", "Sigmoid", "Tanh"}) {
    for (const int opset : {11, 13, 17}) {
      const std::string path = test_tmp_dir() + "/passes_" + act + std::to_string(opset) + ".onnx";
      write_mlp(path, MlpSpec{{20, 12, 8, 5}, act, 11, opset});
      const compiler::OnnxModel m = compiler::import_onnx(path);
      const compiler::KernelGraph kg = compiler::build_kernel_graph(m, "softmax_xent");
      const ir::Graph g = passes::run_passes(ir::from_onnx(m));
      ASSERT_EQ(g.ops.size(), kg.layers.size()) << path;
      for (size_t l = 0; l < kg.layers.size(); ++l) {
        const ir::Op& o = g.ops[l];
        const compiler::DenseKernel& d = kg.layers[l];
        EXPECT_EQ(o.kind, "Dense");
        EXPECT_EQ(g.tensors[static_cast<size_t>(o.inputs[1])].name, d.weight);
        EXPECT_EQ(g.tensors[static_cast<size_t>(o.inputs[2])].name, d.bias);
        EXPECT_EQ(o.attr("activation")->s, compiler::activation_name(d.act));
        EXPECT_EQ(out_of(g, l).shape, (std::vector<int64_t>{-1, d.out}));
        ++checked;
      }
    }
  }
  EXPECT_EQ(checked, 27);
}

}  // namespace
}  // namespace wafersim::test
