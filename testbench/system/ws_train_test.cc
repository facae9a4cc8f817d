// Weight-streaming training on simulated wafers against the host reference of the same math.
// The reference shares MemoryX and SwarmX::tree_sum with the run it checks, so an error in either
// would pass here: ctest torch_roundtrip_ws (scripts/test_torch_roundtrip.py) checks 2-system runs
// with SGD and Adam against PyTorch, sharing no code.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <systemc>

#include "compiler/compile.h"
#include "compiler/ws_codegen.h"
#include "compiler/ws_reference.h"
#include "firmware/program.h"
#include "mlp_model.h"
#include "test_support.h"
#include "tlm/cluster.h"
#include "tlm/memoryx.h"
#include "tlm/model_util.h"
#include "tlm/swarmx.h"
#include "tlm/ws_trainer.h"

#include <tlm_utils/simple_initiator_socket.h>

#define SKIP_IF_KERNEL_STARTED()                                                          \
  if (sc_core::sc_get_status() != sc_core::SC_ELABORATION)                                \
  GTEST_SKIP() << "a SystemC kernel already ran in this process (new modules are refused); " \
                  "ctest runs each test alone"

namespace wafersim::test {
namespace {

using namespace compiler;

// An MLP written to the test's scratch directory and matched to kernels.
KernelGraph mlp_graph(const std::string& file, const MlpSpec& spec) {
  const std::string path = tmp_path(file);
  write_mlp(path, spec);
  return validate_model(import_onnx(path), CompileOptions{});
}

// The reference MemoryX's socket must be bound to something before the kernel starts.
struct Unused : sc_core::sc_module {
  tlm_utils::simple_initiator_socket<Unused> socket;
  explicit Unused(sc_core::sc_module_name n) : sc_module(n), socket("socket") {}
};

struct WsRig {
  HwConfig hw;
  KernelGraph graph;
  WsCompiled compiled;
  tlm::Dataset data;
  tlm::Normalize norm;
};

// The rig of the model at `path` (`features` inputs, `classes` outputs).
WsRig make_ws_rig_file(const std::string& path, int features, int classes, int width, int height, int spacing, const WsOptions& o,
                       int sram_kb = 0) {
  WsRig r;
  r.hw = small_config(width, height);
  r.hw.io.spacing = spacing;
  if (sram_kb) r.hw.core.sram_kb = sram_kb;
  CompileOptions co;
  r.graph = validate_model(import_onnx(path), co);
  if (!r.graph.unsupported.empty()) {
    const Unsupported& u = r.graph.unsupported.front();
    throw std::runtime_error(path + ": node '" + u.node + "' (" + u.op + ") unsupported: " + u.why);
  }
  const WsPlan plan = place_ws(r.graph, r.hw, o);
  r.compiled = generate_ws(plan, asm_target(r.hw));
  r.data = synthetic_dataset(64, static_cast<size_t>(features), classes, 3);
  return r;
}

WsRig make_ws_rig(const MlpSpec& spec, int width, int height, int spacing, const WsOptions& o, const std::string& name,
                  int sram_kb = 0) {
  const std::string path = tmp_path(name + ".onnx");
  write_mlp(path, spec);
  return make_ws_rig_file(path, spec.widths.front(), spec.widths.back(), width, height, spacing, o, sram_kb);
}

WsRig make_ws_rig(const CnnSpec& spec, int width, int height, int spacing, const WsOptions& o, const std::string& name,
                  int sram_kb = 0) {
  const std::string path = tmp_path(name + ".onnx");
  write_cnn(path, spec);
  return make_ws_rig_file(path, spec.features(), spec.dense.back(), width, height, spacing, o, sram_kb);
}

// Trains `steps` minibatches on the wafers and, alongside, on the reference (per-system
// gradients, SwarmX's tree sum, a MemoryX of its own); weights, biases and losses must agree bit
// for bit.
template <typename Spec>
void check_ws(const Spec& spec, int width, int height, int spacing, const WsOptions& o, int steps, const std::string& name,
              int sram_kb = 0) {
  WsRig r = make_ws_rig(spec, width, height, spacing, o, name, sram_kb);
  const WsPlan& p = r.compiled.plan;
  std::cout << "rows " << p.rows << " cols " << p.cols << " m " << p.m << " systems " << p.systems << "\n";
  tlm::MemoryXConfig mc;
  mc.lr = 0.05f;
  tlm::MemoryX mref(("mref_" + name).c_str(), mc);
  Unused unused(("unused_" + name).c_str());
  unused.socket.bind(mref.socket);
  tlm::SwarmXConfig sc;
  sc.systems = p.systems;
  tlm::Cluster k(("ws_" + name).c_str(), mc, sc, tlm::WsHostLinks{}, r.hw, r.graph, r.compiled, r.data, r.norm, 11, 0);
  tlm::WsTrainer& t = k.trainer();
  std::vector<int> rw, rb;
  for (size_t l = 0; l < r.graph.layers.size(); ++l) {
    const DenseKernel& d = r.graph.layers[l];
    rw.push_back(mref.add_tensor("w" + std::to_string(l), d.w));
    std::vector<float> root = d.b;  // with a LayerNorm: b, gamma, beta (as the trainer's MemoryX holds them)
    if (d.ln.on) {
      root.insert(root.end(), d.ln.g.begin(), d.ln.g.end());
      root.insert(root.end(), d.ln.b.begin(), d.ln.b.end());
    }
    rb.push_back(mref.add_tensor("b" + std::to_string(l), root));
  }
  tlm::InputWorker order(r.data, {}, r.norm, 11);
  for (int s = 0; s < steps; ++s) {
    std::vector<std::vector<float>> w, b;
    WsNorms norms;
    for (size_t l = 0; l < rw.size(); ++l) {
      w.push_back(mref.weights(rw[l]));
      std::vector<float> root = mref.weights(rb[l]);
      const auto n = static_cast<long>(r.graph.layers[l].w_out());
      norms.g.emplace_back();
      norms.b.emplace_back();
      if (r.graph.layers[l].ln.on) {
        norms.g.back().assign(root.begin() + n, root.begin() + 2 * n);
        norms.b.back().assign(root.begin() + 2 * n, root.end());
        root.resize(static_cast<size_t>(n));
      }
      b.push_back(std::move(root));
    }
    std::vector<WsGrads> per;
    for (int i = 0; i < p.systems; ++i) {
      std::vector<std::vector<float>> xs;
      std::vector<const float*> ptrs;
      std::vector<int> labels;
      for (int j = 0; j < p.shard; ++j) {
        const size_t idx = order.sample_at(static_cast<long long>(s) * p.batch + i * p.shard + j);
        std::vector<float> x(r.data.features);
        for (size_t k = 0; k < x.size(); ++k) x[k] = r.norm.apply(r.data.sample(idx)[k], k);
        xs.push_back(std::move(x));
        labels.push_back(r.data.labels[idx]);
      }
      for (auto& x : xs) ptrs.push_back(x.data());
      per.push_back(ws_reference_grads(p, w, b, ptrs, labels, norms));
      for (size_t l = 0; l < rw.size(); ++l) {  // the roots' gradients as they leave: db, d gamma, d beta
        auto& g = per.back();
        g.db[l].insert(g.db[l].end(), g.dg[l].begin(), g.dg[l].end());
        g.db[l].insert(g.db[l].end(), g.dbeta[l].begin(), g.dbeta[l].end());
      }
    }
    auto tree = [&](auto get, size_t n) {
      std::vector<const float*> parts;
      for (auto& g : per) parts.push_back(get(g));
      std::vector<float> out(n);
      tlm::SwarmX::tree_sum(parts, n, 4, out.data());
      return out;
    };
    for (size_t l = 0; l < rw.size(); ++l) {
      const auto gw = tree([&](WsGrads& g) { return g.dw[l].data(); }, per[0].dw[l].size());
      const auto gb = tree([&](WsGrads& g) { return g.db[l].data(); }, per[0].db[l].size());
      // The reference's own accumulator starts at zero, as MemoryX's does.
      std::vector<float> gw2 = gw, gb2 = gb;
      ::tlm::tlm_generic_payload t1;
      auto write = [&](int id, std::vector<float>& g) {
        tlm::detail::set_plain(t1, ::tlm::TLM_WRITE_COMMAND, mref.base(id), g.data(), g.size() * 4);
        sc_core::sc_time d;
        mref.b_transport(t1, d);
        ASSERT_FALSE(t1.is_response_error());
      };
      write(rw[l], gw2);
      write(rb[l], gb2);
    }
    const float loss = tree([&](WsGrads& g) { return &g.loss_sum; }, 1)[0];
    mref.step();
    const tlm::WsStepResult res = t.step();
    std::cout << "step " << s + 1 << " loss " << res.mean_loss << " cycles " << res.cycles << "\n";
    const float wl = static_cast<float>(res.mean_loss * p.batch);
    EXPECT_NEAR(wl, loss, std::fabs(loss) * 1e-6f) << "loss sum of step " << s + 1;
    const auto ww = t.weights(), wb = t.biases();
    for (size_t l = 0; l < rw.size(); ++l) {
      expect_same_bits(ww[l], mref.weights(rw[l]), "w" + std::to_string(l) + " after step " + std::to_string(s + 1));
      expect_same_bits(wb[l], mref.weights(rb[l]), "b" + std::to_string(l) + " after step " + std::to_string(s + 1));
    }
  }
}

// The test-set evaluation's batched forward gives every sample the single-sample forward's
// logits bit for bit (a count that is not a multiple of its block of 64, two threads, rows of
// unequal slices).
// Also with branches, gated joins and residual sums (MlpSpec::branch "ffn").
void check_batched_forward(const MlpSpec& spec, const std::string& name) {
  WsOptions o;
  o.batch = 4;
  const WsRig r = make_ws_rig(spec, 16, 32, 4, o, name);
  const WsPlan& p = r.compiled.plan;
  std::vector<std::vector<float>> w, b;
  for (const auto& layer : r.graph.layers) {
    w.push_back(layer.w);
    b.push_back(layer.b);
  }
  std::vector<const float*> xs;
  for (size_t i = 0; i < 150; ++i) xs.push_back(r.data.sample(i % r.data.count));  // 3 blocks of 64, 2 threads
  const auto zs = ws_reference_forward_batch(p, w, b, xs, 2);
  ASSERT_EQ(zs.size(), xs.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    const auto z = ws_reference_forward(p, w, b, xs[i]);
    ASSERT_EQ(zs[i].size(), z.size());
    for (size_t k = 0; k < z.size(); ++k) {
      uint32_t a, c;
      std::memcpy(&a, &zs[i][k], 4);
      std::memcpy(&c, &z[k], 4);
      EXPECT_EQ(a, c) << "sample " << i << " logit " << k;
    }
  }
}

TEST(WsReference, BatchedForwardEqualsOneSampleForward) {
  check_batched_forward(MlpSpec{{37, 23, 9, 5}, "Tanh", 5, 13}, "wsref_batch");
  MlpSpec ffn{{37, 12, 20, 9, 5}, "Tanh", 5, 13};
  ffn.branch = "ffn";
  check_batched_forward(ffn, "wsref_batch_ffn");
}

// The bit-for-bit tests below cover both ways a row runs a layer: sample by sample where its
// slice is at least as long as its samples, feature by feature where it is shorter (with a
// strided column when the slice is longer than one feature, and a plain one when it is one).
TEST(WsPlan, NarrowSlicesRunFeatureByFeature) {
  WsOptions o;
  o.batch = 4;
  o.rows = 3;  // the shape of ws_one's first choice
  o.columns = 1;
  const WsRig r = make_ws_rig(MlpSpec{{16, 8, 6, 4}, "Relu", 7, 13}, 12, 16, 4, o, "ws_ways");  // as ws_one
  const WsPlan& p = r.compiled.plan;
  ASSERT_EQ(p.rows, 3);
  ASSERT_EQ(p.m, 4);
  for (int a = 0; a < p.rows; ++a) {
    EXPECT_FALSE(p.by_feature(0, a)) << "row " << a;  // 5 or 6 of 16 inputs
    EXPECT_TRUE(p.by_feature(1, a)) << "row " << a;   // 2 or 3 of 8
    EXPECT_TRUE(p.by_feature(2, a)) << "row " << a;   // 2 of 6
  }
  o.batch = 8;
  o.rows = 4;  // 7 features over 4 rows: a slice of one (fixed: the estimate's own choice moves)
  o.columns = 2;
  const WsRig q = make_ws_rig(MlpSpec{{12, 7, 5, 3}, "Sigmoid", 5, 13}, 12, 20, 4, o, "ws_ways_m4");  // as ws_m4
  bool one = false;
  for (int a = 0; a < q.compiled.plan.rows; ++a) one = one || (q.compiled.plan.len(1, a) == 1 && q.compiled.plan.by_feature(1, a));
  EXPECT_TRUE(one) << "a one-feature slice run feature by feature";
}

// A row that runs feature by feature adds t into acc two elements a step: the two buffers' reads
// must fall in different banks for every sample count, or each step takes a second cycle.
TEST(WsPlan, FeatureByFeatureScratchSitsOffTheAccumulatorsBanks) {
  for (const int batch : {15, 16, 18, 64, 126}) {
    WsOptions o;
    o.batch = batch;
    o.rows = 3;  // slices of 5 or 6 inputs and fewer: feature by feature from layer 1 on
    o.columns = 1;
    const WsRig r = make_ws_rig(MlpSpec{{16, 8, 6, 4}, "Relu", 7, 13}, 12, 16, 4, o, "ws_banks");
    int checked = 0;
    for (const ProgramImage& im : r.compiled.program.images) {
      const Symbol* acc = im.image.find("acc");
      const Symbol* ftm = im.image.find("ftm");
      if (!acc || !ftm) continue;
      const long d = (static_cast<long>(ftm->addr) - static_cast<long>(acc->addr)) / 2 % r.hw.core.sram_banks;
      EXPECT_TRUE(d >= 4 && d <= r.hw.core.sram_banks - 4) << im.name << " at batch " << batch << ": " << d << " words apart";
      ++checked;
    }
    EXPECT_GT(checked, 0) << "no row ran feature by feature at batch " << batch;
  }
}

// No batch cap but SRAM: where one column's operands would be longer than a descriptor (dy of
// 1200 outputs x 64 samples), the mapping takes more columns although SRAM would hold them;
// asked for one column, it says what to change; a batch beyond 65,535 samples compiles.
TEST(WsPlan, OperandsLongerThanADescriptorTakeMoreColumns) {
  HwConfig hw = small_config(16, 9);
  hw.io.spacing = 4;
  hw.core.sram_kb = 1024;
  const KernelGraph g = mlp_graph("ws_desc.onnx", MlpSpec{{64, 1200, 10}, "Relu", 3, 13});
  WsOptions o;
  o.batch = 64;
  o.rows = 2;
  const WsPlan p = place_ws(g, hw, o);
  EXPECT_GE(p.cols, 2);
  EXPECT_LE(static_cast<long>(p.m) * 1200, 65535);
  o.columns = 1;  // refused for the descriptor (place_ws checks SRAM first: one column fits SRAM)
  try {
    place_ws(g, hw, o);
    ADD_FAILURE() << "one column of 64 samples accepted";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("longer than one descriptor (65535); use more sample columns (ws.columns)"),
              std::string::npos)
        << e.what();
  }
  o.rows = 0;
  o.columns = 0;
  o.batch = 131072;
  const WsPlan big = place_ws(mlp_graph("ws_desc_small.onnx", MlpSpec{{32, 16, 10}, "Relu", 3, 13}), small_config(757, 996), o);
  EXPECT_EQ(big.shard, 131072);
  EXPECT_GE(static_cast<long long>(big.cols) * big.m, 131072);  // columns of m or m - 1 samples
  EXPECT_LT(static_cast<long long>(big.cols) * (big.m - 1), 131072);
  EXPECT_LE(big.row_bytes, 48L * 1024);
}

// One estimate: the compile report's total and its per-layer stream times are ws_estimate's,
// for a neutral host and a slow one, with and without prefetch; and the host's pace is built
// from the models' own delays (a SwarmX and a MemoryX module give the same times).
TEST(WsEstimate, TheReportShowsTheOneEstimateAndThePaceIsTheModelsDelays) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 4;
  const WsRig r = make_ws_rig(MlpSpec{{16, 8, 6, 4}, "Relu", 7, 13}, 12, 16, 4, o, "ws_estimate");
  tlm::ClusterConfig c;
  c.swarmx.systems = 4;
  c.swarmx.fanout = 2;
  c.swarmx.link_gbps = 10;
  c.memx.latency_ns = 700;
  c.bridge.latency_ns = 50;
  const double mhz = r.hw.fabric.clock_mhz;
  for (const bool prefetch : {true, false}) {
    c.prefetch = prefetch;
    for (const WsHostPace& pace : {WsHostPace{}, tlm::ws_host_pace(c, mhz, r.graph)}) {
      const WsEstimate e = ws_estimate(r.graph, r.compiled.plan, pace);
      const nlohmann::json j = ws_compile_report(r.graph, r.compiled.plan, r.hw, pace);
      EXPECT_DOUBLE_EQ(j["cycles_per_batch"].get<double>(), e.cycles_per_batch);
      double sum = pace.reduce_cycles;
      for (size_t l = 0; l < e.layers.size(); ++l) {
        EXPECT_DOUBLE_EQ(j["kernels"][l]["weight_stream_cycles"].get<double>(), e.layers[l].stream_f);
        sum += e.layers[l].fwd + e.layers[l].bwd;
      }
      EXPECT_GE(e.cycles_per_batch, sum);  // plus the first request and READ with prefetch
    }
  }
  tlm::SwarmX sx("swarmx_pace", c.swarmx);
  tlm::MemoryX mx("memoryx_pace", c.memx);
  const double ns = 1e3 / mhz;  // per cycle
  const compiler::WsHostPace pace = tlm::ws_host_pace(c, mhz, r.graph);
  EXPECT_NEAR(pace.latency_cycles * ns,
              mx.transfer_delay(0).to_seconds() * 1e9 + sx.tree_time(0).to_seconds() * 1e9 + c.bridge.latency_ns, 0.01);  // ps rounding
  // The gradients stream into SwarmX during the passes: after the last result only the first
  // layer's sums are on their way, a tree's and MemoryX's latency (tlm/streamed.h).
  const double reduce = sx.tree_time(0).to_seconds() + mx.transfer_delay(0).to_seconds();
  EXPECT_NEAR(pace.reduce_cycles * ns, reduce * 1e9, 0.01);
  EXPECT_DOUBLE_EQ(pace.weights_per_cycle, 10e9 / 32.0 / (mhz * 1e6));  // the 10 Gb/s SwarmX link is the slowest
  // The input stream: W workers side by side, a sample (16 features and its label) each per
  // their sample time, the slowest worker's pace for all; the estimate's inputs never beat it.
  c.input_workers = 2;
  c.worker_gbps = 8;
  c.slow_worker_gbps = 2;
  const compiler::WsHostPace slow = tlm::ws_host_pace(c, mhz, r.graph);
  EXPECT_NEAR(slow.sample_cycles, 17 * 32.0 / 2.0 * (mhz * 1e-3) / 2, 1e-9);
  EXPECT_GE(ws_estimate(r.graph, r.compiled.plan, slow).input_cycles, r.compiled.plan.shard * slow.sample_cycles);
}

