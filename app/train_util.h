// Pieces `wafersim compile` and `wafersim train` share between the two execution modes.
#pragma once

#include <filesystem>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/options.h"
#include "compiler/kernel_graph.h"
#include "compiler/onnx_model.h"
#include "hw/fabric.h"
#include "tlm/dataset.h"

namespace wafersim {

std::string exact(double v);            // enough digits to read back the same float
std::string fixed(double v, int prec);  // fixed-point with prec decimals
void print_graph(const compiler::KernelGraph& g, std::ostream& out);
tlm::Dataset load_data(const TrainConfig& c, bool train);  // train or test set; empty if not configured
// ConfigError when the test set does not fit the model: other features per sample, or labels
// past its classes (the training set is checked by the trainers).
void check_test_set(const tlm::Dataset& test, const compiler::KernelGraph& g);
void write_text(const std::filesystem::path& p, const std::string& s);  // atomically
// A whole-number metadata entry of the checkpoint being resumed (c.resume); ConfigError when it
// is missing, not a whole number or below `lo`.
long long checkpoint_number(const compiler::OnnxModel& m, const TrainConfig& c, const char* key, long long lo = 0);
// ConfigError when the checkpoint's wafersim.lr or wafersim.momentum (informational) is not a
// valid value: a sign of a damaged file.
void check_checkpoint_hyper(const compiler::OnnxModel& m, const TrainConfig& c);
// The options a checkpoint records (metadata wafersim.config): "section.key = value" lines of
// the resolved configuration, without those that change no result (steps, logging, threads,
// visiting order, express lines, lazy cores, traces), so that checkpoints of equal runs stay
// byte-identical.
std::string checkpoint_config(const TrainConfig& c);
// Resuming: the recorded options whose value differs now, as a note to print ("" when none
// does, or the checkpoint records none); they make the resumed run differ from an uninterrupted one.
std::string resume_option_changes(const compiler::OnnxModel& m, const TrainConfig& c);
// Checkpoints carry the losses.csv of every step they hold (metadata wafersim.losses), so that a
// checkpoint and its losses are one unit: a run killed between writing the checkpoint and
// losses.csv loses nothing, and a resumed run writes the whole history again. The text starts
// with `header`.
constexpr const char* kLossesKey = "wafersim.losses";
// The losses a checkpoint being resumed holds (`header` alone for a checkpoint written before
// they were kept); ConfigError when they are not this mode's or do not end at `step`.
std::string checkpoint_losses(const compiler::OnnxModel& m, const TrainConfig& c, const std::string& header, long long step);

// Training health: a run stops at the first non-finite loss or weight (exit 1), naming the step
// and what went non-finite, and writes nothing after its last good checkpoint.
class TrainingDiverged : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Tracks the last good checkpoint of a run for the message.
struct HealthCheck {
  std::string checkpoint;      // the last good one: OUT/checkpoint.onnx, or the one resumed from
  long long good_step = -1;    // the step of the last checkpoint written or resumed from; -1: none
  // Throws TrainingDiverged when `loss` is NaN or infinite.
  void loss(long long step, double loss) const;
  // Throws TrainingDiverged when a value of `values` (the tensor `what`) is not finite.
  void tensor(long long step, const std::string& what, const std::vector<float>& values) const;
  [[noreturn]] void fail(long long step, const std::string& what) const;
};

// The compile report (JSON and text) and the resolved configuration, into c.out.
void write_compile_outputs(const TrainConfig& c, const nlohmann::json& report, const std::string& text);
// The wafers' traffic over a run: FabricTotals' counts between two readings, summed over the
// systems (a reading is whole-fabric, so take it outside the cycle loop).
struct FabricTraffic {
  uint64_t sends = 0;      // router sends: link hops, ramp deliveries, channel transfers
  uint64_t injected = 0;   // wavelets into the fabric from cores and channels
  uint64_t delivered = 0;  // wavelets out of it to cores and channels
  void add(const FabricTotals& before, const FabricTotals& after);
};
// Into the run report: "fabric" in the JSON and one text line.
void report_fabric_traffic(const FabricTraffic& t, uint64_t cycles, nlohmann::json& rep, std::string& text);
// --stats.fabric: the fabric's counters (hw/fabric_stats.h) into `dir` (created), and the line
// that says so into the report's text.
void write_run_fabric_stats(const Fabric& f, const std::filesystem::path& dir, std::string& text);
// The end of a training run: the wall time into the report, the report printed and written
// (run_report.json and .txt, atomically) into c.out.
void finish_run_report(const TrainConfig& c, double wall_seconds, nlohmann::json& rep, std::string text, std::ostream& out);

}  // namespace wafersim
