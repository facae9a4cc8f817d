// `wafersim train` end to end on Fashion-MNIST (Debian's dataset-fashion-mnist): checkpoints and
// resume, determinism across runs and host thread counts, and the compile report's estimate
// against the measured rate.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "app/train_cmd.h"
#include "compiler/onnx_model.h"
#include "mlp_model.h"
#include "test_support.h"

namespace wafersim::test {
namespace {

namespace fs = std::filesystem;

const char* kFashion = "/usr/share/datasets/fashion-mnist";

int train(std::vector<std::string> args, std::string* log = nullptr) {
  std::ostringstream out, err;
  const int rc = train_command(args, out, err);
  if (log) *log = out.str() + err.str();
  if (rc != 0) ADD_FAILURE() << "wafersim train " << ::testing::PrintToString(args) << " failed:\n" << out.str() << err.str();
  return rc;
}

void expect_same_weights(const fs::path& a, const fs::path& b) {
  const auto ma = compiler::import_onnx(a.string()), mb = compiler::import_onnx(b.string());
  ASSERT_EQ(ma.initializers.size(), mb.initializers.size());
  for (const auto& [name, t] : ma.initializers) {
    ASSERT_TRUE(mb.initializers.count(name)) << name;
    const auto& u = mb.initializers.at(name);
    ASSERT_EQ(t.f32.size(), u.f32.size()) << name;
    EXPECT_EQ(0, std::memcmp(t.f32.data(), u.f32.data(), t.f32.size() * 4)) << name << " differs";
  }
  EXPECT_EQ(ma.metadata, mb.metadata);
}

class TrainCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
};

TEST_F(TrainCli, ResumeGivesTheSameResultBitForBit) {
  const fs::path a = tmp_path("tr_full"), b = tmp_path("tr_half"), c = tmp_path("tr_resumed");
  for (const auto& d : {a, b, c}) fs::remove_all(d);
  train({"--train.steps", "6", "--train.eval", "0", "-o", a.string()});
  train({"--train.steps", "3", "--train.eval", "0", "-o", b.string()});
  std::string log;
  train({"--resume", (b / "checkpoint.onnx").string(), "--train.steps", "3", "--train.eval", "0", "-o", c.string()}, &log);
  EXPECT_NE(log.find("resuming from"), std::string::npos) << log;
  expect_same_weights(a / "checkpoint.onnx", c / "checkpoint.onnx");
  // The resolved configuration next to the results carries the training values too.
  const std::string ini = slurp(a / "config.ini");
  EXPECT_NE(ini.find("lr = 0.00999999978\n"), std::string::npos) << ini;
  EXPECT_NE(ini.find("steps = 6\n"), std::string::npos) << ini;
  // Losses and cycles of steps 4..6: every minibatch starts from an idle wafer.
  EXPECT_EQ(loss_lines(a, 4), loss_lines(c, 4));
  EXPECT_FALSE(fs::exists(a / "checkpoint.onnx.tmp"));
}

TEST_F(TrainCli, CheckpointAtAnIntervalIsTheStateOfThatStep) {
  const fs::path a = tmp_path("tr_ckpt"), b = tmp_path("tr_two");
  for (const auto& d : {a, b}) fs::remove_all(d);
  // With checkpoints every 2 steps the file after step 4 of 5 is overwritten by the final one;
  // a 4-step run without intervals must equal the interval run's state at step 4.
  train({"--train.steps", "4", "--train.checkpoint_every", "2", "--train.eval", "0", "-o", a.string()});
  train({"--train.steps", "2", "--train.eval", "0", "-o", b.string()});
  train({"--resume", (b / "checkpoint.onnx").string(), "--train.steps", "2", "--train.checkpoint_every", "1",
         "--train.eval", "0", "-o", b.string()});
  expect_same_weights(a / "checkpoint.onnx", b / "checkpoint.onnx");
  const auto m = compiler::import_onnx((a / "checkpoint.onnx").string());
  EXPECT_EQ(m.metadata.at("wafersim.step"), "4");
  EXPECT_TRUE(m.initializers.count("fc1.weight.momentum"));
}

TEST_F(TrainCli, DeterministicAcrossRunsAndThreadCounts) {
  const fs::path a = tmp_path("tr_det1"), b = tmp_path("tr_det2");
  for (const auto& d : {a, b}) fs::remove_all(d);
  train({"--train.steps", "3", "--train.eval", "0", "-o", a.string()});
  train({"--train.steps", "3", "--train.eval", "0", "--sim.threads", "2", "-o", b.string()});
  EXPECT_EQ(slurp(a / "losses.csv"), slurp(b / "losses.csv"));
  EXPECT_EQ(slurp(a / "checkpoint.onnx"), slurp(b / "checkpoint.onnx"));
  // The fabric's traffic (run report) is the same count whatever the threads, and adds up: every
  // wavelet delivered was sent by a router, and something was injected.
  auto traffic = [](const fs::path& d) { return nlohmann::json::parse(slurp(d / "run_report.json")).at("fabric"); };
  const nlohmann::json ta = traffic(a);
  EXPECT_EQ(ta, traffic(b));
  EXPECT_GT(ta.at("injected").get<uint64_t>(), 0u);
  EXPECT_GE(ta.at("router_sends").get<uint64_t>(), ta.at("delivered").get<uint64_t>());
  EXPECT_GT(ta.at("delivered").get<uint64_t>(), 0u);
  // A different seed shuffles differently.
  const fs::path c = tmp_path("tr_det3");
  fs::remove_all(c);
  train({"--train.steps", "3", "--train.eval", "0", "--sim.seed", "2", "-o", c.string()});
  EXPECT_NE(slurp(a / "losses.csv"), slurp(c / "losses.csv"));
}

// --stats.fabric writes the fabric's counters over the training steps: every router send the run
// report counts is in the per-PE matrix, and the results are those of a run without it.
TEST_F(TrainCli, FabricStatsCoverTheSteps) {
  const fs::path a = tmp_path("tr_fs1"), b = tmp_path("tr_fs2");
  for (const auto& d : {a, b}) fs::remove_all(d);
  train({"--train.steps", "2", "--train.eval", "0", "--stats.fabric", "true", "-o", a.string()});
  train({"--train.steps", "2", "--train.eval", "0", "-o", b.string()});
  const nlohmann::json rep = nlohmann::json::parse(slurp(a / "run_report.json"));
  const long long sends = rep.at("fabric").at("router_sends").get<long long>();
  EXPECT_GT(sends, 0);
  EXPECT_EQ(csv_sum(a / "fabric" / "pe_forwarded.csv"), sends);
  const nlohmann::json st = nlohmann::json::parse(slurp(a / "fabric" / "stats.json"));
  EXPECT_EQ(st.at("cycles").get<uint64_t>() - st.at("counters_since_cycle").get<uint64_t>(), rep.at("cycles").get<uint64_t>());
  EXPECT_FALSE(fs::exists(b / "fabric"));
  EXPECT_EQ(slurp(a / "losses.csv"), slurp(b / "losses.csv"));
  EXPECT_EQ(slurp(a / "checkpoint.onnx"), slurp(b / "checkpoint.onnx"));
}

// The compile report's overall samples/s against the measured rate of the same run, on two
// models and placements (docs/compiler.md quotes the figures). Measured at 8f00da7: the demo
// 0.53 % (83,967 estimated, 83,522 measured), the 784-48-10 tanh MLP on 24 PEs 0.31 % (105,887,
// 105,565); each case's tolerance is about 3x its error: 1.5 % (2.8x) and 0.9 % (2.9x).
TEST_F(TrainCli, EstimateWithin1Point5PercentOfMeasured) {
  const std::string other = tmp_path("mlp_784_48_10.onnx");
  write_mlp(other, MlpSpec{{784, 48, 10}, "Tanh", 5, 13});
  struct Case {
    std::vector<std::string> args;
    double tolerance;  // relative
  };
  const Case cases[] = {
      {{"--compile.max_pes", "16", "--train.steps", "4", "--train.eval", "0"}, 0.015},  // the demo's budget
      {{other, "--compile.max_pes", "24", "--train.steps", "4", "--train.eval", "0"}, 0.009},
      // Two minibatches in flight: the lookahead hides layer 0's idle wait (measured -1.2 %).
      {{"--compile.max_pes", "16", "--train.steps", "4", "--train.eval", "0", "--train.in_flight", "2"}, 0.03},
  };
  int i = 0;
  for (const Case& k : cases) {
    const fs::path d = tmp_path("tr_est" + std::to_string(i++));
    fs::remove_all(d);
    auto args = k.args;
    args.push_back("-o");
    args.push_back(d.string());
    ASSERT_EQ(train(args), 0);
    const auto rep = nlohmann::json::parse(slurp(d / "run_report.json"));
    const double est = rep["estimated_samples_per_s"].get<double>(), meas = rep["measured_samples_per_s"].get<double>();
    std::cout << "estimate " << est << " samples/s, measured " << meas << " (" << rep["estimate_error_pct"].get<double>()
              << " %)\n";
    EXPECT_LT(std::abs(est - meas) / meas, k.tolerance) << "estimate " << est << " vs measured " << meas;
  }
}

// A CNN's estimate (placement.cc: its tap ops with their bank conflicts, its roots op by op, a
// copy's minibatch scheduled pass by pass) against the measured rate, within the 10 % issue 37
// asks, on one copy and on the copies the search takes, with a pooled and a global-average CNN.
// Measured after a8b5765: +0.8 %, -0.3 %, +1.0 %, -0.6 % (the 1-copy cases; then 6 copies each);
// docs/compiler.md#convolutions-layer-pipelined has these models on the whole WSE-2, within 7 %.
// The estimate before a8b5765 was 14 % pessimistic with two samples a copy.
TEST_F(TrainCli, ConvolutionEstimateWithinTenPercentOfMeasured) {
  const std::string lenet = tmp_path("est_lenet.onnx"), leaky = tmp_path("est_leaky.onnx");
  CnnSpec a;
  a.c = 1;
  a.h = a.w = 28;
  a.convs = {ConvLayerSpec{6, 5, 1, 0, "MaxPool", 2}, ConvLayerSpec{12, 5, 1, 0, "MaxPool", 2}};
  a.dense = {64, 10};
  write_cnn(lenet, a);
  CnnSpec b = a;
  b.convs = {ConvLayerSpec{4, 3, 2, 0, "AveragePool", 2}, ConvLayerSpec{8, 3, 1, 1, "GlobalAveragePool", 2}};
  b.dense = {10};
  b.act = "LeakyRelu";
  write_cnn(leaky, b);
  const std::vector<std::string> common = {"--mode", "layer-pipelined", "--fabric.width", "64", "--fabric.height", "96",
                                           "--train.steps", "2", "--train.eval", "0"};
  const std::vector<std::vector<std::string>> cases = {
      {lenet, "--train.batch", "6", "--compile.replicas", "1"},
      {lenet, "--train.batch", "16"},
      {leaky, "--train.batch", "8", "--compile.replicas", "1"},
      {leaky, "--train.batch", "32"},
  };
  int i = 0;
  for (auto args : cases) {
    const fs::path d = tmp_path("tr_cest" + std::to_string(i++));
    fs::remove_all(d);
    args.insert(args.end(), common.begin(), common.end());
    args.push_back("-o");
    args.push_back(d.string());
    ASSERT_EQ(train(args), 0);
    const auto rep = nlohmann::json::parse(slurp(d / "run_report.json"));
    const auto cr = nlohmann::json::parse(slurp(d / "compile_report.json"));
    const double est = rep["estimated_samples_per_s"].get<double>(), meas = rep["measured_samples_per_s"].get<double>();
    std::cout << args[0] << " " << args[2] << ": " << cr.value("replicas", 1) << " copies, estimate " << est << " samples/s, measured "
              << meas << " (" << rep["estimate_error_pct"].get<double>() << " %)\n";
    EXPECT_LT(std::abs(est - meas) / meas, 0.10) << args[0] << " batch " << args[2] << ": estimate " << est << " vs measured " << meas;
  }
}

// Layer-pipelined mode on a whole (reduced) fabric: layer 0's rows spread over the West channels
// until the channels stop binding, the ring covers a sample's round trip, and the estimate stays
// within 10 % of the measured rate; more PEs or more SRAM never lower the measured samples/s.
TEST_F(TrainCli, LayerPipelinedOnTheWholeFabric) {
  const std::vector<std::string> fabric = {"--fabric.width", "64", "--fabric.height", "96", "--train.eval", "0"};
  auto run = [&](const std::string& name, std::vector<std::string> args) {
    const fs::path d = tmp_path(name);
    fs::remove_all(d);
    args.insert(args.end(), fabric.begin(), fabric.end());
    args.push_back("-o");
    args.push_back(d.string());
    EXPECT_EQ(train(args), 0);
    return std::pair{nlohmann::json::parse(slurp(d / "run_report.json")), nlohmann::json::parse(slurp(d / "compile_report.json"))};
  };
  const auto [rep, comp] = run("tr_lp_whole", {"--train.batch", "256", "--train.steps", "2"});
  const double est = rep["estimated_samples_per_s"].get<double>(), meas = rep["measured_samples_per_s"].get<double>();
  std::cout << "64 x 96: " << comp["active_pes"] << " PEs, " << comp["channels_used"] << " channels, ring "
            << comp["ring_depth"] << ": estimate " << est << ", measured " << meas << "\n";
  EXPECT_LT(std::abs(est - meas) / meas, 0.10);
  EXPECT_GE(comp["channels_used"].get<int>(), 5);            // of the fabric's 6
  EXPECT_GT(comp["ring_depth"].get<int>(), 4);               // chosen for the round trip
  EXPECT_GE(comp["ring_depth"].get<double>() * comp["cycles_per_sample"].get<double>(),
            comp["ring_trip_cycles"].get<double>());
  double last = 0;
  for (const char* budget : {"64", "256", "0"}) {
    const double sps = run(std::string("tr_lp_budget") + budget, {"--compile.max_pes", budget, "--train.batch", "64", "--train.steps", "2"})
                           .first["measured_samples_per_s"].get<double>();
    std::cout << "compile.max_pes " << budget << ": " << sps << " samples/s\n";
    EXPECT_GE(sps, last) << "compile.max_pes " << budget;
    last = sps;
  }
  // core.sram_kb 24, 48 (the budget-0 run above), 96.
  auto sram_run = [&](const char* kb) {
    return run(std::string("tr_lp_sram") + kb, {"--core.sram_kb", kb, "--train.batch", "64", "--train.steps", "2"})
        .first["measured_samples_per_s"].get<double>();
  };
  const double s24 = sram_run("24"), s96 = sram_run("96");
  std::cout << "core.sram_kb 24 / 48 / 96: " << s24 << " / " << last << " / " << s96 << " samples/s\n";
  EXPECT_LE(s24, last);
  EXPECT_GE(s96, last);
}

TEST_F(TrainCli, BadInputIsAClearError) {
  std::ostringstream out, err;
  EXPECT_EQ(train_command({"--train.lr", "-1"}, out, err), 2);
  EXPECT_NE(err.str().find("train.lr"), std::string::npos);
  err.str("");
  EXPECT_EQ(train_command({"--data.dir", "/nonexistent", "--train.steps", "1"}, out, err), 2);
  EXPECT_NE(err.str().find("dataset-fashion-mnist"), std::string::npos) << err.str();
  err.str("");
  EXPECT_EQ(train_command({"--resume", "/nonexistent.onnx"}, out, err), 2);
  EXPECT_NE(err.str().find("/nonexistent.onnx"), std::string::npos) << err.str();
  err.str("");
  // A model that is not a checkpoint of ours.
  EXPECT_EQ(train_command({"--resume", WAFERSIM_DEMO_MODEL_PATH}, out, err), 2);
  EXPECT_NE(err.str().find("not a wafersim checkpoint"), std::string::npos) << err.str();
  err.str("");
  // A model whose input does not match the data.
  const std::string small = tmp_path("mlp_small_in.onnx");
  write_mlp(small, MlpSpec{{16, 8, 10}, "Relu", 1, 13});
  EXPECT_EQ(train_command({small, "--train.steps", "1"}, out, err), 2);
  EXPECT_NE(err.str().find("784 features"), std::string::npos) << err.str();
  // Options the run would ignore.
  const std::vector<std::pair<std::vector<std::string>, std::string>> ignored = {
      {{"--resume", ""}, "--resume needs the checkpoint file"},
      {{WAFERSIM_DEMO_MODEL_PATH, "--resume", "x.onnx"}, "give a model or --resume, not both"},
      {{"--data.train_x", "/tmp/x"}, "data.train_x is read with data.source idx or npy only"},
      {{"--memoryx.optimizer", "adam"}, "memoryx.optimizer applies to weight streaming only"},
      {{"--train.in_flight", "3"}, "train.in_flight must be 1 or 2, got 3"},
      {{"--train.in_flight", "2", "--mode", "weight-streaming"}, "train.in_flight applies to layer-pipelined mode only"},
  };
  for (const auto& [args, msg] : ignored) {
    err.str("");
    EXPECT_EQ(train_command(args, out, err), 2) << args[0];
    EXPECT_NE(err.str().find(msg), std::string::npos) << err.str();
  }
}

// SIGINT during training: the run stops after the step in progress, writes its checkpoint,
// losses and report for the steps it finished, and exits 130; resuming from that checkpoint
// gives what an uninterrupted run gives, bit for bit.
TEST_F(TrainCli, InterruptedRunWritesWhatItHasAndResumes) {
  const fs::path a = tmp_path("tr_int"), b = tmp_path("tr_int_resumed"), full = tmp_path("tr_int_full");
  for (const auto& d : {a, b, full}) fs::remove_all(d);
  int rc = -1;
  std::ostringstream out, err;
  std::thread run([&] {
    rc = train_command({"--train.steps", "100000", "--train.checkpoint_every", "1", "--train.eval", "0", "-o", a.string()},
                       out, err);
  });
  while (!fs::exists(a / "losses.csv")) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // step 1 is done
  std::raise(SIGINT);
  run.join();
  ASSERT_EQ(rc, 130) << out.str() << err.str();
  const nlohmann::json rep = nlohmann::json::parse(slurp(a / "run_report.json"));
  const long long n = rep.at("interrupted_after_step").get<long long>();
  ASSERT_GE(n, 1);
  EXPECT_EQ(rep.at("steps").get<long long>(), n);
  EXPECT_EQ(compiler::import_onnx((a / "checkpoint.onnx").string()).metadata.at("wafersim.step"), std::to_string(n));
  const std::string losses = slurp(a / "losses.csv");
  EXPECT_EQ(std::count(losses.begin(), losses.end(), '\n'), n + 1) << losses;
  train({"--resume", (a / "checkpoint.onnx").string(), "--train.steps", "2", "--train.eval", "0", "-o", b.string()});
  train({"--train.steps", std::to_string(n + 2), "--train.eval", "0", "-o", full.string()});
  expect_same_weights(full / "checkpoint.onnx", b / "checkpoint.onnx");
}

// Two minibatches in flight: a run drains at its checkpoints and its end, so resuming from a
// checkpoint repeats the run that wrote it (weights, losses and cycles); an interrupt drains the
// minibatch already begun, and the checkpoint is that of a run of as many steps.
TEST_F(TrainCli, TwoInFlightResumesAndInterruptsBitForBit) {
  const fs::path a = tmp_path("tr_if_full"), b = tmp_path("tr_if_half"), c = tmp_path("tr_if_resumed");
  for (const auto& d : {a, b, c}) fs::remove_all(d);
  const std::vector<std::string> two = {"--train.in_flight", "2", "--train.eval", "0"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), two.begin(), two.end());
    return args;
  };
  std::string log;
  train(with({"--train.steps", "6", "--train.checkpoint_every", "3", "-o", a.string()}), &log);
  EXPECT_NE(log.find("minibatches in flight   2"), std::string::npos) << log;
  train(with({"--train.steps", "3", "-o", b.string()}));
  train(with({"--resume", (b / "checkpoint.onnx").string(), "--train.steps", "3", "-o", c.string()}));
  expect_same_weights(a / "checkpoint.onnx", c / "checkpoint.onnx");
  EXPECT_EQ(loss_lines(a, 4), loss_lines(c, 4));
  // The overlap changes the results: a run without the drain at step 3 differs from one with it.
  const fs::path d = tmp_path("tr_if_nodrain");
  fs::remove_all(d);
  train(with({"--train.steps", "6", "-o", d.string()}));
  EXPECT_NE(slurp(a / "losses.csv"), slurp(d / "losses.csv"));
  // The same on two host threads: the same losses, cycles and checkpoint.
  const fs::path t2 = tmp_path("tr_if_threads");
  fs::remove_all(t2);
  train(with({"--train.steps", "6", "--sim.threads", "2", "-o", t2.string()}));
  EXPECT_EQ(slurp(d / "losses.csv"), slurp(t2 / "losses.csv"));
  EXPECT_EQ(slurp(d / "checkpoint.onnx"), slurp(t2 / "checkpoint.onnx"));

  const fs::path i = tmp_path("tr_if_int"), n = tmp_path("tr_if_n");
  for (const auto& p : {i, n}) fs::remove_all(p);
  int rc = -1;
  std::ostringstream out, err;
  std::thread run([&] { rc = train_command(with({"--train.steps", "100000", "-o", i.string()}), out, err); });
  // config.ini is written once the program is compiled; then a few steps run before the signal.
  while (!fs::exists(i / "config.ini")) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::raise(SIGINT);
  run.join();
  ASSERT_EQ(rc, 130) << out.str() << err.str();
  const long long steps = nlohmann::json::parse(slurp(i / "run_report.json")).at("interrupted_after_step").get<long long>();
  ASSERT_GE(steps, 1);
  train(with({"--train.steps", std::to_string(steps), "-o", n.string()}));
  expect_same_weights(i / "checkpoint.onnx", n / "checkpoint.onnx");
}

