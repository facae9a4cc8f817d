// Layer-pipelined training on the simulated wafer against the host reference of the same math.
// The reference follows the compiler's own Plan, so a planning error both share would pass here:
// ctest torch_roundtrip (scripts/test_torch_roundtrip.py) checks layer-pipelined runs against
// PyTorch, sharing no code.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <type_traits>

#include "compiler/compile.h"
#include "compiler/ws_plan.h"
#include "compiler/reference.h"
#include "mlp_model.h"
#include "test_support.h"
#include "tlm/trainer.h"

namespace wafersim::test {
namespace {

using namespace compiler;

struct Rig {
  HwConfig hw;
  CompileOptions opt;
  CompileResult res;
  tlm::Dataset data;
  tlm::Normalize norm;
};

// A model spec's file, features and classes.
int spec_features(const MlpSpec& s) { return s.widths.front(); }
int spec_classes(const MlpSpec& s) { return s.widths.back(); }
int spec_features(const CnnSpec& s) { return s.features(); }
int spec_classes(const CnnSpec& s) { return s.dense.back(); }

template <typename Spec>
Rig make_rig(const Spec& spec, int fabric, int batch, int max_pes, const std::string& name, int in_flight = 1,
             int replicas = 1) {
  Rig r;
  r.opt.place.in_flight = in_flight;
  r.opt.place.replicas = replicas;
  r.hw = small_config(fabric, fabric);
  r.hw.io.spacing = 8;
  r.opt.place.batch = batch;
  r.opt.place.max_pes = max_pes;
  r.opt.hyper.lr = 0.05f;
  const std::string path = tmp_path(name + ".onnx");
  if constexpr (std::is_same_v<Spec, CnnSpec>) write_cnn(path, spec);
  else write_mlp(path, spec);
  r.res = compile_model(path, r.hw, r.opt);
  r.data = synthetic_dataset(64, static_cast<size_t>(spec_features(spec)), spec_classes(spec), 3);
  return r;
}

// `in_flight` 2: steps drain where `drains` says (1-based step numbers; the last always does).
// Returns the wafer's cycles over all steps.
// `replicas`: compile.replicas (1 unless a test says; 0 lets the compiler choose).
template <typename Spec>
uint64_t check_against_reference(const Spec& spec, int fabric, int batch, int max_pes, int steps, const std::string& name,
                                 int in_flight = 1, const std::vector<int>& drains = {}, int replicas = 1) {
  Rig r = make_rig(spec, fabric, batch, max_pes, name, in_flight, replicas);
  if (replicas > 0) {
    EXPECT_EQ(r.res.compiled.plan.replicas, replicas);
  }
  std::cout << r.res.report_text;
  tlm::Trainer t(r.hw, r.res.compiled, r.data, r.norm, 11, 0);
  Reference ref(r.res.graph, r.res.compiled.plan, r.opt.hyper, ModelState::from_graph(r.res.graph));
  tlm::InputWorker order(r.data, {}, r.norm, 11);
  const int F = r.res.compiled.plan.lookahead();
  if (in_flight > 1) {
    EXPECT_GT(F, 0);
    EXPECT_LE(F, std::min(batch - 1, r.res.compiled.plan.ring_depth));
  } else {
    EXPECT_EQ(F, 0);
  }
  bool pending = false;
  uint64_t cycles = 0;
  for (int s = 0; s < steps; ++s) {
    const bool drain = s + 1 == steps || std::find(drains.begin(), drains.end(), s + 1) != drains.end();
    const tlm::StepResult w = t.step(drain);
    cycles += w.cycles;
    EXPECT_EQ(t.pending(), F > 0 && !drain);
    std::vector<std::vector<float>> xs;
    std::vector<const float*> ptrs;
    std::vector<int> labels;
    for (int j = 0; j < batch; ++j) {
      const size_t i = order.sample_at(static_cast<long long>(s) * batch + j);
      std::vector<float> x(r.data.features);
      for (size_t k = 0; k < x.size(); ++k) x[k] = r.norm.apply(r.data.sample(i)[k], k);
      xs.push_back(std::move(x));
      labels.push_back(r.data.labels[i]);
    }
    for (auto& x : xs) ptrs.push_back(x.data());
    const std::vector<float> rl = ref.step(ptrs, labels, pending);
    pending = F > 0 && !drain;
    expect_same_bits(w.losses, rl, "losses of step " + std::to_string(s + 1));
    std::cout << "step " << s + 1 << " loss " << w.mean_loss << " cycles " << w.cycles << "\n";
  }
  const ModelState ws = t.read_state();
  for (size_t l = 0; l < ws.w.size(); ++l) {
    expect_same_bits(ws.w[l], ref.state().w[l], "w" + std::to_string(l));
    expect_same_bits(ws.v[l], ref.state().v[l], "v" + std::to_string(l));
    expect_same_bits(ws.b[l], ref.state().b[l], "b" + std::to_string(l));
    expect_same_bits(ws.vb[l], ref.state().vb[l], "vb" + std::to_string(l));
    if (r.res.graph.layers[l].ln.on) {  // a LayerNorm's gamma, beta and their momenta
      EXPECT_EQ(ws.lg[l].size(), r.res.graph.layers[l].ln.g.size());
      expect_same_bits(ws.lg[l], ref.state().lg[l], "ln gamma " + std::to_string(l));
      expect_same_bits(ws.lb[l], ref.state().lb[l], "ln beta " + std::to_string(l));
      expect_same_bits(ws.lvg[l], ref.state().lvg[l], "ln gamma momentum " + std::to_string(l));
      expect_same_bits(ws.lvb[l], ref.state().lvb[l], "ln beta momentum " + std::to_string(l));
    }
  }
  // Every copy holds the same weights and momentum as copy 0, bit for bit.
  if (r.res.compiled.plan.replicas > 1) {
    const auto outs = read_outputs(t.fabric(), r.res.compiled.program);
    std::map<std::string, const std::vector<float>*> by;
    for (const auto& o : outs) by[o.name] = &o.values;
    int compared = 0;
    for (const auto& [name, values] : by) {
      if (name.rfind("r", 0) != 0) continue;
      expect_same_bits(*values, *by.at(name.substr(name.find('.') + 1)), name);
      ++compared;
    }
    EXPECT_GT(compared, 0);
  }
  return cycles;
}

TEST(Training, SmallMlpMatchesReferenceBitForBit) {
  check_against_reference(MlpSpec{}, 24, 4, 0, 3, "small_relu");
}

}  // namespace
}  // namespace wafersim::test