TEST(WsTraining, OneSystemMatchesReferenceBitForBit) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 4;
  check_ws(MlpSpec{{16, 8, 6, 4}, "Relu", 7, 13}, 12, 16, 4, o, 3, "ws_one");
}

TEST(WsTraining, SeveralSamplesPerColumnAndSigmoid) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 8;
  o.rows = 4;     // a one-feature slice among them (WsPlan.NarrowSlicesRunFeatureByFeature)
  o.columns = 2;  // 4 samples per column: the dW and db parts are vsums
  check_ws(MlpSpec{{12, 7, 5, 3}, "Sigmoid", 5, 13}, 12, 20, 4, o, 3, "ws_m4");
}

TEST(WsTraining, LeakyReluMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 8;
  o.columns = 2;
  check_ws(MlpSpec{{12, 7, 5, 3}, "LeakyRelu", 5, 13}, 12, 20, 4, o, 3, "ws_leaky");
}

// The activations written as programs (compiler/activations/) beyond the first four, in the
// rows (the derivative, feature-major) and the roots (forward; a CNN's planes too), bit for bit
// (one SystemC run per test).
void check_ws_activation(const char* act) {
  WsOptions o;
  o.batch = 8;
  o.columns = 2;
  check_ws(MlpSpec{{12, 7, 5, 3}, act, 5, 13}, 12, 20, 4, o, 2, std::string("ws_acts_") + act);
}
void check_ws_conv_activation(const char* act) {
  CnnSpec c;
  c.c = 1, c.h = 7, c.w = 7;
  c.convs = {{3, 2, 1, 0, "MaxPool", 2}};
  c.dense = {3};
  c.act = act;
  WsOptions o;
  o.batch = 4;
  check_ws(c, 8, 12, 4, o, 2, std::string("ws_acts_conv_") + act);
}
TEST(WsTraining, EluMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_activation("Elu");
}
TEST(WsTraining, SoftplusMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_activation("Softplus");
}
TEST(WsTraining, SoftsignMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_activation("Softsign");
}
TEST(WsTraining, HardSigmoidMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_activation("HardSigmoid");
}
TEST(WsTraining, ClipMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_activation("Clip");
}
TEST(WsTraining, ConvolutionsWithEluMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_conv_activation("Elu");
}
TEST(WsTraining, ConvolutionsWithClipMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_conv_activation("Clip");
}

