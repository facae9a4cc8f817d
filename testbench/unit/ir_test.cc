// The graph IR (compiler/ir/graph.h, docs/graph-compiler.md step 1): ONNX models import into
// it with their inferred shapes, its invariants hold on them and `verify` catches each broken
// one, and the shape rules give what ONNX's inference gives (torch exports of residual, norm,
// CNN and encoder models: the `graph_import` test, scripts/test_graph_import.py).
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/onnx_model.h"
#include "mlp_model.h"
#include "test_support.h"

namespace wafersim::test {
namespace {

using compiler::CompileError;
using compiler::OnnxAttr;
namespace ir = compiler::ir;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

std::string verify_error(const ir::Graph& g) {
  try {
    ir::verify(g);
  } catch (const CompileError& e) {
    return e.what();
  }
  return "";
}

TEST(IrImport, MlpsImportWithTheirShapesAndVerify) {
  for (const int opset : {11, 13, 17}) {
    const std::string path = test_tmp_dir() + "/ir_mlp" + std::to_string(opset) + ".onnx";
    write_mlp(path, MlpSpec{{16, 8, 6, 4}, "Sigmoid", 3, opset});
    const compiler::OnnxModel m = compiler::import_onnx(path);
    const ir::Graph g = ir::from_onnx(m);
    EXPECT_EQ(verify_error(g), "") << "opset " << opset;
    EXPECT_EQ(g.opset, opset);
    ASSERT_EQ(g.inputs.size(), 1u);
    ASSERT_EQ(g.outputs.size(), 1u);
    int gemms = 0;
    for (size_t i = 0; i < g.ops.size(); ++i) {
      const ir::Op& o = g.ops[i];
      ASSERT_EQ(o.sources.size(), 1u);
      for (int t : o.outputs) {
        const ir::Tensor& x = g.tensors[static_cast<size_t>(t)];
        EXPECT_EQ(x.producer, static_cast<int>(i));
        EXPECT_TRUE(x.shape_known) << x.name;
        ASSERT_EQ(x.shape.size(), 2u) << x.name;
        EXPECT_LT(x.shape[0], 0) << x.name << ": the batch stays symbolic";
      }
      if (o.kind == "Gemm") {
        const int widths[] = {8, 6, 4};
        EXPECT_EQ(g.tensors[static_cast<size_t>(o.outputs[0])].shape[1], widths[gemms]);
        EXPECT_EQ(g.tensors[static_cast<size_t>(o.inputs[1])].kind, ir::TensorKind::kParameter);
        ++gemms;
      }
    }
    EXPECT_EQ(gemms, 3);
    // Each value's consumers are the ops that read it, in order.
    const ir::Tensor& in = g.tensors[static_cast<size_t>(g.inputs[0])];
    ASSERT_EQ(in.consumers.size(), 1u);
    EXPECT_EQ(in.consumers[0], 0);
    EXPECT_TRUE(contains(g.summary(), "3 Gemm")) << g.summary();
  }
  const compiler::OnnxModel demo = compiler::import_onnx(WAFERSIM_DEMO_MODEL_PATH);
  const ir::Graph g = ir::from_onnx(demo);
  EXPECT_EQ(verify_error(g), "");
  EXPECT_EQ(g.summary(), "6 ops (3 Gemm, 2 Relu, 1 Flatten), 13 tensors (1 input, 6 parameters, 0 constants, 6 values)");
}

// Each invariant, broken on a graph that verifies, is named.
TEST(IrVerify, EachBrokenInvariantIsNamed) {
  const std::string path = test_tmp_dir() + "/ir_broken.onnx";
  write_mlp(path, MlpSpec{{16, 8, 6, 4}, "Relu", 3, 13});
  const compiler::OnnxModel m = compiler::import_onnx(path);
  const ir::Graph good = ir::from_onnx(m);
  ASSERT_EQ(verify_error(good), "");
  int first = 0;  // the first Gemm (after the Flatten)
  while (good.ops[static_cast<size_t>(first)].kind != "Gemm") ++first;
  ASSERT_EQ(first, 1);
  {
    ir::Graph g = good;
    g.tensors[static_cast<size_t>(g.inputs[0])].consumers.clear();
    EXPECT_TRUE(contains(verify_error(g), "which does not list it as a consumer")) << verify_error(g);
  }
  {
    ir::Graph g = good;
    g.tensors[static_cast<size_t>(g.ops[static_cast<size_t>(first)].outputs[0])].shape = {-1, 9};
    EXPECT_TRUE(contains(verify_error(g), "gives '" + g.tensors[static_cast<size_t>(g.ops[static_cast<size_t>(first)].outputs[0])].name +
                                              "' shape [N, 9], its shape rule [N, 8]"))
        << verify_error(g);
  }
  {
    ir::Graph g = good;
    std::swap(g.ops[1], g.ops[2]);  // the Relu before the Gemm that gives its input
    EXPECT_TRUE(contains(verify_error(g), "before it is produced (not in topological order)")) << verify_error(g);
  }
  {
    ir::Graph g = good;
    g.ops[2].outputs.assign(1, -1);
    EXPECT_TRUE(contains(verify_error(g), "has no output")) << verify_error(g);
  }
  {
    ir::Graph g = good;
    g.tensors[static_cast<size_t>(g.ops[static_cast<size_t>(first)].outputs[0])].producer = 3;
    EXPECT_TRUE(contains(verify_error(g), "whose producer is another op")) << verify_error(g);
  }
  {
    ir::Graph g = good;
    g.tensors[static_cast<size_t>(g.inputs[0])].consumers.push_back(3);
    EXPECT_TRUE(contains(verify_error(g), "which does not read it")) << verify_error(g);
  }
  {
    ir::Graph g = good;
    g.tensors[static_cast<size_t>(g.ops[static_cast<size_t>(first)].inputs[1])].data = nullptr;
    EXPECT_TRUE(contains(verify_error(g), "has no data")) << verify_error(g);
  }
}

// Hand-built graphs: one op over inputs of given shapes; the rule's output shape (or its error).
class Rule {
 public:
  int in(const std::vector<int64_t>& shape) {
    ir::Tensor t;
    t.name = "t" + std::to_string(m_g.tensors.size());
    t.kind = ir::TensorKind::kInput;
    t.shape_known = true;
    t.shape = shape;
    m_g.tensors.push_back(t);
    return static_cast<int>(m_g.tensors.size()) - 1;
  }
  int constant(const std::vector<int64_t>& values) {
    m_data.push_back(std::make_unique<compiler::OnnxTensor>());
    m_data.back()->i64 = values;
    m_data.back()->dims = {static_cast<int64_t>(values.size())};
    const int t = in({static_cast<int64_t>(values.size())});
    m_g.tensors[static_cast<size_t>(t)].kind = ir::TensorKind::kConstant;
    m_g.tensors[static_cast<size_t>(t)].data = m_data.back().get();
    return t;
  }
  std::vector<int64_t> shape(const std::string& kind, const std::vector<int>& inputs,
                             const std::map<std::string, OnnxAttr>& attrs = {}) {
    ir::Op o;
    o.kind = kind;
    o.inputs = inputs;
    o.attrs = attrs;
    o.sources = {"/test/" + kind};
    std::vector<int64_t> s;
    if (!ir::infer_output_shape(m_g, o, 0, &s)) return {-99};
    return s;
  }
  std::string error(const std::string& kind, const std::vector<int>& inputs, const std::map<std::string, OnnxAttr>& attrs = {}) {
    try {
      shape(kind, inputs, attrs);
    } catch (const CompileError& e) {
      return e.what();
    }
    return "";
  }

