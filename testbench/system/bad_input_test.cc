// Bad input through the wafersim binary, one case per fault that issue 34 found (each failed on
// the main of 2026-11-26): a clear message and the README's exit code, never a crash, a hang or
// a silent exit 0; training that goes non-finite stops at once; a checkpoint and its losses are
// one unit; I/O failures are runtime errors that leave no .tmp behind.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <type_traits>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>
#include <onnx/onnx_pb.h>

#include "compiler/onnx_model.h"
#include "mlp_model.h"
#include "test_support.h"

namespace wafersim::test {
namespace {

namespace fs = std::filesystem;

constexpr int kOk = 0, kRuntime = 1, kUsage = 2;
const char* kFashion = "/usr/share/datasets/fashion-mnist";

struct CliResult {
  int rc;
  std::string out, err;
};


// A fresh scratch directory per test.
fs::path scratch() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path d = tmp_path(std::string("bad_input_") + info->test_suite_name() + "." + info->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// `wafersim ARGS`, through bash so that `prefix` can set limits (ulimit) first; a time limit
// turns a hang into a failure instead of a stuck test.
CliResult wafersim(const std::vector<std::string>& args, const std::string& prefix = "") {
  static int n = 0;
  const std::string tag = std::to_string(::getpid()) + "_" + std::to_string(n++);
  const std::string o = tmp_path("bad_input_out_" + tag), e = tmp_path("bad_input_err_" + tag);
  std::string line = prefix + " exec timeout 120 " + std::string(WAFERSIM_BIN);
  for (const auto& a : args) line += " " + quote(a);
  line += " > " + quote(o) + " 2> " + quote(e);
  const int status = std::system(("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE=1 bash -c " + quote(line)).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(o), slurp(e)};
}

onnx::ModelProto demo_model() {
  onnx::ModelProto m;
  std::ifstream in(WAFERSIM_DEMO_MODEL_PATH, std::ios::binary);
  EXPECT_TRUE(m.ParseFromIstream(&in));
  return m;
}

std::string save(const onnx::ModelProto& m, const fs::path& p) {
  std::ofstream out(p, std::ios::binary);
  m.SerializeToOstream(&out);
  return p.string();
}

onnx::NodeProto* node(onnx::ModelProto& m, const std::string& name) {
  for (auto& n : *m.mutable_graph()->mutable_node()) {
    if (n.name() == name) return &n;
  }
  ADD_FAILURE() << "no node " << name;
  return m.mutable_graph()->mutable_node(0);
}

// Sets an int (int64_t) or float attribute, adding it when the node has none of that name.
template <typename T>
void set_attr(onnx::NodeProto* n, const std::string& key, T v) {
  onnx::AttributeProto* a = nullptr;
  for (auto& e : *n->mutable_attribute()) {
    if (e.name() == key) a = &e;
  }
  if (!a) {
    a = n->add_attribute();
    a->set_name(key);
  }
  if constexpr (std::is_same_v<T, float>) {
    a->set_type(onnx::AttributeProto::FLOAT);
    a->set_f(v);
  } else {
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(v);
  }
}

// A .npy file of `shape` (rows, cols or rows) of float32 or int64 values.
void write_npy(const fs::path& p, const std::string& descr, const std::vector<size_t>& shape, const void* data, size_t bytes) {
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  for (size_t d : shape) dict += std::to_string(d) + ", ";
  dict += "), }";
  while ((10 + dict.size() + 1) % 64) dict += ' ';
  dict += '\n';
  std::ofstream f(p, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(dict.size());
  f.write(reinterpret_cast<const char*>(&len), 2);
  f << dict;
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

// 16 samples of 784 values in 0..255 and labels 0..9, as .npy files in `dir`; `poison` is
// written into sample 3, value 5 of x, and `label_add` onto every label.
std::vector<std::string> npy_data(const fs::path& dir, const std::string& stem, float poison = 1.0f, int64_t label_add = 0) {
  std::vector<float> x(16 * 784);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 256);
  x[3 * 784 + 5] = poison;
  std::vector<int64_t> y(16);
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int64_t>(i % 10) + label_add;
  write_npy(dir / (stem + "_x.npy"), "<f4", {16, 784}, x.data(), x.size() * 4);
  write_npy(dir / (stem + "_y.npy"), "<i8", {16}, y.data(), y.size() * 8);
  return {(dir / (stem + "_x.npy")).string(), (dir / (stem + "_y.npy")).string()};
}

// A small fabric and batch: a step takes a few milliseconds.
const std::vector<std::string> kQuick = {"train", "--fabric.width", "24", "--fabric.height", "24", "--io.spacing", "8",
                                         "--train.batch", "4", "--train.eval", "0"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& more) {
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

bool has_tmp_files(const fs::path& dir) {
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (e.path().extension() == ".tmp") return true;
  }
  return false;
}

// --- Models ---

// Fault 1: a node whose output list is empty segfaulted compile and train (exit 139).
TEST(BadInput, NodeWithoutOutputsIsNamed) {
  const fs::path d = scratch();
  onnx::ModelProto m = demo_model();
  node(m, "/fc2/Gemm")->clear_output();
  const std::string p = save(m, d / "no_outputs.onnx");
  for (const char* cmd : {"compile", "train"}) {
    const CliResult r = wafersim({cmd, p, "-o", (d / "out").string()});
    EXPECT_EQ(r.rc, kUsage) << cmd << r.err;
    EXPECT_TRUE(contains(r.err, "/fc2/Gemm")) << r.err;
    EXPECT_TRUE(contains(r.err, "output size 0")) << r.err;
  }
  // A node of a custom domain has no schema the checker could hold it to: the compiler names it.
  onnx::ModelProto c = demo_model();
  auto* dom = c.add_opset_import();
  dom->set_domain("com.example");
  dom->set_version(1);
  auto* custom = c.mutable_graph()->add_node();
  custom->set_name("/custom/Probe");
  custom->set_op_type("Probe");
  custom->set_domain("com.example");
  custom->add_input("logits");
  const CliResult r = wafersim({"compile", save(c, d / "custom.onnx"), "--validate-only"});
  EXPECT_EQ(r.rc, kUsage) << r.err;
  EXPECT_TRUE(contains(r.err, "Probe (1 node): has no output: node '/custom/Probe'")) << r.err;
}

// Fault 2: a name that is not UTF-8 passed --validate-only, then compile died in nlohmann's
// JSON writer with no report.
TEST(BadInput, NamesThatAreNotUtf8AreNamedInEveryCommand) {
  const fs::path d = scratch();
  onnx::ModelProto m = demo_model();
  node(m, "/fc1/Gemm")->set_name("/fc1/G\xffmm");
  const std::string p = save(m, d / "latin1.onnx");
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"compile", p, "--validate-only"}, {"compile", p, "-o", (d / "c").string()}, {"train", p, "-o", (d / "t").string()}}) {
    const CliResult r = wafersim(args);
    EXPECT_EQ(r.rc, kUsage) << args[0] << r.err;
    EXPECT_TRUE(contains(r.err, "name '/fc1/G\\xffmm' is not valid UTF-8")) << r.err;
  }
}

// Fault 3: a path that is not a regular file was read without bound (60 MB/s until memory ran out).
TEST(BadInput, PathsThatAreNotRegularFilesAreRefusedAtOnce) {
  const fs::path d = scratch();
  const std::string fifo = (d / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& dev : {std::string("/dev/zero"), fifo}) {
    CliResult r = wafersim({"compile", dev, "-o", (d / "c").string()});
    EXPECT_EQ(r.rc, kUsage) << r.err;
    EXPECT_TRUE(contains(r.err, dev + ": is not a regular file")) << r.err;
    r = wafersim({"train", "--resume", dev, "-o", (d / "t").string()});
    EXPECT_EQ(r.rc, kUsage) << r.err;
    EXPECT_TRUE(contains(r.err, "is not a regular file")) << r.err;
    r = wafersim({"run", dev});
    EXPECT_EQ(r.rc, kUsage) << r.err;
    EXPECT_TRUE(contains(r.err, "is not a regular file")) << r.err;
  }
  // A program whose image source or data file is a device, or a directory ("no tasks" before).
  ASSERT_EQ(wafersim({"kernel", "gemv", "--kernel.w", "2", "--kernel.h", "2", "--kernel.m", "32", "--kernel.n", "32", "-o", (d / "prog").string()}).rc, kOk);
  nlohmann::json j = nlohmann::json::parse(slurp(d / "prog" / "program.json"));
  for (const std::string& bad : {std::string("/dev/zero"), d.string()}) {
    nlohmann::json k = j;
    k["images"][0]["source"] = bad;
    k["images"][0].erase("binary");
    fs::create_directories(d / "bad");
    std::ofstream(d / "bad" / "program.json") << k.dump();
    const CliResult r = wafersim({"run", (d / "bad").string(), "-o", (d / "bad_out").string()});
    EXPECT_EQ(r.rc, kUsage) << r.err;
    EXPECT_TRUE(contains(r.err, bad == d.string() ? "is a directory" : "is not a regular file")) << r.err;
  }
}

// Fault 8: models that the ONNX checker rejects compiled with exit 0; Gemm transB of -1 or 2
// was taken as 1; Flatten's axis was ignored.
TEST(BadInput, MalformedModelsAreRejectedByTheOnnxLibraryOrTheCompiler) {
  const fs::path d = scratch();
  struct Case {
    std::string name, message;
    std::function<void(onnx::ModelProto&)> change;
  };
  const std::vector<Case> cases = {
      {"extra_gemm_input", "Node (/fc1/Gemm) has input size 4",
       [](onnx::ModelProto& m) { node(m, "/fc1/Gemm")->add_input("fc1.bias"); }},
      {"extra_relu_input", "Node (/act1/Relu) has input size 2",
       [](onnx::ModelProto& m) { node(m, "/act1/Relu")->add_input("fc1.bias"); }},
      {"two_producers", "single static assignment",
       [](onnx::ModelProto& m) { node(m, "/act1/Relu")->set_output(0, node(m, "/fc1/Gemm")->output(0)); }},
      {"output_not_produced", "graph output 'nothing' is not produced by any node",
       [](onnx::ModelProto& m) { m.mutable_graph()->mutable_output(0)->set_name("nothing"); }},
      {"two_default_opsets", "imports the default ONNX domain 2 times",
       [](onnx::ModelProto& m) { m.add_opset_import()->set_version(13); }},
      {"raw_and_float_data", "one and only one value field",
       [](onnx::ModelProto& m) { m.mutable_graph()->mutable_initializer(0)->add_float_data(1.0f); }},
      {"ir_version_99", "ir_version is higher than the checker's", [](onnx::ModelProto& m) { m.set_ir_version(99); }},
      {"transB_2", "transB = 2 must be 0 or 1", [](onnx::ModelProto& m) { set_attr(node(m, "/fc1/Gemm"), "transB", int64_t{2}); }},
      {"transB_minus_1", "transB = -1 must be 0 or 1",
       [](onnx::ModelProto& m) { set_attr(node(m, "/fc1/Gemm"), "transB", int64_t{-1}); }},
      {"flatten_axis_0", "axis 0 does not keep one sample per row",
       [](onnx::ModelProto& m) { set_attr(node(m, "/flatten/Flatten"), "axis", int64_t{0}); }},
      {"flatten_axis_2", "axis 2 does not keep one sample per row",
       [](onnx::ModelProto& m) { set_attr(node(m, "/flatten/Flatten"), "axis", int64_t{2}); }},
      {"alpha_subnormal", "must have a finite inverse", [](onnx::ModelProto& m) { set_attr(node(m, "/fc1/Gemm"), "alpha", 1e-45f); }},
  };
  for (const Case& c : cases) {
    onnx::ModelProto m = demo_model();
    c.change(m);
    const CliResult r = wafersim({"compile", save(m, d / (c.name + ".onnx")), "--validate-only"});
    EXPECT_EQ(r.rc, kUsage) << c.name << ": " << r.out << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << c.name << ": " << r.err;
  }
  // Flatten with axis 1, spelled -1 on the [batch, 784] input, keeps one sample per row.
  onnx::ModelProto m = demo_model();
  set_attr(node(m, "/flatten/Flatten"), "axis", int64_t{-1});
  EXPECT_EQ(wafersim({"compile", save(m, d / "axis_minus_1.onnx"), "--validate-only"}).rc, kOk);
}

// Fault 10: the project's own exporter writes ignore_index = -100 (as torch 1.13 does), which the
// compiler refused, adding that the graph had no loss. No label equals -100: nothing is ignored.
TEST(BadInput, TorchsIgnoreIndexIsAccepted) {
  const fs::path d = scratch();
  const std::string p = (d / "loss.onnx").string();
  const std::string make = "/usr/bin/python3 " + std::string(WAFERSIM_SOURCE_DIR) + "/scripts/make_model.py --loss graph --out " +
                           quote(p) + " > /dev/null 2>&1";
  if (std::system(make.c_str()) != 0) GTEST_SKIP() << "python3-torch is not installed";
  CliResult r = wafersim({"compile", p, "--train.loss", "graph", "--validate-only"});
  EXPECT_EQ(r.rc, kOk) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "loss: softmax cross-entropy (node '/SoftmaxCrossEntropyLoss')")) << r.out;
  // An ignore_index that is a class label would change the loss: refused, and no "has no loss" after it.
  onnx::ModelProto m;
  {
    std::ifstream in(p, std::ios::binary);
    ASSERT_TRUE(m.ParseFromIstream(&in));
  }
  set_attr(node(m, "/SoftmaxCrossEntropyLoss"), "ignore_index", int64_t{3});
  r = wafersim({"compile", save(m, d / "ignore3.onnx"), "--train.loss", "graph", "--validate-only"});
  EXPECT_EQ(r.rc, kUsage);
  EXPECT_TRUE(contains(r.err, "ignore_index = 3 is a class label")) << r.err;
  EXPECT_FALSE(contains(r.err, "has no SoftmaxCrossEntropyLoss")) << r.err;
}