// Residual connections of the 10-10-10-6-6-3 MLP (`act` between, the sums after it or, with
// `pre`, before it), 8 samples on 2 columns of a 12 x 20 fabric; bit for bit over 3 steps.
void check_ws_residual(const std::string& act, uint64_t seed, bool pre, const std::string& name) {
  WsOptions o;
  o.batch = 8;
  o.columns = 2;
  MlpSpec spec{{10, 10, 10, 6, 6, 3}, act, seed, 13};
  spec.residual = true;
  spec.residual_pre = pre;
  check_ws(spec, 12, 20, 4, o, 3, name);
}

// Residual connections (h = h + act(fc(h))): from the model input (fc1), into a boundary that
// is itself the source of the next one (fc2), and after a narrower layer (fc4); 4 feature rows
// of 1 to 3 features for 4 samples a column run feature by feature.
TEST(WsTraining, ResidualConnectionsMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_residual("Tanh", 5, false, "ws_residual");
}

// The sum before the activation (h = act(fc(h) + h)): the roots return z, the rows add their
// slice of the source and apply the activation (ReLU: its derivative at y), and the source's
// share of the gradient is the one after the derivative. From the model input too.
TEST(WsTraining, PreActivationResidualsMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_residual("Relu", 9, true, "ws_residual_pre");
}

