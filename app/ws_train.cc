#include "app/ws_train.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

#include "app/fabric_cmd.h"
#include "app/interrupt.h"
#include "app/train_util.h"
#include "compiler/placement.h"
#include "compiler/ws_codegen.h"
#include "compiler/ws_reference.h"
#include "tlm/cluster.h"
#include "tlm/ws_trainer.h"

namespace wafersim {
namespace {

using namespace compiler;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double secs_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The cluster's configuration from the command's options.
tlm::ClusterConfig cluster_of(const TrainConfig& c) {
  tlm::ClusterConfig k;
  k.memx = c.memx;
  k.swarmx = c.swarmx;
  k.bridge = c.bridge;
  k.input_workers = c.input_workers;
  k.worker_gbps = c.worker_gbps;
  k.slow_worker_gbps = c.slow_worker_gbps;
  k.prefetch = c.prefetch;
  k.quantum_cycles = c.quantum_cycles;
  k.threads = c.ws_threads;
  return k;
}

struct WsBuild {
  WsCompiled compiled;
  nlohmann::json report;
  std::string text;
};

WsBuild build(const TrainConfig& c, const KernelGraph& g) {
  WsBuild b;
  WsOptions o = c.ws;
  o.pace = tlm::ws_host_pace(cluster_of(c), c.hw.fabric.clock_mhz, g);  // the one estimate chooses the mapping
  const WsPlan plan = place_ws(g, c.hw, o);
  b.compiled = generate_ws(plan, asm_target(c.hw));
  b.report = ws_compile_report(g, plan, c.hw, o.pace);
  b.text = ws_report_text(b.report);
  return b;
}

// A layer's tensor (out x in, kernel units) in its initializer's layout.
std::vector<float> to_onnx(const DenseKernel& d, const std::vector<float>& W, bool unfold) {
  std::vector<float> w(W.size());
  for (int o = 0; o < d.w_out(); ++o) {
    for (int i = 0; i < d.w_in(); ++i) {
      const float v = W[static_cast<size_t>(o) * d.w_in() + i] / (unfold ? d.alpha : 1.0f);
      w[d.weight_in_out ? static_cast<size_t>(i) * d.out + o : static_cast<size_t>(o) * d.w_in() + i] = v;
    }
  }
  return w;
}

std::vector<float> from_onnx(const DenseKernel& d, const std::vector<float>& src) {
  if (!d.weight_in_out) return src;
  std::vector<float> w(src.size());
  for (int o = 0; o < d.out; ++o) {
    for (int i = 0; i < d.in; ++i) w[static_cast<size_t>(o) * d.in + i] = src[static_cast<size_t>(i) * d.out + o];
  }
  return w;
}

// Optimizer state travels as extra initializers NAME.momentum_buffer (sgd) or NAME.exp_avg and
// NAME.exp_avg_sq (adam), exactly MemoryX's (PyTorch's) state, in the weight's layout.
// Every value is checked to be finite first: a checkpoint that --resume would reject is never
// written. The losses up to the checkpoint travel inside it.
void write_ws_checkpoint(const std::string& src, const std::string& dst, const KernelGraph& g, const tlm::MemoryX& mx,
                         const tlm::WsTrainer& t, const TrainConfig& c, uint64_t seed, const std::string& losses_csv,
                         const HealthCheck& health) {
  std::map<std::string, std::vector<float>> weights;
  std::vector<OnnxTensor> extra;
  auto add_extra = [&](const std::string& name, std::vector<float> v) {
    health.tensor(t.steps_done(), "MemoryX's '" + name + "'", v);
    if (v.empty()) return;
    OnnxTensor e;
    e.name = name;
    e.elem_type = kOnnxFloat;
    e.dims = {static_cast<int64_t>(v.size())};
    e.f32 = std::move(v);
    extra.push_back(std::move(e));
  };
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const DenseKernel& d = g.layers[l];
    const tlm::TensorState ws = mx.state(t.weight_tensor(static_cast<int>(l)));
    health.tensor(t.steps_done(), "MemoryX's weight '" + d.weight + "'", ws.weights);
    weights[d.weight] = to_onnx(d, ws.weights, true);
    add_extra(d.weight + ".momentum_buffer", ws.momentum_buffer.empty() ? ws.momentum_buffer : to_onnx(d, ws.momentum_buffer, false));
    add_extra(d.weight + ".exp_avg", ws.exp_avg.empty() ? ws.exp_avg : to_onnx(d, ws.exp_avg, false));
    add_extra(d.weight + ".exp_avg_sq", ws.exp_avg_sq.empty() ? ws.exp_avg_sq : to_onnx(d, ws.exp_avg_sq, false));
    // The roots' tensor: the bias, then a LayerNorm's gamma and beta (each a value per output).
    const tlm::TensorState bs = mx.state(t.bias_tensor(static_cast<int>(l)));
    const std::string bname = d.bias.empty() ? d.name + ".bias" : d.bias;
    health.tensor(t.steps_done(), "MemoryX's bias '" + bname + "'", bs.weights);
    auto cut = [&](const std::vector<float>& v, int k) {
      const long n = d.w_out();
      return v.empty() ? v : std::vector<float>(v.begin() + k * n, v.begin() + (k + 1) * n);
    };
    const std::vector<std::string> names = d.ln.on ? std::vector<std::string>{bname, d.ln.scale, d.ln.bias} : std::vector<std::string>{bname};
    for (size_t k = 0; k < names.size(); ++k) {
      const int ki = static_cast<int>(k);
      if (k > 0 || !d.bias.empty()) {
        std::vector<float> v = cut(bs.weights, ki);
        if (k == 0) {
          for (float& x : v) x /= d.beta;
        }
        weights[names[k]] = v;
      } else if (!d.ln.on) {
        continue;  // no bias initializer: nothing to write (beside a LayerNorm, its state is, for the resume)
      }
      add_extra(names[k] + ".momentum_buffer", cut(bs.momentum_buffer, ki));
      add_extra(names[k] + ".exp_avg", cut(bs.exp_avg, ki));
      add_extra(names[k] + ".exp_avg_sq", cut(bs.exp_avg_sq, ki));
    }
  }
  write_onnx_with_weights(src, dst, weights, extra,
                          {{"wafersim.mode", "weight-streaming"},
                           {"wafersim.step", std::to_string(t.steps_done())},
                           {"wafersim.seed", std::to_string(seed)},
                           {"wafersim.batch", std::to_string(c.ws.batch)},
                           {"wafersim.optimizer", c.memx.optimizer},
                           {"wafersim.lr", fixed(c.memx.lr, 9)},
                           {"wafersim.momentum", fixed(c.memx.momentum, 9)},
                           {"wafersim.config", checkpoint_config(c)},
                           {kLossesKey, losses_csv}});
}

// Puts the checkpoint's optimizer state into MemoryX (the weights are already there: they are
// the checkpoint's initializers). Returns the step it was taken after.
long long restore_ws(const OnnxModel& m, const KernelGraph& g, const TrainConfig& c, tlm::MemoryX& mx,
                     const tlm::WsTrainer& t, uint64_t* seed) {
  auto mode = m.metadata.find("wafersim.mode");
  if (mode == m.metadata.end() || mode->second != "weight-streaming") {
    throw ConfigError(c.resume + " was written in layer-pipelined mode (its momentum is the wafer's, not MemoryX's); "
                      "resume it with --mode layer-pipelined");
  }
  const long long step = checkpoint_number(m, c, "wafersim.step");
  check_checkpoint_hyper(m, c);
  *seed = static_cast<uint64_t>(checkpoint_number(m, c, "wafersim.seed"));
  if (checkpoint_number(m, c, "wafersim.batch", 1) != c.ws.batch) {
    throw ConfigError("the checkpoint was trained with batch " + std::to_string(checkpoint_number(m, c, "wafersim.batch", 1)) +
                      "; resume with --train.batch " + std::to_string(checkpoint_number(m, c, "wafersim.batch", 1)));
  }
  auto opt = m.metadata.find("wafersim.optimizer");
  if (opt == m.metadata.end() || opt->second != c.memx.optimizer) {
    throw ConfigError("the checkpoint's optimizer is '" + (opt == m.metadata.end() ? std::string("?") : opt->second) +
                      "'; resume with --memoryx.optimizer " + (opt == m.metadata.end() ? std::string("?") : opt->second));
  }
  auto get = [&](const std::string& name, size_t n, const DenseKernel* d) -> std::vector<float> {
    auto it = m.initializers.find(name);
    if (it == m.initializers.end()) return {};
    if (it->second.f32.size() != n) throw ConfigError(c.resume + ": tensor '" + name + "' has the wrong size");
    return d ? from_onnx(*d, it->second.f32) : it->second.f32;
  };
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const DenseKernel& d = g.layers[l];
    // A tensor's optimizer state from its parts' (one part, or the roots' three: bias, gamma, beta).
    auto restore_parts = [&](int id, const std::vector<std::string>& names, const DenseKernel* layout) {
      tlm::TensorState s = mx.state(id);
      const size_t n = s.weights.size() / names.size();
      s.step = static_cast<uint64_t>(step);
      auto joined = [&](const std::string& suffix) {
        std::vector<float> v;
        for (const std::string& name : names) {
          const std::vector<float> part = get(name + suffix, n, layout);
          if (part.empty()) return std::vector<float>{};
          v.insert(v.end(), part.begin(), part.end());
        }
        return v;
      };
      const std::string& name = names.front();
      if (step > 0) {
        if (c.memx.optimizer == "sgd") s.momentum_buffer = joined(".momentum_buffer");
        else {
          s.exp_avg = joined(".exp_avg");
          s.exp_avg_sq = joined(".exp_avg_sq");
        }
        if ((c.memx.optimizer == "sgd" && s.momentum_buffer.empty()) || (c.memx.optimizer != "sgd" && s.exp_avg.empty())) {
          throw ConfigError(c.resume + ": the optimizer state of '" + name + "' is missing");
        }
      }
      mx.set_state(id, std::move(s));
    };
    restore_parts(t.weight_tensor(static_cast<int>(l)), {d.weight}, &d);
    if (d.ln.on) {
      restore_parts(t.bias_tensor(static_cast<int>(l)), {d.bias.empty() ? d.name + ".bias" : d.bias, d.ln.scale, d.ln.bias}, nullptr);
    } else if (!d.bias.empty()) {
      restore_parts(t.bias_tensor(static_cast<int>(l)), {d.bias}, nullptr);
    }
  }
  return step;
}