// --- Training health (fault 7) ---

class TrainHealth : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kFashion)) GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
};

// A learning rate that blows up the weights: the run stops at the first non-finite loss with
// exit 1, names the step, and the last good checkpoint (and its losses) stay the latest.
TEST_F(TrainHealth, DivergenceStopsAtTheStepAndKeepsTheLastGoodCheckpoint) {
  const fs::path d = scratch();
  const std::string out = (d / "a").string();
  ASSERT_EQ(wafersim(with(kQuick, {"--train.steps", "2", "-o", out})).rc, kOk);
  const CliResult r = wafersim(with(kQuick, {"--resume", out + "/checkpoint.onnx", "--train.steps", "6", "--train.lr", "1e30",
                                       "--train.checkpoint_every", "1", "-o", out}));
  EXPECT_EQ(r.rc, kRuntime) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "training diverged at step ")) << r.err;
  EXPECT_TRUE(contains(r.err, "is NaN") || contains(r.err, "is infinite")) << r.err;
  const auto ck = compiler::import_onnx(out + "/checkpoint.onnx");
  const long long kept = std::stoll(ck.metadata.at("wafersim.step"));
  EXPECT_GE(kept, 2);  // the resumed-from checkpoint, or a later one of this run
  EXPECT_TRUE(contains(r.err, "training diverged at step " + std::to_string(kept + 1) + ":")) << r.err;
  EXPECT_TRUE(contains(r.err, "(after step " + std::to_string(kept) + ") and its losses are kept")) << r.err;
  for (const auto& [name, t] : ck.initializers) {
    for (float v : t.f32) ASSERT_TRUE(std::isfinite(v)) << name;
  }
  // The kept checkpoint loads (one with a NaN was written before, which --resume then refused);
  // its weights are huge, so the next step diverges again, and says so.
  const CliResult again = wafersim(with(kQuick, {"--resume", out + "/checkpoint.onnx", "--train.steps", "1", "--train.lr", "1e30",
                                                 "-o", (d / "b").string()}));
  EXPECT_EQ(again.rc, kRuntime) << again.err;
  EXPECT_TRUE(contains(again.out, "resuming from " + out + "/checkpoint.onnx after step " + std::to_string(kept))) << again.out;
}