// A checkpoint records the options that shape its results; resuming with others says which
// (the run then differs from an uninterrupted one), resuming with the same says nothing.
TEST_F(TrainCli, ResumeNamesTheOptionsThatChanged) {
  const fs::path a = tmp_path("tr_opt"), b = tmp_path("tr_opt_r1"), c = tmp_path("tr_opt_r2");
  for (const auto& d : {a, b, c}) fs::remove_all(d);
  train({"--train.steps", "1", "--train.eval", "0", "--compile.max_pes", "64", "-o", a.string()});
  const std::string ck = (a / "checkpoint.onnx").string();
  std::string log;
  train({"--resume", ck, "--train.steps", "1", "--train.eval", "0", "--sim.threads", "2", "-o", b.string()}, &log);
  EXPECT_NE(log.find("note: options that differ from the run that wrote the checkpoint: compile.max_pes = 0 (was 64)"),
            std::string::npos) << log;
  EXPECT_EQ(log.find("sim.threads"), std::string::npos) << log;  // changes no result
  train({"--resume", ck, "--train.steps", "1", "--train.eval", "0", "--compile.max_pes", "64", "-o", c.string()}, &log);
  EXPECT_EQ(log.find("options that differ"), std::string::npos) << log;
}

// A damaged checkpoint's metadata (a negative step used to crash the resume) is a usage error
// naming the entry.
TEST_F(TrainCli, DamagedCheckpointMetadataIsAClearError) {
  const fs::path d = tmp_path("tr_meta");
  fs::remove_all(d);
  train({"--train.steps", "1", "--train.eval", "0", "-o", d.string()});
  const std::string ck = (d / "checkpoint.onnx").string();
  const std::vector<std::pair<std::map<std::string, std::string>, std::string>> cases = {
      {{{"wafersim.step", "-5"}}, "wafersim.step = -5 is out of range (at least 0)"},
      {{{"wafersim.step", "3x"}}, "wafersim.step = '3x' is not a whole number"},
      {{{"wafersim.batch", "0"}}, "wafersim.batch = 0 is out of range (at least 1)"},
      {{{"wafersim.lr", "abc"}}, "wafersim.lr = 'abc' is not a positive number"},
      {{{"wafersim.momentum", "2"}}, "wafersim.momentum = '2' is not a number in [0, 1)"},
  };
  for (const auto& [meta, msg] : cases) {
    const std::string broken = (d / "broken.onnx").string();
    compiler::write_onnx_with_weights(ck, broken, {}, {}, meta);
    std::ostringstream out, err;
    EXPECT_EQ(train_command({"--resume", broken, "--train.steps", "1", "--train.eval", "0", "-o", (d / "r").string()}, out, err), 2)
        << msg;
    EXPECT_NE(err.str().find(msg), std::string::npos) << err.str();
  }
}

}  // namespace
}  // namespace wafersim::test