nlohmann::json time_json(const tlm::WsTime& t) {
  return {{"compute", t.compute}, {"weight_stream", t.weight_stream}, {"grad_reduce", t.grad_reduce}, {"input_stall", t.input_stall}};
}

std::string pct(uint64_t part, uint64_t whole) { return fixed(whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0, 1); }

}  // namespace

std::string resolve_mode(const TrainConfig& c, const KernelGraph& g, std::ostream& out) {
  if (c.mode != "auto") return c.mode;
  if (c.compile.place.in_flight != 1) {
    out << "mode auto: layer-pipelined (train.in_flight " << c.compile.place.in_flight << " is layer-pipelined's)\n";
    return "layer-pipelined";
  }
  if (c.ws.systems > 1) {
    out << "mode auto: weight streaming (" << c.ws.systems << " systems; layer-pipelined runs on one)\n";
    return "weight-streaming";
  }
  try {
    place_layers(g, c.hw, c.compile.place);
  } catch (const CompileError& e) {
    out << "mode auto: weight streaming, because layer-pipelined does not fit: " << e.what() << "\n";
    return "weight-streaming";
  }
  out << "mode auto: layer-pipelined (the whole model fits the " << c.hw.fabric.width << " x " << c.hw.fabric.height
      << " fabric)\n";
  return "layer-pipelined";
}