TEST_F(TrainHealth, NonFiniteFromOptionsOrTheModelStopsTheRun) {
  const fs::path d = scratch();
  for (const std::vector<std::string>& opt : std::vector<std::vector<std::string>>{
           {"--train.lr", "1e30"}, {"--data.mean", "1e18"}, {"--data.scale", "1e18"}, {"--mode", "weight-streaming", "--train.lr", "1e30"}}) {
    const CliResult r = wafersim(with(with(kQuick, {"--train.steps", "4", "-o", (d / "o").string()}), opt));
    EXPECT_EQ(r.rc, kRuntime) << opt[0] << ": " << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "training diverged at step")) << r.err;
    EXPECT_FALSE(fs::exists(d / "o" / "checkpoint.onnx")) << opt[0];
    fs::remove_all(d / "o");
  }
  // A Gemm's alpha (folded into the weights, which would train alpha W's gradient rather than
  // W's) is refused for training before any run, naming the layer (it diverged here before).
  onnx::ModelProto m = demo_model();
  for (const auto& [attr, v] : {std::pair<const char*, float>{"alpha", 1e38f}, {"alpha", 2.0f}, {"beta", 0.5f}}) {
    onnx::ModelProto mm = m;
    set_attr(node(mm, "/fc1/Gemm"), attr, v);
    const CliResult r = wafersim(with(kQuick, {save(mm, d / "alpha.onnx"), "--train.steps", "4", "-o", (d / "o").string()}));
    EXPECT_EQ(r.rc, kUsage) << attr << ": " << r.out << r.err;
    EXPECT_TRUE(contains(r.err, "/fc1/Gemm: Gemm alpha = ")) << r.err;
    EXPECT_TRUE(contains(r.err, "training such a layer as the graph defines it is not supported yet")) << r.err;
    EXPECT_FALSE(fs::exists(d / "o" / "checkpoint.onnx"));
  }
}