// Branches and gated joins (MlpSpec::branch; docs/weight-streaming.md#branches): a second layer
// on a hidden layer's input whose output multiplies (a GLU) or adds to (a projection shortcut)
// the layer's activated output; from the model input (no dx) and from a hidden boundary (its dx
// into G of the boundary it reads, added to the main path's). Bit for bit against the reference.
WsOptions branch_options(int rows, bool grid) {
  WsOptions o;
  o.batch = 8;
  o.columns = 2;
  o.rows = rows;
  o.grid = grid;
  return o;
}

void check_ws_branch(const std::string& branch, const std::string& act, const std::string& name, const WsOptions& o) {
  MlpSpec spec{{10, 12, 8, 3}, act, 5, 13};
  spec.branch = branch;
  check_ws(spec, 12, 20, 4, o, 3, name);
}

TEST(WsTraining, GatedUnitsMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_branch("glu", "Tanh", "ws_glu", branch_options(0, false));
}

// The gate's Gemm first: the join then sits on the layer with the activation (a GELU, which the
// rows apply, keeping its output apart for the gate's gradient); feature by feature on 4 rows.
TEST(WsTraining, GatedUnitsWithTheGateFirstMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_branch("glu_gate_first", "Gelu", "ws_glu_first", branch_options(4, false));
}

// A transformer's gated feed-forward blocks with their residual connections (MlpSpec::branch
// "ffn"): each block's input is read by the up layer (the chain), the gate (a branch) and the
// sum (a residual connection), so its gradient takes three contributions in G's fixed order.
TEST(WsTraining, GatedFeedForwardBlocksMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  MlpSpec spec{{12, 10, 14, 9, 4}, "Tanh", 6, 13};
  spec.branch = "ffn";
  check_ws(spec, 12, 20, 4, branch_options(0, false), 3, "ws_ffn");
}

// Differences of two layers' outputs, both orders (x_k - y and y - x_k).
TEST(WsTraining, DifferencesMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_branch("sub", "Tanh", "ws_sub", branch_options(0, false));
}

TEST(WsTraining, DifferencesWithTheSideFirstMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_branch("sub_side_first", "Gelu", "ws_sub_first", branch_options(4, false));
}

// On the grid layout: 7 feature rows in bands round the West channels.
TEST(WsTraining, ProjectionShortcutsMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_branch("proj", "Relu", "ws_proj", branch_options(7, true));
}

// Blocks of two layers (h + act(fc2(act(fc1(h))))): the sum's source is two boundaries back.
TEST(WsTraining, TwoLayerResidualBlocksMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 6;
  o.columns = 3;
  MlpSpec spec{{16, 10, 7, 10, 7, 10, 4}, "Relu", 8, 13};
  spec.residual = true;
  spec.residual_span = 2;
  check_ws(spec, 12, 20, 4, o, 3, "ws_residual_span2");
}

// GELU (the Erf form, torch's default): the roots return z, the rows apply the GELU and keep z
// for the derivative; feature by feature (slices of 1 to 3 for 4 samples a column).
TEST(WsTraining, GeluMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 8;
  o.columns = 2;
  check_ws(MlpSpec{{12, 7, 5, 3}, "Gelu", 5, 13}, 12, 20, 4, o, 3, "ws_gelu");
}

