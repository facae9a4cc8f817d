#include "app/train_util.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "hw/atomic_file.h"
#include "hw/fabric_stats.h"

namespace wafersim {

using namespace compiler;

std::string exact(double v) {  // enough digits to read back the same float
  char b[64];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

std::string fixed(double v, int prec) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

void print_graph(const KernelGraph& g, std::ostream& out) {
  out << "kernel graph: input '" << g.input_name << "' (" << g.in_features << " features), " << g.layers.size()
      << (g.first_conv() >= 0 ? " kernel" : " dense kernel") << (g.layers.size() == 1 ? "" : "s") << ", " << g.parameters() << " parameters\n";
  if (!g.input_prep.empty()) {
    // The model's own preprocessing of its input (compiler/input_prep.h), as the input workers apply it.
    out << "  input preprocessing (input workers): x";
    for (const InputPrep& p : g.input_prep) {
      const std::string c = p.c.size() == 1 ? exact(p.c[0]) : "c[" + std::to_string(p.c.size()) + "]";
      out << " -> " << (p.const_first ? c + " " + p.symbol() + " x" : std::string("x ") + p.symbol() + " " + c);
    }
    out << "\n";
  }
  for (const auto& l : g.layers) {
    std::string kind = "dense " + std::to_string(l.out) + " x " + std::to_string(l.in);
    if (l.conv.on) {
      const ConvParams& c = l.conv;
      kind = "conv " + std::to_string(c.co) + " x " + std::to_string(c.c) + " x " + std::to_string(c.kh) + " x " + std::to_string(c.kw) +
             " (stride " + std::to_string(c.sh) + "x" + std::to_string(c.sw) + ", pads " + std::to_string(c.pt) + "," + std::to_string(c.pl) +
             ") over " + std::to_string(c.c) + " x " + std::to_string(c.h) + " x " + std::to_string(c.w);
    }
    std::string pool;
    if (l.pool.kind != PoolParams::kNone) {
      const PoolParams& q = l.pool;
      pool = std::string(" + ") + (q.kind == PoolParams::kMax ? "maxpool " : "avgpool ") + std::to_string(q.kh) + "x" + std::to_string(q.kw);
      if (q.sh != q.kh || q.sw != q.kw) pool += " stride " + std::to_string(q.sh) + "x" + std::to_string(q.sw);
      if (q.pt != 0 || q.pl != 0 || q.pb != 0 || q.pr != 0) {
        pool += " pads " + std::to_string(q.pt) + "," + std::to_string(q.pl) + "," + std::to_string(q.pb) + "," + std::to_string(q.pr);
        if (q.kind == PoolParams::kAvg) pool += q.count_pad ? " (counted)" : " (not counted)";
      }
      if (q.eb != 0 || q.er != 0) pool += " ceil_mode";
      pool += " -> " + std::to_string(l.conv.co) + " x " + std::to_string(q.hq) + " x " + std::to_string(q.wq);
    }
    // Value k: the model input, layer k's input (a chain), or layer k - 1's output (a branch reads
    // another value than it).
    auto value = [&](int k) {
      if (k == 0) return std::string("the model input");
      if (k < static_cast<int>(g.layers.size()) && g.input_of(k) == k) return "the input of " + g.layers[static_cast<size_t>(k)].name;
      return "the output of " + g.layers[static_cast<size_t>(k) - 1].name;
    };
    const std::string res = l.residual < 0 ? std::string()
                            : l.join_sub == 1 ? " - " + value(l.residual) + " (difference)"
                            : l.join_sub == 2 ? ", subtracted from " + value(l.residual) + " (difference)"
                                              : (l.join_mul ? " * " : " + ") + value(l.residual) + (l.join_mul ? " (gated)" : " (residual)");
    const std::string act = l.act != Activation::kNone ? " + " + activation_text(l.act, l.act_par) : "";
    if (l.input >= 0) kind += " of " + value(l.input) + " (branch)";
    out << "  " << l.name << ": " << kind << (l.bias.empty() ? "" : " + bias") << (l.ln.on && !l.ln.post ? " + layernorm" : "")
        << (l.residual_pre ? res + act : act + res) << (l.ln.on && l.ln.post ? " + layernorm" : "") << pool << "\n";
  }
  out << "  loss: softmax cross-entropy" << (g.loss_node.empty() ? " (chosen by --train.loss)" : " (node '" + g.loss_node + "')")
      << (g.output_softmax ? ", absorbing the graph's softmax" : "") << "\n";
  for (const auto& n : g.notes) out << "  note: " << n << "\n";
}

tlm::Dataset load_data(const TrainConfig& c, bool train) {
  if (c.data == "fashion-mnist") return tlm::load_fashion_mnist(c.data_dir, train);
  const std::string& x = train ? c.train_x : c.test_x;
  const std::string& y = train ? c.train_y : c.test_y;
  if (x.empty() || y.empty()) return {};
  return c.data == "npy" ? tlm::load_npy(x, y) : tlm::load_idx(x, y);
}

void check_test_set(const tlm::Dataset& test, const KernelGraph& g) {
  if (test.count == 0) return;
  if (static_cast<int64_t>(test.features) != g.in_features) {
    throw ConfigError("the test set has " + std::to_string(test.features) + " features per sample, the model's input " +
                      std::to_string(g.in_features));
  }
  if (test.classes > g.classes()) {
    throw ConfigError("the test set has labels up to " + std::to_string(test.classes - 1) + ", the model only " +
                      std::to_string(g.classes()) + " classes");
  }
}

void write_text(const std::filesystem::path& p, const std::string& s) { write_file_atomic(p.string(), s); }

long long checkpoint_number(const OnnxModel& m, const TrainConfig& c, const char* key, long long lo) {
  auto it = m.metadata.find(key);
  if (it == m.metadata.end()) throw ConfigError(c.resume + " is not a wafersim checkpoint (no " + key + " metadata)");
  long long v = 0;
  size_t used = 0;
  try {
    v = std::stoll(it->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != it->second.size()) {
    throw ConfigError(c.resume + ": metadata " + key + " = '" + it->second + "' is not a whole number");
  }
  if (v < lo) throw ConfigError(c.resume + ": metadata " + key + " = " + it->second + " is out of range (at least " + std::to_string(lo) + ")");
  return v;
}

void check_checkpoint_hyper(const OnnxModel& m, const TrainConfig& c) {
  for (const char* key : {"wafersim.lr", "wafersim.momentum"}) {
    auto it = m.metadata.find(key);
    if (it == m.metadata.end()) continue;  // informational (the run's own train.lr and train.momentum apply)
    double v = 0;
    size_t used = 0;
    try {
      v = std::stod(it->second, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    const bool lr = std::string(key) == "wafersim.lr";
    if (used == 0 || used != it->second.size() || !std::isfinite(v) || (lr ? !(v > 0) : !(v >= 0 && v < 1))) {
      throw ConfigError(c.resume + ": metadata " + key + " = '" + it->second + "' is not " +
                        (lr ? "a positive number" : "a number in [0, 1)") + ": the checkpoint is damaged");
    }
  }
}

namespace {

// "section.key" -> value of a resolved configuration (options.cc's resolved_ini), without the
// options that change no result.
std::map<std::string, std::string> result_options(const std::string& ini) {
  static const std::set<std::string> kNoResult = {
      "train.steps", "train.log_every", "train.checkpoint_every", "train.eval", "train.progress_seconds",
      "sim.threads", "sim.visit_order", "sim.watchdog_cycles", "sim.cycles", "sim.seed",  // the seed is the checkpoint's
      "router.express", "router.vector", "core.lazy", "ws.threads", "stats.fabric", "trace.vcd", "trace.region"};
  std::map<std::string, std::string> v;
  std::istringstream in(ini);
  std::string line, section;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    const std::string key = section + "." + line.substr(0, eq);
    if (!kNoResult.count(key)) v[key] = line.substr(eq + 3);
  }
  return v;
}

}  // namespace

std::string checkpoint_config(const TrainConfig& c) {
  std::string text;
  for (const auto& [key, value] : result_options(c.resolved_ini)) text += key + " = " + value + "\n";
  return text;
}

std::string resume_option_changes(const OnnxModel& m, const TrainConfig& c) {
  auto it = m.metadata.find("wafersim.config");
  if (it == m.metadata.end()) return "";
  std::map<std::string, std::string> before;
  std::istringstream in(it->second);
  for (std::string line; std::getline(in, line);) {
    const auto eq = line.find(" = ");
    if (eq != std::string::npos) before[line.substr(0, eq)] = line.substr(eq + 3);
  }
  std::string changes;
  for (const auto& [key, value] : result_options(c.resolved_ini)) {
    auto b = before.find(key);
    if (b == before.end() || b->second == value) continue;
    changes += (changes.empty() ? "" : ", ") + key + " = " + value + " (was " + b->second + ")";
  }
  if (changes.empty()) return "";
  return "note: options that differ from the run that wrote the checkpoint: " + changes +
         "; the results will differ from an uninterrupted run\n";
}

std::string checkpoint_losses(const OnnxModel& m, const TrainConfig& c, const std::string& header, long long step) {
  auto it = m.metadata.find(kLossesKey);
  if (it == m.metadata.end()) return header;
  const std::string& s = it->second;
  if (s.compare(0, header.size(), header) != 0 || (!s.empty() && s.back() != '\n')) {
    throw ConfigError(c.resume + ": metadata " + kLossesKey + " is not this mode's losses.csv: the checkpoint is damaged");
  }
  if (s.size() > header.size()) {
    const size_t start = s.find_last_of('\n', s.size() - 2) + 1;
    const std::string last = s.substr(start, s.find(',', start) - start);
    if (last != std::to_string(step)) {
      throw ConfigError(c.resume + ": its losses end at step " + last + ", its weights are of step " + std::to_string(step) +
                        ": the checkpoint is damaged");
    }
  }
  return s;
}

void HealthCheck::fail(long long step, const std::string& what) const {
  std::string kept = good_step < 0 ? "no checkpoint was written (train.checkpoint_every 0 writes one only at the end)"
                                   : checkpoint + " (after step " + std::to_string(good_step) + ") and its losses are kept";
  throw TrainingDiverged("training diverged at step " + std::to_string(step) + ": " + what + "; the run stops there and " + kept +
                         ". Try a smaller train.lr, or check the data and its normalisation (data.scale, data.mean, data.std)");
}

void HealthCheck::loss(long long step, double loss) const {
  if (!std::isfinite(loss)) fail(step, std::string("the mean loss is ") + (std::isnan(loss) ? "NaN" : "infinite"));
}

void HealthCheck::tensor(long long step, const std::string& what, const std::vector<float>& values) const {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      fail(step, what + " element " + std::to_string(i) + " is " + (std::isnan(values[i]) ? "NaN" : "infinite"));
    }
  }
}

void write_compile_outputs(const TrainConfig& c, const nlohmann::json& report, const std::string& text) {
  std::filesystem::create_directories(c.out);
  write_text(std::filesystem::path(c.out) / "compile_report.json", report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  write_text(std::filesystem::path(c.out) / "compile_report.txt", text);
  write_text(std::filesystem::path(c.out) / "config.ini", c.resolved_ini);
}

void FabricTraffic::add(const FabricTotals& before, const FabricTotals& after) {
  sends += after.forwarded - before.forwarded;
  injected += after.injected - before.injected;
  delivered += after.delivered - before.delivered;
}

void report_fabric_traffic(const FabricTraffic& t, uint64_t cycles, nlohmann::json& rep, std::string& text) {
  const double per_cycle = cycles ? static_cast<double>(t.sends) / static_cast<double>(cycles) : 0.0;
  rep["fabric"] = {{"router_sends", t.sends}, {"injected", t.injected}, {"delivered", t.delivered},
                   {"router_sends_per_cycle", per_cycle}};
  text += "  fabric traffic       " + std::to_string(t.sends) + " router sends (links, ramps, channels; " +
          fixed(per_cycle, 1) + " per cycle), " + std::to_string(t.injected) + " wavelets injected, " +
          std::to_string(t.delivered) + " delivered\n";
}

void write_run_fabric_stats(const Fabric& f, const std::filesystem::path& dir, std::string& text) {
  std::filesystem::create_directories(dir);
  write_fabric_stats(f, dir.string());
  text += "  fabric counters      " + dir.string() + "/{stats.json,pe_*.csv} (scripts/plot_fabric_heatmaps " + dir.string() + ")\n";
}

void finish_run_report(const TrainConfig& c, double wall_seconds, nlohmann::json& rep, std::string text, std::ostream& out) {
  text += "  wall time            " + fixed(wall_seconds, 1) + " s (compile, train, evaluate)\n";
  rep["wall_seconds"] = wall_seconds;
  out << text;
  write_text(std::filesystem::path(c.out) / "run_report.json", rep.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  write_text(std::filesystem::path(c.out) / "run_report.txt", text);
  out << "checkpoint, reports and losses in " << c.out << "/\n";
}

}  // namespace wafersim