namespace wafersim::test {
namespace {

// Other depths, activations and partitions (larger budgets split layers into 2-D grids of tiles,
// so the chains of partial sums and input gradients run over several PEs).
TEST(Training, TanhTwoLayersMatchesReference) {
  check_against_reference(MlpSpec{{12, 10, 3}, "Tanh", 3, 13}, 24, 6, 12, 3, "tanh2");
}

TEST(Training, SigmoidFourLayersOnGridsMatchesReference) {
  check_against_reference(MlpSpec{{40, 24, 16, 12, 5}, "Sigmoid", 5, 13}, 40, 5, 60, 2, "sigmoid4");
}

// LeakyRelu (slope 0.01, ONNX's default): max(z, alpha z) forward, (g - t) alpha + t backward.
TEST(Training, LeakyReluOnGridsMatchesReference) {
  check_against_reference(MlpSpec{{40, 24, 16, 12, 5}, "LeakyRelu", 5, 13}, 40, 5, 60, 2, "leaky4");
}

// The activations written as programs (compiler/activations/) beyond the first four: Elu,
// Softplus, Softsign, HardSigmoid and Clip (both bounds binding), on grids of tiles and on a
// CNN's roots (its planes), each bit for bit against the reference over two steps.
TEST(Training, MoreActivationsMatchReference) {
  for (const char* act : {"Elu", "Softplus", "Softsign", "HardSigmoid", "Clip"}) {
    check_against_reference(MlpSpec{{40, 24, 16, 12, 5}, act, 5, 13}, 40, 5, 60, 2, std::string("acts_") + act);
    CnnSpec c;
    c.c = 2, c.h = 6, c.w = 6;
    c.act = act;
    c.convs = {{3, 3, 1, 1, "MaxPool", 2}};
    c.dense = {4, 3};
    check_against_reference(c, 20, 4, 0, 2, std::string("acts_conv_") + act);
  }
}

// Residual connections (h = h + act(fc(h))): fc2 and fc3 (boundary 2 is a sum and the next
// one's source) and fc5, on grids of tiles; the source roots send their outputs to the target
// roots, which send the sums' gradients back. Bit for bit against the reference.
MlpSpec residual_spec() {
  MlpSpec spec{{20, 12, 12, 12, 8, 8, 5}, "Tanh", 5, 13};
  spec.residual = true;
  return spec;
}

TEST(Training, ResidualConnectionsMatchReference) {
  check_against_reference(residual_spec(), 40, 6, 60, 3, "residual");
}

// The sum before the activation (h = act(fc(h) + h), ResNet's order): the target roots add the
// source's slice to z before the activation and send the source the gradient after its
// derivative. ReLU (derivative at y) here, a GELU (at z, kept in the ring) with 2 replicas.
TEST(Training, PreActivationResidualsMatchReference) {
  MlpSpec spec = residual_spec();
  spec.act = "Relu";
  spec.residual_pre = true;
  check_against_reference(spec, 40, 6, 60, 3, "residual_pre");
  spec.act = "Gelu";
  check_against_reference(spec, 40, 6, 60, 2, "residual_pre_gelu_r2", 1, {}, 2);
}

// Blocks of two layers (h + act(fc2(act(fc1(h))))): the source's roots are two layers before
// the target's, their streams cross a layer's region.
TEST(Training, TwoLayerResidualBlocksMatchReference) {
  MlpSpec spec{{16, 10, 7, 10, 7, 10, 4}, "Relu", 8, 13};
  spec.residual = true;
  spec.residual_span = 2;
  check_against_reference(spec, 40, 6, 60, 3, "residual_span2");
}

// GELU, the Erf form (torch's default) and the tanh form, as torch exports them: the roots keep z
// for the derivative and send y from the second half of their ring; with residual connections
// too. Bit for bit against the reference.
TEST(Training, GeluMatchesReference) {
  check_against_reference(MlpSpec{{40, 24, 16, 12, 5}, "Gelu", 5, 13}, 40, 5, 60, 2, "gelu");
}

TEST(Training, GeluTanhWithResidualConnectionsMatchesReference) {
  MlpSpec spec{{20, 12, 12, 12, 8, 8, 5}, "GeluTanh", 6, 13};
  spec.residual = true;
  check_against_reference(spec, 40, 6, 60, 3, "gelu_tanh_residual");
}

// LayerNorm before each hidden activation (LayerNormalization, opset 17): one root per such layer
// normalises each sample and trains gamma and beta with the bias. Bit for bit, 3 steps.
TEST(Training, LayerNormMatchesReference) {
  MlpSpec spec{{24, 16, 12, 5}, "Gelu", 7, 17};
  spec.layernorm = true;
  check_against_reference(spec, 40, 6, 60, 3, "layernorm");
}

// LayerNorm after each hidden activation (nn.Sequential(Linear, act, LayerNorm)): the root
// normalises a copy of y (a GELU's z kept), backward the norm's gradient before the derivative;
// with 2 replicas too. Bit for bit, 3 steps.
TEST(Training, PostActivationLayerNormMatchesReference) {
  MlpSpec spec{{24, 16, 12, 5}, "Gelu", 7, 17};
  spec.layernorm = spec.layernorm_post = true;
  check_against_reference(spec, 40, 6, 60, 3, "layernorm_post");
  spec.act = "Tanh";
  check_against_reference(spec, 48, 6, 0, 3, "layernorm_post_replicas2", 1, {}, 2);
}

// Scalar steps after each hidden activation (2 sigmoid(z) - 1; 0.5 relu(z) into residual sums,
// with 2 replicas), fused into a chain activation whose derivative the roots take at z. Bit for
// bit, 3 steps.
TEST(Training, ScalarStepsAfterActivationsMatchReference) {
  MlpSpec spec{{24, 16, 12, 5}, "Sigmoid", 7, 13};
  spec.post_mul = 2.0f, spec.post_add = -1.0f;
  check_against_reference(spec, 40, 6, 60, 3, "post_act_sigmoid");
  MlpSpec res = residual_spec();
  res.post_mul = 0.5f;
  check_against_reference(res, 48, 6, 0, 3, "post_act_residual_r2", 1, {}, 2);
}

// Copies of an MLP with LayerNorm: each copy's LayerNorm roots add gamma's and beta's
// gradients into the same segment of the column's sum as the bias's; and GELU with replicas
// (its scratch once shared a symbol with the sum's buffer).
TEST(Training, LayerNormReplicasSumTheirGradients) {
  MlpSpec spec{{24, 16, 12, 5}, "Gelu", 7, 17};
  spec.layernorm = true;
  check_against_reference(spec, 48, 6, 0, 3, "ln_replicas2", 1, {}, 2);
  check_against_reference(spec, 48, 7, 0, 2, "ln_replicas3", 1, {}, 3);
}

// Convolutions in layer-pipelined mode (docs/compiler.md, "Convolutions"): padded and strided,
// MaxPool with an uncovered row, AveragePool, on a budget that splits their channels over
// several tiles and roots (the partial planes chain, dx chains over the output slices): bit
// for bit against reference.cc.
TEST(Training, ConvolutionsMatchReference) {
  CnnSpec spec;
  spec.c = 2, spec.h = 9, spec.w = 8;
  spec.convs = {{4, 3, 1, 1, "MaxPool", 2}, {5, 3, 2, 1, "AveragePool", 2}};
  spec.dense = {6, 3};
  Rig r = make_rig(spec, 24, 6, 0, "lp_conv_probe");
  const Plan& p = r.res.compiled.plan;
  int split = 0;
  for (const LayerPlan& l : p.layers) split += l.conv.on && (l.p_in > 1 || l.p_out > 1);
  EXPECT_GT(split, 0) << "the whole fabric should split a convolution's channels";
  check_against_reference(spec, 24, 6, 0, 3, "lp_conv");
}

// Overlapping windows (3 x 3, stride 2, as AlexNet's and ResNet's stems pool): an element in
// two windows takes both windows' gradients, added in the firmware's order (row of windows,
// tap, window); MaxPool and AveragePool, on a budget that splits the channels.
TEST(Training, OverlappingPoolingMatchesReference) {
  check_against_reference(overlap_pool_spec(11, 10), 24, 6, 24, 3, "lp_conv_overlap");
}

// Padded pooling (testbench/mlp_model.h padded_pool_spec): MaxPool over -inf pads, AveragePool
// dividing each window by its inputs (a table at the roots) and by the whole window: bit for
// bit against reference.cc, on a budget that splits the channels.
TEST(Training, PaddedPoolingMatchesReference) {
  check_against_reference(padded_pool_spec(13, 12), 24, 6, 24, 3, "lp_conv_padpool");
  check_against_reference(ceil_pool_spec(), 24, 6, 24, 3, "lp_conv_ceilpool");  // ceil_mode's windows past the plane
}

// HardSwish after convolutions (its derivative taken at z, which the roots keep): bit for bit
// against reference.cc, with the channels split over roots.
TEST(Training, ConvolutionsWithPreActivationsMatchReference) {
  check_against_reference(pre_act_conv_spec(12, 11), 24, 6, 24, 3, "lp_conv_preact");
}

// Residual blocks of convolutions (testbench/mlp_model.h residual_conv_spec: ResNet's order, the
// sum after the activation with an AveragePool, a block's sum the next one's source): the
// source roots send their planes to the target roots, which add them before or after the
// activation and send the sum's gradient back. Bit for bit against reference.cc, with the
// channels split over four roots, and with HardSwish (its derivative at z) on a budget of 90 PEs.
TEST(Training, ConvolutionResidualBlocksMatchReference) {
  check_against_reference(residual_conv_spec(8, 7, "Relu"), 40, 6, 0, 3, "lp_conv_residual");
  CnnSpec hs = residual_conv_spec(7, 7, "HardSwish");
  hs.opset = 14;
  check_against_reference(hs, 40, 6, 90, 2, "lp_conv_residual_split");
}

// A MaxPool over the whole plane (torch's AdaptiveMaxPool2d(1)): its taps in a loop, not
// unrolled; bit for bit against reference.cc.
TEST(Training, WholePlaneMaxPoolMatchesReference) {
  CnnSpec spec;
  spec.c = 2, spec.h = 9, spec.w = 9;
  spec.convs = {{4, 3, 1, 1, "MaxPool", 9}};
  spec.dense = {3};
  check_against_reference(spec, 20, 4, 0, 3, "lp_conv_gmp");
}

// GlobalAveragePool after a LeakyReLU convolution, Tanh on three channels with no pooling.
TEST(Training, ConvolutionsWithGlobalPoolingLeakyReluAndTanh) {
  CnnSpec spec;
  spec.c = 3, spec.h = 7, spec.w = 7;
  spec.act = "LeakyRelu";
  spec.convs = {{4, 3, 1, 1, "GlobalAveragePool", 0}};
  spec.dense = {5, 3};
  check_against_reference(spec, 20, 5, 0, 3, "lp_conv_gap");
  CnnSpec t;
  t.c = 3, t.h = 6, t.w = 6;
  t.act = "Tanh";
  t.convs = {{3, 3, 1, 0, "", 0}, {2, 2, 2, 0, "MaxPool", 2}};
  t.dense = {4};
  check_against_reference(t, 20, 4, 40, 3, "lp_conv_tanh");
}

// Random small CNNs (seeded: the same every run): 1-3 input channels, non-square planes, kernels
// 1-4, strides 1-2, pads up to k - 1 (taps that read only padding), MaxPool, AveragePool or
// GlobalAveragePool, on budgets that split their channels differently; each bit for bit
// against reference.cc over two steps.
TEST(Training, RandomConvolutionsMatchReference) {
  uint64_t st = 20261129;
  auto pick = [&](int lo, int hi) {  // uniform in [lo, hi]
    st = st * 6364136223846793005ULL + 1442695040888963407ULL;
    return lo + static_cast<int>((st >> 33) % static_cast<uint64_t>(hi - lo + 1));
  };
  const char* acts[] = {"Relu", "LeakyRelu", "Tanh", "Sigmoid"};
  const int budgets[] = {0, 24, 40};
  for (int t = 0; t < 12; ++t) {
    CnnSpec spec;
    spec.c = pick(1, 3), spec.h = pick(5, 11), spec.w = pick(5, 11);
    spec.act = acts[pick(0, 3)];
    spec.seed = static_cast<uint64_t>(t + 3);
    int h = spec.h, w = spec.w;
    const int convs = pick(1, 2);
    for (int l = 0; l < convs; ++l) {
      ConvLayerSpec cv;
      cv.co = pick(1, 5);
      cv.k = pick(1, std::min(4, std::min(h, w)));
      cv.stride = pick(1, 2);
      cv.pad = pick(0, cv.k - 1);
      h = (h + 2 * cv.pad - cv.k) / cv.stride + 1, w = (w + 2 * cv.pad - cv.k) / cv.stride + 1;
      const int pool = pick(0, 3);
      if (pool == 3 && l + 1 == convs) {
        cv.pool = "GlobalAveragePool";
        h = w = 1;
      } else if (pool >= 1 && h >= 2 && w >= 2) {
        cv.pool = pool == 1 ? "MaxPool" : "AveragePool";
        cv.pool_k = 2;
        h /= 2, w /= 2;
      }
      spec.convs.push_back(cv);
      if (h < 2 || w < 2) break;
    }
    spec.dense = {pick(2, 5)};
    std::cout << "case " << t << ": " << spec.c << "x" << spec.h << "x" << spec.w << " " << spec.act << ", " << spec.convs.size()
              << " convolutions\n";
    check_against_reference(spec, 32, 5, budgets[t % 3], 2, "lp_conv_random" + std::to_string(t));
  }
}

// Copies of a CNN, each convolution's tiles and roots summing their gradients (the taps' and
// the biases') over the copies with the dense layers' column streams.
TEST(Training, ConvolutionReplicasSumTheirGradients) {
  CnnSpec spec;
  spec.c = 2, spec.h = 8, spec.w = 8;
  spec.convs = {{3, 3, 1, 1, "MaxPool", 2}, {4, 3, 1, 0, "", 0}};
  spec.dense = {3};
  check_against_reference(spec, 48, 6, 0, 3, "lp_conv_replicas2", 1, {}, 2);
  check_against_reference(spec, 48, 7, 0, 2, "lp_conv_replicas5", 1, {}, 5);
}

// What LayerNorm does not run yet in layer-pipelined mode says so by name: two minibatches in
// flight (replicas since 2026-11-29: Training.LayerNormReplicasSumTheirGradients). Weight
// streaming places it (since 2026-11-29: WsTraining.LayerNorm*).
TEST(Training, LayerNormRefusalsNameTheNode) {
  MlpSpec spec{{24, 16, 12, 5}, "Relu", 7, 17};
  spec.layernorm = true;
  const std::string path = tmp_path("layernorm_refusals.onnx");
  write_mlp(path, spec);
  CompileOptions co;
  const KernelGraph g = validate_model(import_onnx(path), co);
  ASSERT_TRUE(g.unsupported.empty());
  const HwConfig hw = small_config(40, 40);
  auto message = [&](auto&& f) {
    try {
      f();
    } catch (const CompileError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  WsOptions wo;
  wo.batch = 4;
  EXPECT_EQ(message([&] { place_ws(g, hw, wo); }), "no error");
  PlaceOptions po;
  po.batch = 8;
  po.in_flight = 2;
  EXPECT_NE(message([&] { place_layers(g, hw, po); }).find("with train.in_flight 2 is not supported yet"), std::string::npos);
  po.in_flight = 1;
  // The LayerNorm's one slice binds the next layer too: a wide one before the classifier does
  // not fit, and the message says why rather than suggesting a larger budget.
  MlpSpec wide{{16, 640, 10}, "Relu", 7, 17};
  wide.layernorm = true;
  const std::string wpath = tmp_path("layernorm_wide.onnx");
  write_mlp(wpath, wide);
  const KernelGraph gw = validate_model(import_onnx(wpath), co);
  EXPECT_NE(message([&] { place_layers(gw, hw, po); }).find("in the one slice the LayerNorm '/norm1/LayerNormalization' leaves it"),
            std::string::npos);
  // A LayerNorm after the activation is taken (ln.post); a residual Add after it is not yet.
  MlpSpec post{{16, 16, 16, 4}, "Relu", 7, 17};
  post.layernorm = post.layernorm_post = true;
  const std::string ppath = tmp_path("layernorm_post.onnx");
  write_mlp(ppath, post);
  const KernelGraph gp = validate_model(import_onnx(ppath), co);
  ASSERT_TRUE(gp.unsupported.empty());
  EXPECT_TRUE(gp.layers[0].ln.on && gp.layers[0].ln.post && gp.layers[1].ln.post && !gp.layers[2].ln.on);
  post.residual = true;
  write_mlp(ppath, post);
  const KernelGraph gr = validate_model(import_onnx(ppath), co);
  ASSERT_FALSE(gr.unsupported.empty());
  EXPECT_EQ(gr.unsupported[0].why, "a residual Add after a LayerNorm of the activated output (h + LayerNorm(act(W h + b))) is not supported yet");
}

// The same with two copies of the model (each its own residual streams).
TEST(Training, ResidualConnectionsWithReplicasMatchReference) {
  check_against_reference(residual_spec(), 40, 6, 60, 2, "residual_r2", 1, {}, 2);
}

TEST(Training, WideGridsMatchReference) {
  check_against_reference(MlpSpec{{64, 48, 10}, "Relu", 9, 13}, 40, 8, 40, 2, "wide");
}

}  // namespace
}  // namespace wafersim::test

namespace wafersim::test {
namespace {

// One layer: the first layer is also the last (its root computes the loss; no input gradients).
TEST(Training, SingleLayerMatchesReference) {
  check_against_reference(MlpSpec{{20, 5}, "Relu", 4, 13}, 24, 4, 8, 3, "single");
}

}  // namespace
}  // namespace wafersim::test

namespace wafersim::test {
namespace {

// Two minibatches in flight (train.in_flight 2): the next minibatch's first ring_depth samples
// pass with the weights before the update; bit for bit against the reference of those
// semantics, with drains in the middle and at the end, and fewer cycles than one in flight.
TEST(Training, TwoMinibatchesInFlightMatchReference) {
  const MlpSpec spec{{12, 10, 3}, "Tanh", 3, 13};
  check_against_reference(spec, 24, 6, 12, 5, "inflight2", 2, {2});
  // Without a drain but at the end the overlap saves cycles (a drain costs some back).
  const uint64_t two = check_against_reference(spec, 24, 6, 12, 8, "inflight2", 2);
  const uint64_t one = check_against_reference(spec, 24, 6, 12, 8, "inflight1", 1);
  std::cout << "cycles of 8 steps: one in flight " << one << ", two " << two << "\n";
  EXPECT_LT(two, one);
}

// A minibatch smaller than the ring (the lookahead is the whole next minibatch), layers on grids
// of tiles, a sigmoid chain.
TEST(Training, TwoInFlightWithMinibatchSmallerThanTheRing) {
  check_against_reference(MlpSpec{{40, 24, 16, 12, 5}, "Sigmoid", 5, 13}, 40, 3, 60, 4, "inflight_small", 2);
}

// One layer: its root is the loss root, and its tiles compute no input gradients.
TEST(Training, TwoInFlightSingleLayer) {
  check_against_reference(MlpSpec{{20, 5}, "Relu", 4, 13}, 24, 5, 8, 4, "inflight_single", 2, {3});
}

}  // namespace
}  // namespace wafersim::test

namespace wafersim::test {
namespace {

// Replicas (compile.replicas): copies of the model in bands of the fabric, each taking every
// R-th sample, their gradients summed on the wafer by column streams in a fixed copy order,
// then the same update: bit for bit against the reference of that order, every copy the same.
TEST(Training, ReplicasSumTheirGradientsOnTheWafer) {
  const MlpSpec spec{{12, 10, 3}, "Tanh", 3, 13};
  check_against_reference(spec, 24, 6, 0, 3, "replicas2", 1, {}, 2);
  check_against_reference(spec, 24, 7, 0, 3, "replicas3", 1, {}, 3);  // uneven: 3, 2, 2 samples
  // Copies that relay both halves' streams (north of the middle copy and south of it).
  check_against_reference(spec, 48, 10, 0, 2, "replicas5", 1, {}, 5);
}

// Grids of tiles in each copy (the columns' streams pass several PEs of a copy), four layers.
TEST(Training, ReplicasOfGridsMatchReference) {
  check_against_reference(MlpSpec{{40, 24, 16, 12, 5}, "Sigmoid", 5, 13}, 48, 6, 0, 2, "replicas_grid", 1, {}, 2);
}

}  // namespace
}  // namespace wafersim::test