// Gemm beta = 0: the bias has no effect; it is left alone (dividing by beta wrote NaN before).
TEST_F(TrainHealth, GemmBetaZeroLeavesTheBiasAlone) {
  const fs::path d = scratch();
  onnx::ModelProto m = demo_model();
  set_attr(node(m, "/fc1/Gemm"), "beta", 0.0f);
  const std::string p = save(m, d / "beta0.onnx");
  const CliResult r = wafersim(with(kQuick, {p, "--train.steps", "2", "-o", (d / "o").string()}));
  ASSERT_EQ(r.rc, kOk) << r.out << r.err;
  EXPECT_TRUE(contains(r.out, "beta = 0, so the bias has no effect")) << r.out;
  const auto before = compiler::import_onnx(p), after = compiler::import_onnx((d / "o" / "checkpoint.onnx").string());
  EXPECT_EQ(after.initializers.at("fc1.bias").f32, before.initializers.at("fc1.bias").f32);
  EXPECT_NE(after.initializers.at("fc2.bias").f32, before.initializers.at("fc2.bias").f32);
}

TEST(BadInput, NonFiniteDataAndTestLabelsOutOfRangeAreUsageErrors) {
  const fs::path d = scratch();
  const auto ok = npy_data(d, "ok");
  auto npy_run = [&](const std::vector<std::string>& train, const std::vector<std::string>& test, std::vector<std::string> more) {
    std::vector<std::string> a = {"train", "--data.source", "npy", "--data.train_x", train[0], "--data.train_y", train[1],
                                  "--data.test_x", test[0], "--data.test_y", test[1], "--train.steps", "1", "-o",
                                  (d / "o").string(), "--fabric.width", "24", "--fabric.height", "24", "--io.spacing", "8",
                                  "--train.batch", "4"};
    a.insert(a.end(), more.begin(), more.end());
    return wafersim(a);
  };
  EXPECT_EQ(npy_run(ok, ok, {}).rc, kOk);
  for (float poison : {std::nanf(""), INFINITY}) {
    const auto bad = npy_data(d, "bad", poison);
    const CliResult r = npy_run(bad, ok, {});
    EXPECT_EQ(r.rc, kUsage) << r.err;
    EXPECT_TRUE(contains(r.err, "in sample 3, value 5: inputs must be finite numbers")) << r.err;
    EXPECT_EQ(npy_run(ok, bad, {}).rc, kUsage);
  }
  const CliResult r = npy_run(ok, npy_data(d, "labels", 1.0f, 5), {});
  EXPECT_EQ(r.rc, kUsage) << r.err;
  EXPECT_TRUE(contains(r.err, "the test set has labels up to 14, the model only 10 classes")) << r.err;
  for (const char* std : {"-1", "0"}) {
    const CliResult s = npy_run(ok, ok, {"--data.std", std});
    EXPECT_EQ(s.rc, kUsage);
    EXPECT_TRUE(contains(s.err, "data.std must be a positive number")) << s.err;
  }
}