 private:
  ir::Graph m_g;
  std::vector<std::unique_ptr<compiler::OnnxTensor>> m_data;
};

OnnxAttr ints(std::vector<int64_t> v) { return ir::attr_ints(std::move(v)); }
OnnxAttr one(int64_t v) { return ir::attr_int(v); }

using Shape = std::vector<int64_t>;

TEST(IrShapes, RulesOfTheOpsTorchExports) {
  Rule r;
  const int x = r.in({-1, 1, 12, 12}), w = r.in({4, 1, 3, 3}), w2 = r.in({8, 4, 3, 3});
  EXPECT_EQ(r.shape("Conv", {x, w}, {{"pads", ints({1, 1, 1, 1})}}), (Shape{-1, 4, 12, 12}));
  const int c = r.in({-1, 4, 12, 12});
  EXPECT_EQ(r.shape("MaxPool", {c}, {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}}), (Shape{-1, 4, 6, 6}));
  const int p = r.in({-1, 4, 6, 6});
  EXPECT_EQ(r.shape("Conv", {p, w2}, {{"strides", ints({2, 2})}}), (Shape{-1, 8, 2, 2}));
  EXPECT_EQ(r.shape("MaxPool", {p}, {{"kernel_shape", ints({4, 4})}, {"strides", ints({4, 4})}, {"ceil_mode", one(1)}}),
            (Shape{-1, 4, 2, 2}));
  // ceil_mode's last window must start inside the input or its first pad (torch's rule): over
  // 5 with pads 1 and 1, windows of 2 by 2 start at -1, 1, 3 (and 5, in the last pad: dropped).
  const int p5 = r.in({-1, 4, 5, 5});
  EXPECT_EQ(r.shape("MaxPool", {p5}, {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}, {"ceil_mode", one(1)}}),
            (Shape{-1, 4, 3, 3}));
  EXPECT_EQ(r.shape("GlobalAveragePool", {p}), (Shape{-1, 4, 1, 1}));
  EXPECT_TRUE(contains(r.error("Conv", {p, w}), "expects 1 input channels, the input has 4")) << r.error("Conv", {p, w});