void ws_compile(const TrainConfig& c, const KernelGraph& g, std::ostream& out) {
  const auto t0 = Clock::now();
  WsBuild b = build(c, g);
  const double secs = secs_since(t0);
  b.report["compile_seconds"] = secs;
  out << b.text;
  write_compile_outputs(c, b.report, b.text);
  if (c.compile_only) save_program(b.compiled.program, (fs::path(c.out) / "program").string());
  out << "compiled in " << fixed(secs, 2) << " s; report" << (c.compile_only ? ", program" : "") << " in " << c.out << "/\n";
}

int ws_train(const TrainConfig& c, const OnnxModel& m, const KernelGraph& g, const std::string& model_path,
              std::ostream& out) {
  const auto t0 = Clock::now();
  uint64_t seed = c.hw.sim.seed;
  WsBuild b = build(c, g);
  out << b.text;
  const tlm::Dataset train = load_data(c, true);
  tlm::Dataset test;
  if (c.eval) test = load_data(c, false);
  check_test_set(test, g);
  write_compile_outputs(c, b.report, b.text);

  const tlm::WsHostLinks links = tlm::ws_host_links(cluster_of(c), c.hw.fabric.clock_mhz);
  long long first = 0;
  // The data order needs the seed before the trainer exists; a resumed run takes it from the checkpoint.
  if (!c.resume.empty()) seed = static_cast<uint64_t>(checkpoint_number(m, c, "wafersim.seed"));
  HwConfig hw = c.hw;
  // The relay routers' own counters (stats) or sends (traces) are wanted: no express lines.
  if (c.fabric_stats || !c.trace.vcd.empty()) hw.router.express = false;
  tlm::Cluster cluster("cluster", c.memx, c.swarmx, links, hw, g, b.compiled, train, c.norm, seed, 0);
  tlm::WsTrainer& t = cluster.trainer();
  tlm::MemoryX& mx = cluster.memoryx();
  if (!c.resume.empty()) {
    first = restore_ws(m, g, c, mx, t, &seed);
    t.set_steps_done(first);
    out << "resuming from " << c.resume << " after step " << first << " (seed " << seed << ")\n"
        << resume_option_changes(m, c);
  }
  sc_core::sc_trace_file* tf = nullptr;
  if (!c.trace.vcd.empty()) {
    tf = open_vcd(c.trace.vcd);
    t.trace(tf, train_trace_region(c));
  }
  if (c.progress_seconds > 0) t.set_progress([&out](const std::string& line) { out << line << std::flush; }, c.progress_seconds);
  const double f = c.hw.fabric.clock_mhz * 1e6;
  const int B = c.ws.batch;
  const long long last = first + c.steps;
  const long long every = c.log_every ? c.log_every : std::max<long long>(1, c.steps / 20);
  const std::string header = "step,mean_loss,cycles,compute,weight_stream,grad_reduce,input_stall\n";
  std::string csv = c.resume.empty() ? header : checkpoint_losses(m, c, header, first);
  const std::string checkpoint = (fs::path(c.out) / "checkpoint.onnx").string();
  HealthCheck health{c.resume.empty() ? checkpoint : c.resume, c.resume.empty() ? -1 : first};
  const int passes = 2 * static_cast<int>(g.layers.size());
  tlm::WsTime total;
  std::vector<tlm::WsTime> per_pass(static_cast<size_t>(passes));
  uint64_t cycles = 0;
  double window_loss = 0, last_loss = 0;
  long long window = 0;
  out << "training " << c.steps << " steps of " << B << " samples on " << c.ws.systems << " system(s), weight streaming ("
      << train.count << " in the training set)\n";
  std::vector<FabricTotals> traffic0;
  for (int i = 0; i < t.systems(); ++i) {
    if (c.fabric_stats) t.system(i).fabric().reset_stats();  // the counters cover the training steps
    traffic0.push_back(t.system(i).fabric().totals());
  }
  const auto h0 = Clock::now();
  InterruptGuard interrupt;  // SIGINT/SIGTERM: stop after this step, write what there is
  while (t.steps_done() < last && !InterruptGuard::requested()) {
    const tlm::WsStepResult s = t.step();
    health.loss(s.step, s.mean_loss);
    cycles += s.cycles;
    total += s.time;
    for (int p = 0; p < passes; ++p) per_pass[static_cast<size_t>(p)] += s.pass_time[static_cast<size_t>(p)];
    csv += std::to_string(s.step) + "," + exact(s.mean_loss) + "," + std::to_string(s.cycles) + "," + std::to_string(s.time.compute) +
           "," + std::to_string(s.time.weight_stream) + "," + std::to_string(s.time.grad_reduce) + "," +
           std::to_string(s.time.input_stall) + "\n";
    window_loss += s.mean_loss;
    last_loss = s.mean_loss;
    ++window;
    if (s.step % every == 0 || s.step == last) {
      const double host = secs_since(h0);
      const double done = static_cast<double>(s.step - first) * B;
      out << "step " << s.step << "/" << last << "  loss " << fixed(window_loss / static_cast<double>(window), 4) << "  simulated "
          << fixed(done / (static_cast<double>(cycles) / f), 0) << " samples/s  host " << fixed(host, 1) << " s ("
          << fixed(done / host, 1) << " samples/s)\n"
          << std::flush;
      window_loss = 0;
      window = 0;
    }
    if (c.checkpoint_every && s.step % c.checkpoint_every == 0 && s.step != last) {
      write_ws_checkpoint(model_path, checkpoint, g, mx, t, c, seed, csv, health);
      write_text(fs::path(c.out) / "losses.csv", csv);  // the losses up to the checkpoint (also inside it)
      health = {checkpoint, s.step};
    }
  }
  const double host = secs_since(h0);
  if (tf) sc_core::sc_close_vcd_trace_file(tf);
  const long long ran = t.steps_done() - first;  // c.steps, unless interrupted
  if (ran == 0) {
    out << "interrupted before the first step finished: nothing more to write\n";
    return InterruptGuard::exit_code();
  }
  write_ws_checkpoint(model_path, checkpoint, g, mx, t, c, seed, csv, health);
  write_text(fs::path(c.out) / "losses.csv", csv);

  const double samples = static_cast<double>(ran) * B;
  const double measured = samples / (static_cast<double>(cycles) / f);
  const double estimated = b.report["overall_samples_per_s"].get<double>();
  nlohmann::json rep;
  rep["mode"] = "weight-streaming";
  rep["systems"] = c.ws.systems;
  rep["steps"] = ran;
  rep["samples"] = samples;
  rep["cycles"] = cycles;
  rep["time_split_cycles"] = time_json(total);
  nlohmann::json passes_json = nlohmann::json::array();
  const int L = static_cast<int>(g.layers.size());
  for (int p = 0; p < passes; ++p) {
    const int l = p < L ? p : passes - 1 - p;
    nlohmann::json j = time_json(per_pass[static_cast<size_t>(p)]);
    j["layer"] = g.layers[static_cast<size_t>(l)].name;
    j["pass"] = p < L ? "forward" : "backward";
    passes_json.push_back(j);
  }
  rep["passes"] = passes_json;
  rep["measured_samples_per_s"] = measured;
  rep["estimated_samples_per_s"] = estimated;
  rep["estimate_error_pct"] = 100.0 * (estimated - measured) / measured;
  rep["host_seconds"] = host;
  rep["host_model_seconds"] = t.host_model_seconds();
  rep["host_model_pct"] = 100.0 * t.host_model_seconds() / host;
  rep["host_wafer_seconds"] = t.wafer_seconds();
  rep["host_overhead_pct"] = 100.0 * (host - t.wafer_seconds()) / host;
  rep["host_samples_per_s"] = samples / host;
  // The mapping's PEs (every system's) times the cycles, per host second: the simulator's speed
  // per active PE-cycle, comparable with layer-pipelined mode's (scripts/bench_wafer_speed).
  const double pes = b.report["pes_per_system"].get<double>() * c.ws.systems;
  rep["pe_cycles_per_host_second"] = pes * static_cast<double>(cycles) / host;
  rep["west_offers_refused"] = t.system(0).refused();
  rep["final_loss"] = last_loss;
  const uint64_t tt = total.total();
  std::string text = "Run report (weight streaming, " + std::to_string(c.ws.systems) + " system(s))\n  steps " +
                     std::to_string(ran) + " x batch " + std::to_string(B) + ", " + std::to_string(cycles) +
                     " cycles\n  measured samples/s   " + fixed(measured, 1) + " (simulated, at " +
                     fixed(c.hw.fabric.clock_mhz, 0) + " MHz)\n  estimated samples/s  " + fixed(estimated, 1) +
                     " (compile report)\n  time split (system 0): compute " + pct(total.compute, tt) + " %, weight stream " +
                     pct(total.weight_stream, tt) + " %, gradient reduce " + pct(total.grad_reduce, tt) + " %, input stall " +
                     pct(total.input_stall, tt) + " %\n";
  for (const auto& p : passes_json) {
    const uint64_t pt = p["compute"].get<uint64_t>() + p["weight_stream"].get<uint64_t>() + p["grad_reduce"].get<uint64_t>() +
                        p["input_stall"].get<uint64_t>();
    text += "    " + p["layer"].get<std::string>() + " " + p["pass"].get<std::string>() + ": " + std::to_string(pt) +
            " cycles (compute " + pct(p["compute"].get<uint64_t>(), pt) + " %, weight stream " +
            pct(p["weight_stream"].get<uint64_t>(), pt) + " %, gradient reduce " + pct(p["grad_reduce"].get<uint64_t>(), pt) +
            " %, input stall " + pct(p["input_stall"].get<uint64_t>(), pt) + " %)\n";
  }
  text += "  host time            " + fixed(host, 1) + " s, " + fixed(samples / host, 1) + " samples/s, " +
          fixed(rep["pe_cycles_per_host_second"].get<double>() / 1e6, 2) + " M PE-cycles/s; outside the wafers' cycle loops " +
          fixed(100.0 * (host - t.wafer_seconds()) / host, 2) + " % of it (host models " + fixed(100.0 * t.host_model_seconds() / host, 2) +
          " %, the rest SystemC, TLM, the input workers)\n";
  FabricTraffic traffic;  // of every system
  for (int i = 0; i < t.systems(); ++i) traffic.add(traffic0[static_cast<size_t>(i)], t.system(i).fabric().totals());
  report_fabric_traffic(traffic, cycles, rep, text);
  for (int i = 0; c.fabric_stats && i < t.systems(); ++i) {
    write_run_fabric_stats(t.system(i).fabric(), fs::path(c.out) / "fabric" / ("system_" + std::to_string(i)), text);
  }
  if (c.eval && test.count > 0 && !InterruptGuard::requested()) {
    const auto w = t.weights(), bs = t.biases();
    long long right = 0;
    std::vector<float> xn(test.count * test.features);
    std::vector<const float*> xs(test.count);
    for (size_t i = 0; i < test.count; ++i) {
      for (size_t k = 0; k < test.features; ++k) xn[i * test.features + k] = c.norm.apply(test.sample(i)[k], k);
      xs[i] = &xn[i * test.features];
    }
    // The roots' tensors hold a LayerNorm's gamma and beta after the bias.
    std::vector<std::vector<float>> bias = bs;
    WsNorms norms;
    for (size_t l = 0; l < g.layers.size(); ++l) {
      const auto n = static_cast<long>(g.layers[l].w_out());
      norms.g.emplace_back();
      norms.b.emplace_back();
      if (!g.layers[l].ln.on) continue;
      norms.g.back().assign(bs[l].begin() + n, bs[l].begin() + 2 * n);
      norms.b.back().assign(bs[l].begin() + 2 * n, bs[l].begin() + 3 * n);
      bias[l].resize(static_cast<size_t>(n));
    }
    const auto zs = ws_reference_forward_batch(b.compiled.plan, w, bias, xs, c.hw.sim.threads, norms);
    for (size_t i = 0; i < test.count; ++i) {
      const auto& z = zs[i];
      right += static_cast<int>(std::max_element(z.begin(), z.end()) - z.begin()) == test.labels[i];
    }
    const double acc = 100.0 * static_cast<double>(right) / static_cast<double>(test.count);
    rep["test_accuracy_pct"] = acc;
    rep["test_samples"] = test.count;
    text += "  test accuracy        " + fixed(acc, 2) + " % of " + std::to_string(test.count) +
            " (host forward pass with MemoryX's weights)\n";
  }
  if (InterruptGuard::requested()) {
    rep["interrupted_after_step"] = t.steps_done();
    text += "  interrupted          after step " + std::to_string(t.steps_done()) + " of " + std::to_string(last) +
            " (no test accuracy); --resume " + (fs::path(c.out) / "checkpoint.onnx").string() +
            " --mode weight-streaming goes on from there\n";
  }
  finish_run_report(c, secs_since(t0), rep, text, out);
  return InterruptGuard::requested() ? InterruptGuard::exit_code() : 0;
}

}  // namespace wafersim