// --- Checkpoint and losses as one unit (fault 5), both modes ---

class CheckpointUnit : public TrainHealth {};

// A kill between the checkpoint's rename and the losses.csv rewrite left a step-N checkpoint
// with losses up to N-1, and the resumed run never wrote step N's loss. The checkpoint now
// carries its losses: whatever losses.csv holds, the resumed run writes the whole history, the
// same as an uninterrupted run's, and the two checkpoints are byte for byte the same.
TEST_F(CheckpointUnit, AResumedRunWritesEveryStepsLossAfterAKillBetweenTheTwoWrites) {
  for (const std::vector<std::string>& mode : std::vector<std::vector<std::string>>{{}, {"--mode", "weight-streaming"}}) {
    const fs::path d = scratch();
    const std::string a = (d / "a").string(), b = (d / "b").string(), c = (d / "c").string();
    ASSERT_EQ(wafersim(with(with(kQuick, mode), {"--train.steps", "4", "-o", a})).rc, kOk);
    ASSERT_EQ(wafersim(with(with(kQuick, mode), {"--train.steps", "2", "-o", b})).rc, kOk);
    // The kill: losses.csv still as it was before step 2's checkpoint.
    std::string csv = slurp(d / "b" / "losses.csv");
    csv.erase(csv.find_last_of('\n', csv.size() - 2) + 1);
    std::ofstream(d / "b" / "losses.csv") << csv;
    const CliResult r = wafersim(with(with(kQuick, mode), {"--resume", b + "/checkpoint.onnx", "--train.steps", "2", "-o", c}));
    ASSERT_EQ(r.rc, kOk) << r.out << r.err;
    EXPECT_EQ(slurp(d / "c" / "losses.csv"), slurp(d / "a" / "losses.csv")) << (mode.empty() ? "layer-pipelined" : "weight streaming");
    EXPECT_EQ(slurp(d / "c" / "checkpoint.onnx"), slurp(d / "a" / "checkpoint.onnx"));
  }
}