  const int seq = r.in({-1, 6, 16}), wt = r.in({16, 32}), bias = r.in({32});
  EXPECT_EQ(r.shape("MatMul", {seq, wt}), (Shape{-1, 6, 32}));
  const int q = r.in({-1, 2, 6, 8}), k = r.in({-1, 2, 8, 6});
  EXPECT_EQ(r.shape("MatMul", {q, k}), (Shape{-1, 2, 6, 6}));
  EXPECT_TRUE(contains(r.error("MatMul", {seq, k}), "inner dimensions 16 and 8 differ")) << r.error("MatMul", {seq, k});
  const int h = r.in({-1, 6, 32});
  EXPECT_EQ(r.shape("Add", {h, bias}), (Shape{-1, 6, 32}));
  EXPECT_EQ(r.shape("Add", {h, h}), (Shape{-1, 6, 32}));
  const int odd = r.in({4});
  EXPECT_TRUE(contains(r.error("Add", {h, odd}), "shapes [N, 6, 32] and [4] do not broadcast")) << r.error("Add", {h, odd});
  EXPECT_EQ(r.shape("Transpose", {q}, {{"perm", ints({0, 2, 1, 3})}}), (Shape{-1, 6, 2, 8}));
  EXPECT_EQ(r.shape("ReduceMean", {h}, {{"axes", ints({-1})}}), (Shape{-1, 6, 1}));
  EXPECT_EQ(r.shape("ReduceMean", {h}, {{"axes", ints({-1})}, {"keepdims", one(0)}}), (Shape{-1, 6}));
  EXPECT_EQ(r.shape("Concat", {h, h}, {{"axis", one(2)}}), (Shape{-1, 6, 64}));
  EXPECT_EQ(r.shape("Softmax", {h}), (Shape{-1, 6, 32}));
  EXPECT_EQ(r.shape("Flatten", {x}), (Shape{-1, 144}));

  const int img = r.in({-1, 1, 28, 28});
  EXPECT_EQ(r.shape("Reshape", {img, r.constant({-1, 784})}), (Shape{-1, 784}));
  EXPECT_EQ(r.shape("Reshape", {img, r.constant({0, 28, 28})}), (Shape{-1, 28, 28}));
  EXPECT_EQ(r.shape("Reshape", {img, r.constant({0, 784, -1})}), (Shape{-1, 784, 1}));
  EXPECT_EQ(r.shape("Reshape", {img, r.constant({16, -1})}), (Shape{16, -49})) << "the batch carried as 49 N";
  const int fixed = r.in({2, 3, 4});
  EXPECT_EQ(r.shape("Reshape", {fixed, r.constant({4, -1})}), (Shape{4, 6}));
  EXPECT_TRUE(contains(r.error("Reshape", {fixed, r.constant({5, -1})}), "cannot reshape [2, 3, 4] to [5, -1]"));
  // An op the IR has no rule for, or an input of unknown shape: no rule, no error.
  EXPECT_EQ(r.shape("Erf2", {h}), (Shape{-99}));
}

}  // namespace
}  // namespace wafersim::test
