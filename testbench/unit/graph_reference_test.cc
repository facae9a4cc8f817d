// The graph compiler's autodiff and host reference (compiler/autodiff.h, graph_reference.h;
// docs/graph-compiler.md step 3) on the dense chains the compiler trains today: with the tiles
// of a layer-pipelined plan on its Dense ops it is today's Reference bit for bit, losses,
// weights, biases and momenta, step after step. Against PyTorch on residual, LayerNorm, GELU and
// LeakyReLU models: testbench/system/graph_reference_test.cc.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "compiler/autodiff.h"
#include "compiler/graph_reference.h"
#include "compiler/kernel_graph.h"
#include "compiler/ops/op_class.h"
#include "compiler/passes/passes.h"
#include "compiler/reference.h"
#include "mlp_model.h"
#include "test_support.h"

namespace wafersim::test {
namespace {

using namespace compiler;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Tiles of n: offsets of p near-equal parts.
std::vector<int> parts(int n, int p) {
  std::vector<int> off;
  for (int i = 0; i <= p; ++i) off.push_back(n * i / p);
  return off;
}

TEST(GraphReference, DenseChainIsTheReferenceBitForBit) {
  for (const char* act : {"Relu", "Sigmoid", "Tanh", "LeakyRelu"}) {
    const std::string path = test_tmp_dir() + "/graph_ref_" + act + ".onnx";
    const std::vector<int> widths = {13, 9, 7, 4};
    write_mlp(path, MlpSpec{widths, act, 5, 13});
    const OnnxModel m = import_onnx(path);
    const KernelGraph kg = build_kernel_graph(m, "softmax_xent");
    const int batch = 5;
    Plan plan;
    plan.batch = batch;
    for (size_t l = 0; l + 1 < widths.size(); ++l) {
      LayerPlan lp;
      lp.index = static_cast<int>(l);
      lp.in = widths[l];
      lp.out = widths[l + 1];
      lp.p_in = l == 0 ? 3 : 2;  // uneven tiles: the order of the partial sums matters
      lp.p_out = l == 1 ? 2 : 1;
      lp.in_off = parts(lp.in, lp.p_in);
      lp.out_off = parts(lp.out, lp.p_out);
      lp.dx = l > 0;
      plan.layers.push_back(lp);
    }
    const TrainHyper h{0.05f, 0.9f};
    Reference ref(kg, plan, h, ModelState::from_graph(kg));
    ir::Graph fwd = passes::run_passes(ir::from_onnx(m));
    set_dense_tiles(fwd, plan);
    const TrainGraph tg = autodiff(fwd);
    GraphReference gr(tg, h);
    uint64_t seed = 99;
    for (int step = 0; step < 3; ++step) {
      std::vector<std::vector<float>> data(batch, std::vector<float>(static_cast<size_t>(widths[0])));
      std::vector<const float*> xs;
      std::vector<int> labels;
      for (auto& x : data) {
        for (float& v : x) v = lcg_uniform(&seed) * 2;
        xs.push_back(x.data());
        labels.push_back(static_cast<int>((seed >> 33) % static_cast<uint64_t>(widths.back())));
      }
      const std::vector<float> want = ref.step(xs, labels);
      const std::vector<float> got = gr.step(xs, labels);
      ASSERT_TRUE(same_bits(got, want)) << act << " step " << step << ": loss " << got[0] << " against " << want[0];
      for (size_t l = 0; l < kg.layers.size(); ++l) {
        const DenseKernel& d = kg.layers[l];
        EXPECT_TRUE(same_bits(gr.param(d.weight), ref.state().w[l])) << act << " step " << step << " " << d.weight;
        EXPECT_TRUE(same_bits(gr.param(d.bias), ref.state().b[l])) << act << " step " << step << " " << d.bias;
        EXPECT_TRUE(same_bits(gr.momentum(d.weight), ref.state().v[l])) << act << " step " << step << " momentum of " << d.weight;
        EXPECT_TRUE(same_bits(gr.momentum(d.bias), ref.state().vb[l])) << act << " step " << step << " momentum of " << d.bias;
      }
    }
    // And the forward pass alone.
    std::vector<float> x(static_cast<size_t>(widths[0]), 0.5f);
    EXPECT_TRUE(same_bits(gr.logits({x.data()}), ref.forward(x.data()))) << act;
  }
}

TEST(GraphReference, TheTrainingGraphHasOneUpdatePerParameter) {
  const std::string path = test_tmp_dir() + "/graph_ref_ops.onnx";
  write_mlp(path, MlpSpec{{8, 6, 3}, "Relu", 3, 13});
  const OnnxModel m = import_onnx(path);
  const TrainGraph t = autodiff(passes::run_passes(ir::from_onnx(m)));
  std::map<std::string, int> n;
  for (const ir::Op& o : t.g.ops) ++n[o.kind];
  EXPECT_EQ(n["Dense"], 2);
  EXPECT_EQ(n["SoftmaxXent"], 1);
  EXPECT_EQ(n["ActivationGrad"], 1);
  EXPECT_EQ(n["DenseGradInput"], 1) << "the first layer's input needs no gradient";
  EXPECT_EQ(n["DenseGradWeight"], 2);
  EXPECT_EQ(n["DenseGradBias"], 2);
  EXPECT_EQ(n["SgdMomentum"], 4);
  EXPECT_EQ(t.params.size(), 4u);
  EXPECT_EQ(t.forward_ops, 2);
}

// Every op kind autodiff and the passes make has one class (compiler/ops/registry.cc), and
// each class's kinds find it.
TEST(GraphReference, EveryOpKindHasOneClass) {
  std::set<std::string> names;
  for (const ops::OpClass* c : ops::all()) {
    EXPECT_TRUE(names.insert(c->name()).second) << c->name();
    for (const std::string& k : c->kinds()) EXPECT_EQ(ops::find(k), c) << k;
  }
  for (const char* k : {"Dense", "ActivationGrad", "DenseGradInput", "DenseGradWeight", "DenseGradBias", "Add", "SumTo", "SumToGrad",
                        "LayerNorm", "LayerNormGrad", "LayerNormGradScale", "LayerNormGradBias", "Gelu", "Relu", "ReshapeAs",
                        "SoftmaxXent", "SgdMomentum"}) {
    EXPECT_NE(ops::find(k), nullptr) << k;
  }
  EXPECT_NE(ops::find("Conv2d"), nullptr);
  // Every activation of compiler/activations/ that is an ONNX op is the activation class's.
  for (const char* k : {"Elu", "Softplus", "Softsign", "HardSigmoid", "Clip", "LeakyRelu", "Sigmoid", "Tanh"}) {
    EXPECT_EQ(ops::find(k), ops::find("Relu")) << k;
  }
  EXPECT_EQ(ops::find("Erf"), nullptr) << "not yet";
}

}  // namespace
}  // namespace wafersim::test