namespace wafersim::test {
namespace {

// Replicas on a reduced fabric (24 x 128, a channel every 8 rows): the compiler takes as many
// copies as raise its estimate, which covers most of the fabric; the estimate holds within
// 10 %, and the copies train faster than one copy does.
TEST_F(TrainCli, ReplicasCoverTheFabricAndRaiseThroughput) {
  const std::vector<std::string> fabric = {"--fabric.width", "24", "--fabric.height", "128", "--io.spacing", "8",
                                           "--train.batch", "512", "--train.steps", "1", "--train.eval", "0"};
  auto run = [&](const std::string& name, const std::string& replicas) {
    const fs::path d = tmp_path(name);
    fs::remove_all(d);
    std::vector<std::string> args = fabric;
    args.insert(args.end(), {"--compile.replicas", replicas, "-o", d.string()});
    EXPECT_EQ(train(args), 0);
    return std::pair{nlohmann::json::parse(slurp(d / "run_report.json")), nlohmann::json::parse(slurp(d / "compile_report.json"))};
  };
  const auto [rep, comp] = run("tr_rep_auto", "0");
  const double est = rep["estimated_samples_per_s"].get<double>(), meas = rep["measured_samples_per_s"].get<double>();
  std::cout << "24 x 128: " << comp["replicas"] << " copies, " << comp["active_pes"] << " PEs, estimate " << est
            << ", measured " << meas << "\n";
  EXPECT_GE(comp["replicas"].get<int>(), 2);
  EXPECT_GE(comp["active_pes_pct"].get<double>(), 50.0);
  EXPECT_LT(std::abs(est - meas) / meas, 0.10);
  const double one = run("tr_rep_one", "1").first["measured_samples_per_s"].get<double>();
  std::cout << "one copy: " << one << " samples/s\n";
  EXPECT_GT(meas, 1.2 * one);
  // A larger budget never lowers the estimate (the choice of copies included).
  double last = 0;
  for (const char* budget : {"64", "256", "1024", "0"}) {
    std::ostringstream out, err;
    const fs::path d = tmp_path(std::string("tr_rep_budget") + budget);
    std::vector<std::string> args = {"--fabric.width", "24", "--fabric.height", "128", "--io.spacing", "8", "--train.batch", "512"};
    args.insert(args.end(), {"--compile.max_pes", budget, "--compile-only", "-o", d.string()});
    ASSERT_EQ(compile_command(args, out, err), 0) << err.str();
    const double e = nlohmann::json::parse(slurp(d / "compile_report.json"))["overall_samples_per_s"].get<double>();
    EXPECT_GE(e, last) << "compile.max_pes " << budget;
    last = e;
  }
}

// With copies, a resumed run and one on two host threads repeat the uninterrupted run bit for
// bit; copies that do not fit, more copies than samples, copies with two minibatches in flight
// or in weight-streaming mode are clear errors (exit 2).
TEST_F(TrainCli, ReplicasResumeBitForBitAndBadCountsAreClearErrors) {
  const std::vector<std::string> small = {"--fabric.width", "24", "--fabric.height", "48", "--io.spacing", "8",
                                          "--train.batch", "12", "--compile.replicas", "3", "--train.eval", "0"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), small.begin(), small.end());
    return args;
  };
  const fs::path a = tmp_path("tr_rep_full"), b = tmp_path("tr_rep_half"), c = tmp_path("tr_rep_resumed"),
                 t2 = tmp_path("tr_rep_threads");
  for (const auto& d : {a, b, c, t2}) fs::remove_all(d);
  std::string log;
  train(with({"--train.steps", "4", "--train.checkpoint_every", "2", "-o", a.string()}), &log);
  EXPECT_NE(log.find("replicas                3 copies"), std::string::npos) << log;
  train(with({"--train.steps", "2", "-o", b.string()}));
  train(with({"--resume", (b / "checkpoint.onnx").string(), "--train.steps", "2", "-o", c.string()}));
  expect_same_weights(a / "checkpoint.onnx", c / "checkpoint.onnx");
  EXPECT_EQ(loss_lines(a, 3), loss_lines(c, 3));
  train(with({"--train.steps", "4", "--train.checkpoint_every", "2", "--sim.threads", "2", "-o", t2.string()}));
  EXPECT_EQ(slurp(a / "losses.csv"), slurp(t2 / "losses.csv"));
  EXPECT_EQ(slurp(a / "checkpoint.onnx"), slurp(t2 / "checkpoint.onnx"));

  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"--compile.replicas", "7"}, "compile.replicas 7 does not fit: each copy gets a band of 0 rows"},
      {{"--compile.replicas", "5", "--compile.max_pes", "40"}, "compile.replicas 5 does not fit"},
      {{"--compile.replicas", "13"}, "compile.replicas 13 exceeds train.batch 12"},
      {{"--compile.replicas", "2", "--train.in_flight", "2"}, "compile.replicas 2 with train.in_flight 2 is not supported"},
      {{"--compile.replicas", "2", "--mode", "weight-streaming"}, "compile.replicas applies to layer-pipelined mode only"},
      {{"--compile.replicas", "-1"}, "compile.replicas must be 0 (auto) or in 1..4096"},
  };
  for (const auto& [extra, msg] : bad) {
    std::vector<std::string> args = {"--fabric.width", "24", "--fabric.height", "48", "--io.spacing", "8",
                                     "--train.batch", "12", "--train.steps", "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::ostringstream out, err;
    EXPECT_EQ(train_command(args, out, err), 2) << ::testing::PrintToString(extra) << out.str();
    EXPECT_NE(err.str().find(msg), std::string::npos) << err.str();
  }
}

}  // namespace
}  // namespace wafersim::test