// Convolutions (weight streaming's feature rows, channels split over them: here 2 rows,
// docs/weight-streaming.md#convolutions):
// a CNN of a padded strided convolution with MaxPool, one with AveragePool and one with
// GlobalAveragePool, two samples a column; bit for bit against ws_reference.cc.
TEST(WsTraining, ConvolutionsMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  CnnSpec spec;
  spec.c = 2, spec.h = 9, spec.w = 8;
  spec.convs = {{4, 3, 1, 1, "MaxPool", 2}, {5, 3, 2, 1, "AveragePool", 2}};
  spec.dense = {6, 3};
  WsOptions o;
  o.batch = 6;
  o.columns = 3;
  check_ws(spec, 8, 12, 4, o, 3, "ws_conv");
}

// Channels over four feature rows (since 2026-11-29, the fourth session): one input channel
// (rows 1 to 3 take no input), 5 channels split 1, 1, 1, 2, then 3 (the last row's slice
// empty: it passes the planes of partial sums on); each row sums its channels' taps and the
// planes add down the column in row order. Bit for bit against ws_reference.cc.
TEST(WsTraining, ConvolutionChannelsSplitOverFeatureRows) {
  SKIP_IF_KERNEL_STARTED();
  CnnSpec spec;
  spec.c = 1, spec.h = 10, spec.w = 9;
  spec.convs = {{5, 3, 1, 1, "MaxPool", 2}, {3, 3, 1, 1, ""}, {4, 2, 1, 0, "AveragePool", 2}};
  spec.dense = {6, 3};
  WsOptions o;
  o.batch = 8;
  o.columns = 2;
  o.rows = 4;
  check_ws(spec, 8, 20, 4, o, 3, "ws_conv_rows4");
}

// A CNN of batch 8 on `columns` columns (two: 4 samples a column) of a 8 x 12 fabric, three
// steps, bit for bit against ws_reference.cc (the pooling and residual tests below).
void check_ws_pooling(const CnnSpec& spec, const std::string& name, int columns = 2) {
  WsOptions o;
  o.batch = 8;
  o.columns = columns;
  check_ws(spec, 8, 12, 4, o, 3, name);
}

// Overlapping pooling windows (3 x 3, stride 2), MaxPool and AveragePool, at the roots: bit for
// bit against ws_reference.cc (the same pooling code as layer-pipelined mode's).
TEST(WsTraining, OverlappingPoolingMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_pooling(overlap_pool_spec(13, 12), "ws_conv_overlap");
}

// Padded pooling windows (MaxPool, AveragePool with and without the pads counted) at the roots.
TEST(WsTraining, PaddedPoolingMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_pooling(padded_pool_spec(13, 12), "ws_conv_padpool");
}

// ceil_mode's last windows past the plane (testbench/mlp_model.h ceil_pool_spec).
// A MaxPool over the whole plane (torch's AdaptiveMaxPool2d(1)), its taps in a loop at the roots.
TEST(WsTraining, WholePlaneMaxPoolMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  CnnSpec spec;
  spec.c = 2, spec.h = 9, spec.w = 9;
  spec.convs = {{4, 3, 1, 1, "MaxPool", 9}};
  spec.dense = {3};
  check_ws_pooling(spec, "ws_conv_gmp");
}

TEST(WsTraining, CeilModePoolingMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_pooling(ceil_pool_spec(), "ws_conv_ceilpool");
}

// HardSwish after convolutions (the roots keep z, apply it before the pooling, and a max
// pooling's backward takes y again from z): bit for bit against ws_reference.cc.
TEST(WsTraining, ConvolutionsWithPreActivationsMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 6;
  o.columns = 3;
  check_ws(pre_act_conv_spec(12, 11), 8, 12, 4, o, 3, "ws_conv_preact");
}

// Residual connections around convolutions (ResNet's blocks), at the roots: the sum before the
// activation and after it, pooled after it, a block's sum the next one's source; ReLU (its
// derivative at y) and HardSwish (at z, which the root keeps). Bit for bit against
// ws_reference.cc, 2 samples a column (the planes of 7 convolutions fit a PE so).

TEST(WsTraining, ConvolutionResidualBlocksMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_pooling(residual_conv_spec(9, 10, "Relu"), "ws_conv_residual", 4);
}

// Tanh after an unpooled convolution: the rows fill a vector of ones at init (hundreds of
// cycles), and with the host's links unbounded (check_ws) the inputs reach them meanwhile. They
// set their input's ramp filter first: before 2026-11-29 it came at init's end, and the words
// that came before it entered unfiltered (a loss 0.4 % off the reference's, and off PyTorch's).
TEST(WsTraining, InputsThatArriveDuringInitAreFiltered) {
  SKIP_IF_KERNEL_STARTED();
  CnnSpec spec;
  spec.c = 2, spec.h = 8, spec.w = 7;
  spec.act = "Tanh";
  spec.convs = {{4, 3, 1, 0, ""}};
  spec.dense = {3};
  check_ws_pooling(spec, "ws_conv_early_inputs");
}

TEST(WsTraining, ConvolutionResidualBlocksWithPreActivations) {
  SKIP_IF_KERNEL_STARTED();
  CnnSpec spec = residual_conv_spec(8, 7, "HardSwish");
  spec.opset = 14;
  check_ws_pooling(spec, "ws_conv_residual_hswish", 4);
}

// LayerNorm before each hidden activation (ReLU; GELU, which the rows apply to the normalised
// values), at the roots: bit for bit against ws_reference.cc, with gamma and beta trained.
MlpSpec ln_spec(std::vector<int> widths, const std::string& act) {
  MlpSpec spec{std::move(widths), act, 5, 17};
  spec.layernorm = true;
  return spec;
}

TEST(WsTraining, LayerNormMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 8;
  o.columns = 2;
  check_ws(ln_spec({12, 9, 7, 3}, "Relu"), 12, 20, 4, o, 3, "ws_ln");
}

// LayerNorm after each hidden activation: the roots apply the activation (keeping y, or a
// GELU's z), normalise, and backward take the norm's gradient, then the derivative; the rows
// take none. Bit for bit against ws_reference.cc.
// An MLP of `batch` samples on `columns` sample columns of a width x 20 fabric, three steps,
// bit for bit against ws_reference.cc.
void check_ws_columns(const MlpSpec& spec, int width, int batch, int columns, const std::string& name) {
  WsOptions o;
  o.batch = batch;
  o.columns = columns;
  check_ws(spec, width, 20, 4, o, 3, name);
}

MlpSpec ln_post_spec(std::vector<int> widths, const std::string& act) {
  MlpSpec spec = ln_spec(std::move(widths), act);
  spec.layernorm_post = true;
  return spec;
}

TEST(WsTraining, PostActivationLayerNormMatchesTheReference) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_columns(ln_post_spec({12, 9, 7, 3}, "Sigmoid"), 12, 8, 2, "ws_ln_post");
}