// --- I/O failures and usage (fault 6) ---

// A full disk (here a file-size limit: writes fail with EFBIG as with ENOSPC) is a runtime
// error, exit 1 (train exited 2), and leaves no partial .tmp file behind.
TEST_F(TrainHealth, AFullDiskIsARuntimeErrorThatLeavesNoTmpFiles) {
  const fs::path d = scratch();
  // 100 KiB: the reports fit, the demo model's checkpoint (weights and momentum, 212 KB) does not.
  const std::string limit = "ulimit -f 100; trap '' XFSZ;";
  CliResult r = wafersim(with(kQuick, {"--train.steps", "1", "-o", (d / "t").string()}), limit);
  EXPECT_EQ(r.rc, kRuntime) << r.out << r.err;
  EXPECT_TRUE(contains(r.err, "cannot write")) << r.err;
  EXPECT_FALSE(has_tmp_files(d / "t"));
  r = wafersim({"compile", "--compile-only", "--compile.max_pes", "64", "-o", (d / "c").string()}, "ulimit -f 4; trap '' XFSZ;");
  EXPECT_EQ(r.rc, kRuntime) << r.out << r.err;
  EXPECT_FALSE(has_tmp_files(d / "c"));
}

TEST(BadInput, FabricSaysWroteOnlyWhenItDid) {
  const fs::path d = scratch();
  const std::vector<std::string> args = {"fabric", "--fabric.width", "8", "--fabric.height", "8", "--sim.cycles", "50",
                                         "-o", (d / "f").string()};
  CliResult r = wafersim(args);
  ASSERT_EQ(r.rc, kOk);
  EXPECT_TRUE(contains(r.out, "wrote    "));
  fs::create_directories(d / "f" / "stats.json.tmp");  // stats.json cannot be written
  r = wafersim(args);
  EXPECT_EQ(r.rc, kRuntime) << r.err;
  EXPECT_TRUE(contains(r.err, "cannot write")) << r.err;
  EXPECT_FALSE(contains(r.out, "wrote    ")) << r.out;
  fs::remove_all(d / "f");
  // 8 KiB: config.ini fits, a 64 x 64 fabric's first interval stats (inside the cycle loop) do not.
  r = wafersim({"fabric", "--fabric.width", "64", "--fabric.height", "64", "--sim.cycles", "300", "--stats.interval", "100",
                "-o", (d / "f").string()},
               "ulimit -f 8; trap '' XFSZ;");
  EXPECT_EQ(r.rc, kRuntime) << r.err;
  EXPECT_FALSE(has_tmp_files(d / "f"));
}

