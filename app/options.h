// Command-line and INI options of `wafersim fabric`, one options_description per subsystem.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "compiler/compile.h"
#include "compiler/ws_plan.h"
#include "hw/config.h"
#include "hw/traffic_gen.h"
#include "tlm/edge_bridge.h"
#include "tlm/input_worker.h"
#include "tlm/memoryx.h"
#include "tlm/swarmx.h"

namespace wafersim {

struct StatsOptions {
  std::string out = "wafersim-out";  // results directory
  uint64_t warmup = 0;                // cycles before counters restart
  uint64_t interval = 0;              // rewrite stats every N cycles during the run (0 = only at the end)
};

struct TraceOptions {
  std::string vcd;     // VCD file ("" = no trace)
  std::string region;  // x0:x1,y0:y1
};
// The name SystemC's VCD writer takes for trace.vcd PATH (it appends ".vcd"): PATH without a
// trailing ".vcd".
std::string vcd_base(const std::string& path);

// Everything one `wafersim fabric` run uses, resolved from defaults, the INI file and the
// command line (command line wins).
struct FabricRunConfig {
  HwConfig hw;
  TrafficConfig traffic;
  StatsOptions stats;
  TraceOptions trace;
  std::string config_file;
  std::string resolved_ini;  // every option with its final value, INI syntax
};

// Everything one `wafersim run` uses.
struct RunConfig {
  HwConfig hw;
  StatsOptions stats;
  TraceOptions trace;
  std::string program;       // directory or program.json
  std::string config_file;
  int show = 8;              // values printed per output
  bool width_given = false, height_given = false;  // else the program's bounding box
  std::function<std::string(const HwConfig&)> resolved_ini;  // INI text with the final fabric size
};

// Everything one `wafersim kernel` uses: which kernel, its shape, and the target hardware.
struct KernelGenConfig {
  HwConfig hw;
  std::string kernel, out = "wafersim-program", config_file;
  int w = 4, h = 4;
  uint32_t m = 256, n = 256, len = 16, reps = 1, rounds = 4;
  uint32_t warmup = 100;
  uint32_t nz = 1000, block = 0, steps = 1;  // stencil
  int distance = 1;
  std::string format = "fp32", acc = "fp32", algo = "chain", op = "add";
  bool columns = false;
};

// Everything `wafersim validate` uses: which cases, where the results go, and the hardware the
// cases run on (defaults: the calibrated WSE-2 of docs/core.md and docs/fabric.md).
struct ValidateConfig {
  HwConfig hw;
  std::vector<std::string> cases;  // names or families; empty: all (or the quick subset)
  std::string out = "validation", config_file;
  bool quick = false, list = false;
  double max_error = 0;  // percent; > 0: exit 1 when a case is further off than this
};

// Everything `wafersim compile` and `wafersim train` use.
struct TrainConfig {
  HwConfig hw;
  std::string model;             // ONNX file (default: the demo model in models/)
  std::string out = "wafersim-out", config_file, resume, mode = "layer-pipelined";
  bool validate_only = false, compile_only = false;
  compiler::CompileOptions compile;
  long long steps = 0;           // minibatches (0: the default of the demo)
  long long log_every = 0;       // progress line every N steps (0: about 20 lines)
  double progress_seconds = 10;  // weight streaming: a line per layer pass once a minibatch runs this long (0: none)
  long long checkpoint_every = 0;
  std::string data = "fashion-mnist";  // fashion-mnist, idx or npy
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string train_x, train_y, test_x, test_y;
  tlm::Normalize norm;
  bool eval = true;
  TraceOptions trace;  // VCD of a region of PEs during training
  bool fabric_stats = false;  // the wafers' counters and per-PE matrices over the steps, into OUT/fabric
  // Weight streaming and the cluster.
  compiler::WsOptions ws;         // batch and systems are copied in from train.batch and --systems
  bool prefetch = true;           // request the next layer's weights while this one streams
  uint64_t quantum_cycles = 1000; // the cluster's global quantum (temporal decoupling), clock periods
  int ws_threads = 1;             // host threads stepping the systems' wafers side by side (weight streaming)
  std::string ws_layout = "auto";  // ws.layout: rows, grid or auto (WsOptions::grid, auto_layout)
  tlm::MemoryXConfig memx;        // lr and momentum are copied in from train.lr, train.momentum
  tlm::SwarmXConfig swarmx;       // systems copied in from --systems
  tlm::EdgeBridgeConfig bridge;
  int input_workers = 4;          // input workers per system
  double worker_gbps = 100;       // each worker's stream
  double slow_worker_gbps = 0;    // one worker this slow (0: none), to study starvation
  std::string resolved_ini;
};

// Parses; returns false after printing help to `out`. Throws ConfigError with a user-facing
// message for unknown options, bad values, malformed INI files and values out of range.
bool parse_fabric_options(const std::vector<std::string>& args, FabricRunConfig* cfg, std::ostream& out);
bool parse_run_options(const std::vector<std::string>& args, RunConfig* cfg, std::ostream& out);
// The traced region, checked against the fabric (once its size is final); throws ConfigError.
Region run_trace_region(const RunConfig& cfg);
bool parse_validate_options(const std::vector<std::string>& args, ValidateConfig* cfg, std::ostream& out);
bool parse_kernel_options(const std::vector<std::string>& args, KernelGenConfig* cfg, std::ostream& out);
// `train` false: the options of `wafersim compile` only.
bool parse_train_options(const std::vector<std::string>& args, TrainConfig* cfg, std::ostream& out, bool train);
// The traced region of a training run (checked against the fabric); throws ConfigError.
Region train_trace_region(const TrainConfig& cfg);

}  // namespace wafersim