TEST(WsTraining, PostActivationLayerNormWithGelu) {
  SKIP_IF_KERNEL_STARTED();
  check_ws_columns(ln_post_spec({14, 10, 8, 4}, "Gelu"), 14, 6, 3, "ws_ln_post_gelu");
}

// Scalar steps after each hidden activation (-0.75 tanh(z) + 0.25): the rows apply the chain
// to the z the roots return and keep z for its derivative. Bit for bit against ws_reference.cc.
TEST(WsTraining, ScalarStepsAfterActivationsMatchTheReference) {
  SKIP_IF_KERNEL_STARTED();
  MlpSpec spec{{12, 9, 7, 3}, "Tanh", 5, 13};
  spec.post_mul = -0.75f, spec.post_add = 0.25f;
  check_ws_columns(spec, 12, 8, 2, "ws_post_act");
}

TEST(WsTraining, GridLayerNormWithGelu) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 6;
  o.grid = true;
  o.rows = 5;
  o.columns = 3;
  check_ws(ln_spec({23, 11, 6, 4}, "Gelu"), 10, 40, 4, o, 3, "ws_ln_grid");
}

TEST(WsTraining, ConvolutionsWithGlobalPoolingAndLeakyRelu) {
  SKIP_IF_KERNEL_STARTED();
  CnnSpec spec;
  spec.c = 1, spec.h = 7, spec.w = 7;
  spec.convs = {{3, 2, 1, 0, ""}, {4, 3, 1, 0, "GlobalAveragePool"}};
  spec.dense = {3};
  spec.act = "LeakyRelu";
  WsOptions o;
  o.batch = 4;
  check_ws(spec, 8, 12, 4, o, 3, "ws_conv_gap");
}

// Three input channels, a strided padded convolution, Tanh (whose derivative takes a vector of
// ones at the roots) and a dense hidden layer: the roots' descriptor registers hold (a
// convolution's and the loss's share a pool; 45 of 44 before).
TEST(WsTraining, ConvolutionsWithTanhOnThreeChannels) {
  SKIP_IF_KERNEL_STARTED();
  CnnSpec spec;
  spec.c = 3, spec.h = 10, spec.w = 10;
  spec.convs = {{5, 3, 2, 1, "MaxPool", 2}, {4, 2, 1, 0, "GlobalAveragePool"}};
  spec.dense = {6, 3};
  spec.act = "Tanh";
  WsOptions o;
  o.batch = 4;
  o.columns = 2;
  check_ws(spec, 8, 12, 4, o, 3, "ws_conv_tanh");
}

// One SystemC kernel per process: one configuration per test.
void systems_tanh(int n) {
  WsOptions o;
  o.batch = 8;
  o.systems = n;
  check_ws(MlpSpec{{10, 9, 4}, "Tanh", 3, 13}, 10, 16, 4, o, 2, "ws_sys" + std::to_string(n));
}

TEST(WsTraining, TwoSystemsTanh) {
  SKIP_IF_KERNEL_STARTED();
  systems_tanh(2);
}

TEST(WsTraining, FourSystemsTanh) {
  SKIP_IF_KERNEL_STARTED();
  systems_tanh(4);
}

TEST(WsTraining, SingleLayer) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 6;
  check_ws(MlpSpec{{9, 5}, "Relu", 9, 13}, 8, 24, 2, o, 3, "ws_one_layer");
}

// A row's input stream longer than one descriptor (16 columns x 80 features x 64 samples =
// 81,920 wavelets a minibatch): each column's ramp filter lets in only its own part, minibatch
// after minibatch (the window moves on by the whole stream each time).
TEST(WsTraining, InputStreamsLongerThanOneDescriptor) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 1024;
  o.columns = 16;
  check_ws(MlpSpec{{80, 8, 4}, "Relu", 6, 13}, 16, 5, 4, o, 2, "ws_long_stream");
}

// The labels on the root row longer than one descriptor: the last of 40 root columns drops the
// other columns' 78,000 labels in chunks of at most 65,535 (a longer dlen faults, as on a WSE-2)
// before it takes its 2,000; a shard of 80,000 samples (more than a 16-bit index could name).
TEST(WsTraining, LabelStreamsLongerThanOneDescriptor) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 80000;
  o.columns = 40;
  check_ws(MlpSpec{{2, 2}, "Relu", 2, 13}, 40, 5, 4, o, 2, "ws_long_labels", 128);
}

TEST(WsTraining, FourLayersManyRows) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o;
  o.batch = 4;
  check_ws(MlpSpec{{20, 11, 9, 7, 4}, "Relu", 4, 13}, 6, 30, 3, o, 2, "ws_four_layers");
}

// The grid layout's options of a test: batch, sample columns, feature rows, packing (0: the
// estimate's choice, 1 packed, 2 spread).
WsOptions grid_options(int batch, int columns, int rows, int pack = 0) {
  WsOptions o;
  o.batch = batch;
  o.columns = columns;
  o.rows = rows;
  o.grid = true;
  o.pack = pack;
  return o;
}

// Wide grid rows send their dW in blocks (64 columns: blocks of 2 outputs, the last of an odd
// layer's shorter; one block's send in flight while the next fills), bit for bit.
TEST(WsTraining, GridDwBlocks) {
  SKIP_IF_KERNEL_STARTED();
  const WsOptions o = grid_options(130, 64, 6);  // 3 or 2 samples a column
  check_ws(MlpSpec{{19, 7, 5}, "Relu", 5, 13}, 68, 24, 4, o, 2, "ws_dw_blocks");
}

// A shard that does not split evenly: 10 samples over 4 columns hold 3, 3, 2 and 2 (each
// column's code, input window and labels its own), on the grid's bands packed from the top.
TEST(WsTraining, UnevenSamplesPerColumn) {
  SKIP_IF_KERNEL_STARTED();
  const WsOptions o = grid_options(10, 4, 12, 1);  // packed: 6 channels' West and East bands, the root on the 7th
  check_ws(MlpSpec{{17, 7, 5}, "Tanh", 5, 13}, 10, 40, 4, o, 2, "ws_uneven");
}