TEST(BadInput, EmptyOutputDirectoriesAreUsageErrors) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"train", "-o", ""}, {"compile", "-o", ""}, {"fabric", "--stats.out", ""}, {"fabric", "-o", ""}}) {
    const CliResult r = wafersim(args);
    EXPECT_EQ(r.rc, kUsage) << args[0] << " " << args[1] << ": " << r.err;
    EXPECT_TRUE(contains(r.err, "must name the")) << r.err;
  }
}

// --- Values that wrapped or were ignored (fault 9) ---

TEST(BadInput, ProgramIntegersOutOfRangeAreErrorsNotWrapped) {
  const fs::path d = scratch();
  ASSERT_EQ(wafersim({"kernel", "gemv", "--kernel.w", "2", "--kernel.h", "2", "--kernel.m", "32", "--kernel.n", "32", "-o", (d / "prog").string()}).rc, kOk);
  const nlohmann::json j = nlohmann::json::parse(slurp(d / "prog" / "program.json"));
  ASSERT_FALSE(j["output_rows"].empty());  // [name, x, y, symbol, offset, count] (docs/program.md)
  struct Case {
    std::string name;
    std::function<void(nlohmann::json&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"min_width_2^63", [](nlohmann::json& k) { k["fabric"]["min_width"] = uint64_t{1} << 63; }, "'min_width' must be an integer in [0, 4096]"},
      {"output_count_2^32", [](nlohmann::json& k) { k["output_rows"][0][5] = uint64_t{1} << 32; }, "output_rows[0]: count (element 5) must be an integer in [0, 4294967295]"},
      {"output_offset_2^63", [](nlohmann::json& k) { k["output_rows"][0][4] = uint64_t{1} << 63; }, "output_rows[0]: offset (element 4) must be an integer in [0, 4294967295]"},
  };
  for (const Case& c : cases) {
    nlohmann::json k = j;
    c.change(k);
    fs::create_directories(d / c.name);
    for (const auto& e : fs::directory_iterator(d / "prog")) {
      if (e.path().filename() != "program.json") fs::copy(e.path(), d / c.name / e.path().filename(), fs::copy_options::recursive);
    }
    std::ofstream(d / c.name / "program.json") << k.dump();
    const CliResult r = wafersim({"run", (d / c.name).string(), "-o", (d / (c.name + "_out")).string()});
    EXPECT_EQ(r.rc, kUsage) << c.name << ": " << r.out << r.err;
    EXPECT_TRUE(contains(r.err, c.message)) << c.name << ": " << r.err;
  }
}

TEST(BadInput, OptionsThatWouldBeIgnoredAreUsageErrors) {
  const fs::path d = scratch();
  const std::vector<std::string> f = {"fabric", "--fabric.width", "8", "--fabric.height", "8", "-o", (d / "f").string()};
  CliResult r = wafersim(with(f, {"--sim.cycles", "100", "--stats.warmup", "100"}));
  EXPECT_EQ(r.rc, kUsage);
  EXPECT_TRUE(contains(r.err, "stats.warmup 100 is not below sim.cycles 100")) << r.err;
  EXPECT_EQ(wafersim(with(f, {"--sim.cycles", "100", "--stats.warmup", "99"})).rc, kOk);
  r = wafersim(with(f, {"--traffic.routes", (d / "routes.txt").string()}));
  EXPECT_EQ(r.rc, kUsage);
  EXPECT_TRUE(contains(r.err, "traffic.routes is read with traffic.pattern file only")) << r.err;
  // An INI value that does not parse is an error even when the command line sets the option.
  std::ofstream(d / "bad.ini") << "[fabric]\nwidth = wide\n";
  r = wafersim(with(f, {"--config", (d / "bad.ini").string()}));
  EXPECT_EQ(r.rc, kUsage) << r.err;
  EXPECT_TRUE(contains(r.err, "config file")) << r.err;
  EXPECT_TRUE(contains(r.err, "wide")) << r.err;
  std::ofstream(d / "neg.ini") << "[sim]\ncycles = -5\n";
  r = wafersim(with(f, {"--config", (d / "neg.ini").string(), "--sim.cycles", "20"}));
  EXPECT_EQ(r.rc, kUsage) << r.err;
  EXPECT_TRUE(contains(r.err, "sim.cycles must not be negative")) << r.err;
}

}  // namespace
}  // namespace wafersim::test