// The grid layout's bands: up to one row per channel, a West band of the channel row each (as
// the rows layout); more rows fill West bands (a channel row and rows above it) and East bands
// (rows below it) evenly, within io.spacing of the channel; rows ascend and never share a fabric
// row; the dW leave from each band's head outward.
// A row PE holds the widest layer's dy whole, so where that alone outgrows SRAM no number of
// feature rows helps: the error says how many samples per column fit and what batch that allows,
// and that batch compiles (both layouts).
TEST(WsPlan, ABatchWhoseDyOutgrowsSramSaysWhatFits) {
  HwConfig hw = small_config(16, 33);  // 9 channel rows: slices of a quarter of 600 or less
  hw.io.spacing = 4;
  hw.core.sram_kb = 9;
  const KernelGraph g = mlp_graph("ws_dy.onnx", MlpSpec{{16, 600, 10}, "Relu", 3, 13});
  for (const bool grid : {false, true}) {
    WsOptions o;
    o.grid = grid;
    o.batch = 64;
    std::string what;
    try {
      place_ws(g, hw, o);
      ADD_FAILURE() << "a batch of 64 accepted with 9 KB per PE";
    } catch (const CompileError& e) {
      what = e.what();
    }
    const int cols = grid ? 12 : 16;  // the grid keeps two relay columns on each edge
    EXPECT_NE(what.find("holds the whole gradient dy of the widest layer (600 outputs x "), std::string::npos) << what;
    EXPECT_NE(what.find(" at most 1 sample(s) per column fit, so at most " + std::to_string(cols) + " samples per system"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("more systems (--systems), or a larger core.sram_kb"), std::string::npos) << what;
    o.batch = cols;
    const WsPlan p = place_ws(g, hw, o);
    EXPECT_EQ(p.m, 1);
    EXPECT_LE(p.row_bytes, 9L * 1024);
  }
}

// A root PE with many classes: the plan's SRAM count covers every buffer its program lays out
// (the logits and their gradients per sample, six per-class vectors of the loss), so a core too
// small for it is the plan's error naming the root, never an assembler's "image does not fit",
// and the loss's max tree fits the descriptor registers (until 2026-11-28 the plan counted five
// per-class vectors, and the tree took a register pair per halving: 200 classes ran out of 44).
TEST(WsPlan, TheRootsSramCountsEveryBuffer) {
  const KernelGraph g = mlp_graph("ws_root_sram.onnx", MlpSpec{{16, 8, 200}, "Relu", 3, 13});
  int planned = 0;
  for (int kb = 4; kb <= 24; ++kb) {
    HwConfig hw = small_config(16, 33);
    hw.io.spacing = 4;
    hw.core.sram_kb = kb;
    WsOptions o;
    o.batch = 8;
    o.columns = 2;
    try {
      const WsPlan p = place_ws(g, hw, o);
      generate_ws(p, asm_target(hw));
      ++planned;
    } catch (const std::exception& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("weight-streaming: "), std::string::npos) << kb << " KB: " << what;  // the plan's
    }
  }
  EXPECT_GT(planned, 0);
}

TEST(WsPlan, GridBandsUseBothEdges) {
  // The bands of `rows` rows on a 10 x 40 fabric, io.spacing 4, packed (1) or spread (2).
  auto bands = [](int rows, int pack, const std::string& name) {
    return make_ws_rig(MlpSpec{{23, 11, 3, 4}, "Relu", 5, 13}, 10, 40, 4, grid_options(8, 2, rows, pack), name);
  };
  const WsRig few = bands(5, 2, "ws_bands_few");  // spread: every channel's West band first
  const WsPlan& f = few.compiled.plan;
  ASSERT_EQ(f.bands(), 5);
  for (int b = 0; b < f.bands(); ++b) {
    EXPECT_EQ(f.band_east[static_cast<size_t>(b)], 0);
    EXPECT_EQ(f.row_y[static_cast<size_t>(b)], f.band_y[static_cast<size_t>(b)]);
  }
  const WsRig many = bands(23, 2, "ws_bands_many");
  const WsPlan& p = many.compiled.plan;
  ASSERT_EQ(p.rows, 23);
  int east = 0;
  for (int b = 0; b < p.bands(); ++b) {
    const int first = p.band_first[static_cast<size_t>(b)], last = p.band_first[static_cast<size_t>(b) + 1] - 1;
    const int yc = p.band_y[static_cast<size_t>(b)];
    EXPECT_LE(last - first + 1, 2);  // io.spacing 4: 2 rows a side
    for (int a = first; a < last; ++a) EXPECT_EQ(p.row_y[static_cast<size_t>(a) + 1], p.row_y[static_cast<size_t>(a)] + 1);
    if (p.band_east[static_cast<size_t>(b)]) {
      ++east;
      EXPECT_EQ(p.row_y[static_cast<size_t>(first)], yc + 1);
      EXPECT_EQ(p.egress_order(b).front(), first);
    } else {
      EXPECT_EQ(p.row_y[static_cast<size_t>(last)], yc);
      EXPECT_EQ(p.egress_order(b).front(), last);
    }
  }
  EXPECT_GT(east, 0);
  for (int a = 0; a + 1 < p.rows; ++a) EXPECT_LT(p.row_y[static_cast<size_t>(a)], p.row_y[static_cast<size_t>(a) + 1]);
  EXPECT_LT(p.row_y.back(), p.root_y);
  const nlohmann::json r = ws_compile_report(many.graph, p, many.hw, WsHostPace{});
  EXPECT_EQ(r["channels_used"].get<int>(), p.bands() + 1);
  EXPECT_EQ(r["pes_per_system"].get<int>(), (p.rows + 1) * p.cols + 2 * p.rows);
  // Packed: from the top, a channel's West band, then its East band, then the next channel's.
  const WsRig packed = bands(5, 1, "ws_bands_packed");
  const WsPlan& k = packed.compiled.plan;
  ASSERT_EQ(k.bands(), 5);
  for (int b = 0; b < k.bands(); ++b) {
    EXPECT_EQ(k.band_east[static_cast<size_t>(b)], b % 2);
    EXPECT_EQ(k.band_channel[static_cast<size_t>(b)], b / 2);
  }
  EXPECT_EQ(k.root_channel, 3);
}

// The grid layout (ws.layout grid): bands of 1 and 2 adjacent rows on both edges (io.spacing 4),
// fed through their relays, with rows whose slice of the narrow layers is empty (the first
// row's included: it starts the chain at 0), several samples per column and a sigmoid's
// derivative.
TEST(WsTraining, GridBandsWithEmptySlices) {
  SKIP_IF_KERNEL_STARTED();
  const WsOptions o = grid_options(8, 2, 20);
  check_ws(MlpSpec{{23, 11, 3, 4}, "Sigmoid", 5, 13}, 10, 40, 4, o, 3, "ws_grid");
}

// Residual connections on the grid: 20 rows for 11 features (empty slices skip the sum), sample
// by sample (slices of 1 for 1 sample a column).
void grid_residual(const std::string& act, const std::string& name) {
  const WsOptions o = grid_options(4, 4, 20);
  MlpSpec spec{{23, 11, 11, 11, 4}, act, 6, 13};
  spec.residual = true;
  check_ws(spec, 10, 40, 4, o, 3, name);
}

TEST(WsTraining, GridResidualWithEmptySlices) {
  SKIP_IF_KERNEL_STARTED();
  grid_residual("Relu", "ws_grid_residual");
}

// The same with GELU's tanh form, which the rows apply to z before the sum.
TEST(WsTraining, GridGeluTanhWithResidualConnections) {
  SKIP_IF_KERNEL_STARTED();
  grid_residual("GeluTanh", "ws_grid_gelu_tanh");
}

// The same on the grid (empty slices) with a GELU, its derivative at the sum the rows keep.
TEST(WsTraining, GridPreActivationResidualsWithGelu) {
  SKIP_IF_KERNEL_STARTED();
  const WsOptions o = grid_options(4, 4, 20);
  MlpSpec spec{{23, 11, 11, 11, 4}, "Gelu", 6, 13};
  spec.residual = true;
  spec.residual_pre = true;
  check_ws(spec, 10, 40, 4, o, 3, "ws_grid_residual_pre_gelu");
}

// Two systems on the grid, one sample per column, the bands' East rows reducing their dW east.
TEST(WsTraining, GridTwoSystems) {
  SKIP_IF_KERNEL_STARTED();
  WsOptions o = grid_options(8, 0, 30);
  o.systems = 2;
  check_ws(MlpSpec{{40, 9, 6}, "Tanh", 3, 13}, 8, 40, 4, o, 2, "ws_grid2");
}

// WsSystem::cycle() walks its West channels by bitmasks (what can move, refusals by ranges);
// the plain loop over every channel must give the same, cycle by cycle: refusals, the time
// split, and the results. Passes arrive one by one (the host late with weights: empty channels
// count), and the weight link is slower than the channels take (budget runs out mid-walk) or
// faster (channels fill up and refuse).
TEST(WsSystemLoop, BitmasksMatchThePlainLoop) {
  WsOptions o;
  o.batch = 4;
  o.rows = 3;
  o.columns = 1;
  const WsRig r = make_ws_rig(MlpSpec{{16, 8, 6, 4}, "Relu", 7, 13}, 12, 16, 2, o, "ws_masks");
  const WsPlan& p = r.compiled.plan;
  const int L = p.layers;
  ASSERT_GE(p.rows, 3);
  for (const double wrate : {0.6, 3.0}) {
    tlm::WsHostLinks on;
    on.weights_per_cycle = wrate;
    on.inputs_per_cycle = 0.8;
    tlm::WsHostLinks off = on;
    off.channel_masks = false;
    tlm::WsSystem a(r.hw, r.compiled, 0, on), b(r.hw, r.compiled, 0, off);
    std::vector<std::vector<float>> xs;
    for (int s = 0; s < p.shard; ++s) xs.emplace_back(r.data.sample(static_cast<size_t>(s)), r.data.sample(static_cast<size_t>(s)) + r.data.features);
    for (tlm::WsSystem* sys : {&a, &b}) {
      sys->start_step();
      for (int s = 0; s < p.shard; ++s) sys->sample_arrived(s, xs[static_cast<size_t>(s)].data(), r.data.labels[static_cast<size_t>(s)], 40 * static_cast<uint64_t>(s));
    }
    int queued = 0;
    uint64_t c = 0;
    uint64_t refused_seen = 0;
    for (; !(a.done() && b.done()) && c < 2000000; ++c) {
      if (queued < p.streamed_passes() && c == 400 * static_cast<uint64_t>(queued)) {  // pass by pass, late
        const int l = queued < L ? queued : 2 * L - 1 - queued;
        const auto& layer = r.graph.layers[static_cast<size_t>(l)];
        for (tlm::WsSystem* sys : {&a, &b}) sys->queue_pass(queued, layer.w.data(), queued < L ? layer.b.data() : nullptr, c);
        ++queued;
      }
      a.cycle();
      b.cycle();
      ASSERT_EQ(a.refused(), b.refused()) << "cycle " << c << ", weights at " << wrate << " per cycle";
      const tlm::WsTime &ta = a.step_time(), &tb = b.step_time();
      ASSERT_TRUE(ta.compute == tb.compute && ta.weight_stream == tb.weight_stream && ta.grad_reduce == tb.grad_reduce &&
                  ta.input_stall == tb.input_stall)
          << "cycle " << c << ", weights at " << wrate << " per cycle";
      refused_seen = a.refused();
    }
    // Layer 0's backward pass needs no weights: the minibatch ends without it, and it cannot be queued.
    ASSERT_TRUE(a.done() && b.done()) << "no end after " << c << " cycles";
    EXPECT_EQ(p.streamed_passes(), 2 * L - 1);
    EXPECT_THROW(a.queue_pass(2 * L - 1, r.graph.layers[0].w.data(), nullptr, c), std::logic_error);
    std::cout << "weights at " << wrate << " per cycle: " << c << " cycles, " << refused_seen << " refusals, "
              << a.step_time().weight_stream << " cycles waiting for weights\n";
    // The slow link never lets a channel fill; the fast one must.
    if (wrate > 1) {
      EXPECT_GT(refused_seen, 0u) << "no channel was ever full: the refusal count went untested";
    }
    EXPECT_GT(a.step_time().weight_stream, 0u) << "the host was never late: the empty channels went untested";
    std::vector<std::vector<float>> dwa, dba, dwb, dbb;
    float la = 0, lb = 0;
    a.results(&dwa, &dba, &la);
    b.results(&dwb, &dbb, &lb);
    for (int l = 0; l < L; ++l) {
      expect_same_bits(dwa[static_cast<size_t>(l)], dwb[static_cast<size_t>(l)], "dW" + std::to_string(l));
      expect_same_bits(dba[static_cast<size_t>(l)], dbb[static_cast<size_t>(l)], "db" + std::to_string(l));
    }
    EXPECT_EQ(f32_bits(la), f32_bits(lb));
  }
}

// A 1.86 M-parameter MLP on a 16 x 16 fabric: layer-pipelined placement rejects it (its weights
// and momentum need more SRAM than the fabric has) and weight streaming trains it, bit for bit
// against the reference.
TEST(WsTraining, ModelTooLargeForLayerPipelinedTrains) {
  SKIP_IF_KERNEL_STARTED();
  const MlpSpec spec{{784, 1024, 1024, 10}, "Relu", 2, 13};
  HwConfig hw = small_config(16, 16);
  hw.io.spacing = 1;
  const KernelGraph g = mlp_graph("ws_big.onnx", spec);
  PlaceOptions po;
  po.batch = 8;
  po.max_pes = 0;
  try {
    place_layers(g, hw, po);
    FAIL() << "layer-pipelined placement accepted a model larger than the fabric";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("weight-streaming"), std::string::npos) << e.what();
  }
  WsOptions o;
  o.batch = 8;
  check_ws(spec, 16, 16, 1, o, 1, "ws_big");
}

}  // namespace
}  // namespace wafersim::test
