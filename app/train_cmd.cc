#include "app/train_cmd.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <map>

#include "app/fabric_cmd.h"
#include "app/interrupt.h"
#include "app/options.h"
#include "app/train_util.h"
#include "app/ws_train.h"
#include "compiler/compile.h"
#include "compiler/reference.h"
#include "hw/atomic_file.h"
#include "hw/wafer.h"
#include "tlm/dataset.h"
#include "tlm/trainer.h"

namespace wafersim {
namespace {

using namespace compiler;
namespace fs = std::filesystem;




// Momentum tensors travel in checkpoints as extra initializers next to their weights.
std::string momentum_name(const std::string& init) { return init + ".momentum"; }

// Weights as the ONNX initializers hold them: W in the initializer's layout, alpha/beta unfolded.
std::map<std::string, std::vector<float>> onnx_weights(const KernelGraph& g, const ModelState& s, bool momentum) {
  std::map<std::string, std::vector<float>> m;
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const DenseKernel& d = g.layers[l];
    const auto& W = momentum ? s.v[l] : s.w[l];
    std::vector<float> w(W.size());
    for (int o = 0; o < d.w_out(); ++o) {
      for (int i = 0; i < d.w_in(); ++i) {
        const float v = W[static_cast<size_t>(o) * d.w_in() + i] / (momentum ? 1.0f : d.alpha);
        w[d.weight_in_out ? static_cast<size_t>(i) * d.out + o : static_cast<size_t>(o) * d.w_in() + i] = v;
      }
    }
    m[momentum ? momentum_name(d.weight) : d.weight] = std::move(w);
    if (!d.bias.empty()) {
      std::vector<float> b = momentum ? s.vb[l] : s.b[l];
      if (!momentum) {
        for (float& v : b) v /= d.beta;
      }
      m[momentum ? momentum_name(d.bias) : d.bias] = std::move(b);
    }
    if (d.ln.on) {  // the LayerNorm's gamma and beta
      m[momentum ? momentum_name(d.ln.scale) : d.ln.scale] = momentum ? s.lvg[l] : s.lg[l];
      m[momentum ? momentum_name(d.ln.bias) : d.ln.bias] = momentum ? s.lvb[l] : s.lb[l];
    }
  }
  return m;
}

// Writes the checkpoint of `s` with the losses up to it, after checking that every weight and
// momentum value is finite (a checkpoint that --resume would reject is never written).
void write_checkpoint(const std::string& src, const std::string& dst, const KernelGraph& g, const ModelState& s,
                      const TrainConfig& c, uint64_t seed, const std::string& losses_csv, const HealthCheck& health) {
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const std::string& name = g.layers[l].name;
    health.tensor(s.step, "layer '" + name + "' weight", s.w[l]);
    health.tensor(s.step, "layer '" + name + "' bias", s.b[l]);
    health.tensor(s.step, "layer '" + name + "' weight momentum", s.v[l]);
    health.tensor(s.step, "layer '" + name + "' bias momentum", s.vb[l]);
    if (g.layers[l].ln.on) {
      health.tensor(s.step, "layer '" + name + "' LayerNorm scale", s.lg[l]);
      health.tensor(s.step, "layer '" + name + "' LayerNorm bias", s.lb[l]);
      health.tensor(s.step, "layer '" + name + "' LayerNorm scale momentum", s.lvg[l]);
      health.tensor(s.step, "layer '" + name + "' LayerNorm bias momentum", s.lvb[l]);
    }
  }
  std::vector<OnnxTensor> extra;
  for (auto& [name, v] : onnx_weights(g, s, true)) {
    OnnxTensor t;
    t.name = name;
    t.elem_type = kOnnxFloat;
    t.dims = {static_cast<int64_t>(v.size())};
    t.f32 = v;
    extra.push_back(std::move(t));
  }
  write_onnx_with_weights(src, dst, onnx_weights(g, s, false), extra,
                          {{"wafersim.step", std::to_string(s.step)},
                           {"wafersim.seed", std::to_string(seed)},
                           {"wafersim.batch", std::to_string(c.compile.place.batch)},
                           {"wafersim.lr", fixed(c.compile.hyper.lr, 9)},
                           {"wafersim.momentum", fixed(c.compile.hyper.momentum, 9)},
                           {"wafersim.config", checkpoint_config(c)},
                           {kLossesKey, losses_csv}});
}



// The state a checkpoint holds: weights (the graph's initializers), momentum (NAME.momentum),
// step and seed (metadata). Throws ConfigError for anything missing or inconsistent.
ModelState restore_checkpoint(const OnnxModel& m, const KernelGraph& g, const TrainConfig& c, uint64_t* seed) {
  auto meta = [&](const char* k) { return checkpoint_number(m, c, k); };
  auto mode = m.metadata.find("wafersim.mode");
  if (mode != m.metadata.end() && mode->second == "weight-streaming") {
    throw ConfigError(c.resume + " was written in weight-streaming mode (its optimizer state is MemoryX's, not the "
                      "wafer's); resume it with --mode weight-streaming");
  }
  ModelState state = ModelState::from_graph(g);
  state.step = meta("wafersim.step");
  check_checkpoint_hyper(m, c);
  *seed = static_cast<uint64_t>(meta("wafersim.seed"));
  if (checkpoint_number(m, c, "wafersim.batch", 1) != c.compile.place.batch) {
    throw ConfigError("the checkpoint was trained with batch " + std::to_string(checkpoint_number(m, c, "wafersim.batch", 1)) +
                      "; resume with --train.batch " + std::to_string(checkpoint_number(m, c, "wafersim.batch", 1)));
  }
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const DenseKernel& d = g.layers[l];
    auto mom = [&](const std::string& name, std::vector<float>* dst, bool matrix) {
      if (name.empty()) return;
      auto it = m.initializers.find(momentum_name(name));
      if (it == m.initializers.end() || it->second.f32.size() != dst->size()) {
        throw ConfigError(c.resume + ": momentum tensor '" + momentum_name(name) + "' is missing or has the wrong size");
      }
      const auto& src = it->second.f32;
      if (!(matrix && d.weight_in_out)) {
        *dst = src;
        return;
      }
      for (int o = 0; o < d.out; ++o) {
        for (int i = 0; i < d.in; ++i) (*dst)[static_cast<size_t>(o) * d.in + i] = src[static_cast<size_t>(i) * d.out + o];
      }
    };
    mom(d.weight, &state.v[l], true);
    mom(d.bias, &state.vb[l], false);
    if (d.ln.on) {
      mom(d.ln.scale, &state.lvg[l], false);
      mom(d.ln.bias, &state.lvb[l], false);
    }
  }
  return state;
}

// Test-set accuracy in percent, on the host: the reference's forward pass (the wafer's
// arithmetic) with the weights read back from the wafer.
double test_accuracy(const KernelGraph& g, const Plan& plan, const TrainConfig& c, const ModelState& s,
                     const tlm::Dataset& test) {
  Reference ref(g, plan, c.compile.hyper, s);
  long long right = 0;
  std::vector<float> x(test.features);
  for (size_t i = 0; i < test.count; ++i) {
    for (size_t k = 0; k < x.size(); ++k) x[k] = c.norm.apply(test.sample(i)[k], k);
    const auto z = ref.forward(x.data());
    right += static_cast<int>(std::max_element(z.begin(), z.end()) - z.begin()) == test.labels[i];
  }
  return 100.0 * static_cast<double>(right) / static_cast<double>(test.count);
}

}  // namespace

int compile_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  TrainConfig c;
  try {
    if (!parse_train_options(args, &c, out, false)) return kExitOk;
    const OnnxModel m = import_onnx(c.model);
    const KernelGraph g = validate_model(m, c.compile);
    print_graph(g, out);
    if (c.validate_only) {
      out << "graph IR: " << g.ir_summary << "; checked\n";
      out << "graph IR after passes: " << g.ir_rewritten << (g.ir_passes.empty() ? "" : " (" + g.ir_passes + ")") << "; checked\n";
      if (!g.ir_fused.empty()) out << "recognised: " << g.ir_fused << "\n";
      out << "training graph: " << g.ir_training << "\n";
    }
    if (!g.unsupported.empty()) require_supported(g);
    if (c.validate_only) {
      out << "validate-only: every node is supported\n";
      return kExitOk;
    }
    if (resolve_mode(c, g, out) == "weight-streaming") {
      ws_compile(c, g, out);
      return kExitOk;
    }
    const auto t0 = std::chrono::steady_clock::now();
    CompileResult r = compile_model(c.model, c.hw, c.compile);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.report["compile_seconds"] = secs;
    out << r.report_text;
    write_compile_outputs(c, r.report, r.report_text);
    if (c.compile_only) save_program(r.compiled.program, (fs::path(c.out) / "program").string());
    out << "compiled in " << fixed(secs, 2) << " s; report" << (c.compile_only ? ", program" : "") << " in " << c.out << "/\n";
    return kExitOk;
  } catch (const CompileError& e) {
    err << "wafersim compile: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const ConfigError& e) {
    err << "wafersim compile: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    err << "wafersim compile: error: " << e.what() << "\n";
    return kExitRuntime;
  }
}

int train_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  TrainConfig c;
  try {
    if (!parse_train_options(args, &c, out, true)) return kExitOk;
    uint64_t seed = c.hw.sim.seed;
    const std::string model_path = c.resume.empty() ? c.model : c.resume;
    const OnnxModel m = import_onnx(model_path);
    const KernelGraph g = validate_model(m, c.compile);
    print_graph(g, out);
    require_supported(g);
    // A Gemm's alpha and beta are folded into its weights and bias (kernel_graph.cc), which
    // computes the graph's outputs but not its training: the gradient of W is alpha times that of
    // alpha W (and a bias that beta = 0 removes would train).
    for (const DenseKernel& d : g.layers) {
      if (d.alpha != 1.0f || (!d.bias.empty() && d.beta != 1.0f)) {
        throw CompileError(d.name + ": Gemm alpha = " + exact(d.alpha) + ", beta = " + exact(d.beta) +
                           ": training such a layer as the graph defines it is not supported yet (compile and validate take it; "
                           "torch exports nn.Linear with alpha = beta = 1)");
      }
    }
    c.norm.graph = g.input_prep;  // the model's own preprocessing, in the input workers
    if (c.validate_only) return kExitOk;
    if (resolve_mode(c, g, out) == "weight-streaming") {
      return ws_train(c, m, g, model_path, out);
    }
    ModelState state = ModelState::from_graph(g);
    if (!c.resume.empty()) {
      state = restore_checkpoint(m, g, c, &seed);
      out << "resuming from " << c.resume << " after step " << state.step << " (seed " << seed << ")\n"
          << resume_option_changes(m, c);
    }
    const tlm::Dataset train = load_data(c, true);
    tlm::Dataset test;
    if (c.eval) test = load_data(c, false);
    check_test_set(test, g);
    const auto t0 = std::chrono::steady_clock::now();
    CompileResult r = compile_model(model_path, c.hw, c.compile, &state);
    out << r.report_text;
    write_compile_outputs(c, r.report, r.report_text);

    tlm::Trainer t(c.hw, r.compiled, train, c.norm, seed, state.step);
    // Tracing: the SystemC Wafer module steps the fabric one clock period at a time, and its
    // probes write the region's signals (wafer.pe_X_Y.*) to the VCD.
    std::unique_ptr<sc_core::sc_clock> clk;
    std::unique_ptr<Wafer> wafer;
    sc_core::sc_trace_file* tf = nullptr;
    if (!c.trace.vcd.empty()) {
      const Region region = train_trace_region(c);
      const sc_core::sc_time period = clock_period(c.hw.fabric.clock_mhz);
      clk = std::make_unique<sc_core::sc_clock>("clk", period);
      wafer = std::make_unique<Wafer>("wafer", t.fabric(), std::numeric_limits<uint64_t>::max() / 2, &region);
      wafer->clk(*clk);
      tf = open_vcd(c.trace.vcd);
      wafer->trace(tf);
      Wafer* w = wafer.get();
      Fabric* fab = &t.fabric();
      t.set_stepper([w, fab, period] {
        const uint64_t before = fab->cycle();
        while (fab->cycle() == before && w->error().empty()) sc_core::sc_start(period);
        if (!w->error().empty()) throw std::runtime_error(w->error());
      });
    }
    const double f = c.hw.fabric.clock_mhz * 1e6;
    const int B = c.compile.place.batch;
    const long long last = state.step + c.steps;
    const long long every = c.log_every ? c.log_every : std::max<long long>(1, c.steps / 20);
    const std::string header = "step,mean_loss,cycles\n";
    std::string losses_csv = c.resume.empty() ? header : checkpoint_losses(m, c, header, state.step);
    const std::string checkpoint = (fs::path(c.out) / "checkpoint.onnx").string();
    HealthCheck health{c.resume.empty() ? checkpoint : c.resume, c.resume.empty() ? -1 : state.step};
    if (c.fabric_stats) t.fabric().reset_stats();  // the counters cover the training steps
    const FabricTotals traffic0 = t.fabric().totals();  // (a whole-fabric scan: before the host timer)
    const auto h0 = std::chrono::steady_clock::now();
    uint64_t cycles0 = t.cycles();
    double window_loss = 0, last_loss = 0;
    long long window = 0;
    out << "training " << c.steps << " steps of " << B << " samples (" << train.count << " in the training set)\n";
    InterruptGuard interrupt;  // SIGINT/SIGTERM: stop after this step, write what there is
    // With two minibatches in flight a step drains (the next minibatch waits for its update)
    // where the weights are read: before a checkpoint, at the end, at an interrupt, after which
    // the minibatch already begun still finishes.
    while (t.steps_done() < last && (!InterruptGuard::requested() || t.pending())) {
      const long long next = t.steps_done() + 1;
      const bool drain = next == last || (c.checkpoint_every && next % c.checkpoint_every == 0) || InterruptGuard::requested();
      const tlm::StepResult s = t.step(drain);
      health.loss(s.step, s.mean_loss);
      losses_csv += std::to_string(s.step) + "," + exact(s.mean_loss) + "," + std::to_string(s.cycles) + "\n";
      window_loss += s.mean_loss;
      last_loss = s.mean_loss;
      ++window;
      if (s.step % every == 0 || s.step == last) {
        const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count();
        const double done = static_cast<double>(s.step - state.step) * B;
        const double sim_sps = done / (static_cast<double>(t.cycles() - cycles0) / f);
        out << "step " << s.step << "/" << last << "  loss " << fixed(window_loss / static_cast<double>(window), 4)
            << "  simulated " << fixed(sim_sps, 0) << " samples/s  host " << fixed(host, 1) << " s (" << fixed(done / host, 1)
            << " samples/s)\n"
            << std::flush;
        window_loss = 0;
        window = 0;
      }
      if (c.checkpoint_every && s.step % c.checkpoint_every == 0 && s.step != last) {
        write_checkpoint(model_path, checkpoint, g, t.read_state(), c, seed, losses_csv, health);
        write_text(fs::path(c.out) / "losses.csv", losses_csv);  // the losses up to the checkpoint (also inside it)
        health = {checkpoint, s.step};
      }
    }
    const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - h0).count();
    if (tf) sc_core::sc_close_vcd_trace_file(tf);
    const long long ran = t.steps_done() - state.step;  // c.steps, unless interrupted
    if (ran == 0) {
      out << "interrupted before the first step finished: nothing more to write\n";
      return InterruptGuard::exit_code();
    }
    const ModelState final_state = t.read_state();
    write_checkpoint(model_path, checkpoint, g, final_state, c, seed, losses_csv, health);
    write_text(fs::path(c.out) / "losses.csv", losses_csv);

    // Report: measured next to the compile report's estimate.
    const uint64_t cycles = t.cycles() - cycles0;
    const double samples = static_cast<double>(ran) * B;
    const double measured = samples / (static_cast<double>(cycles) / f);
    nlohmann::json rep;
    rep["mode"] = "layer-pipelined";
    rep["steps"] = ran;
    rep["samples"] = samples;
    rep["cycles"] = cycles;
    rep["measured_samples_per_s"] = measured;
    rep["estimated_samples_per_s"] = r.report["overall_samples_per_s"];
    rep["estimate_error_pct"] = 100.0 * (r.report["overall_samples_per_s"].get<double>() - measured) / measured;
    rep["host_seconds"] = host;
    rep["host_samples_per_s"] = samples / host;
    rep["input_offers_refused"] = t.input_refused();
    rep["pe_cycles_per_host_second"] = static_cast<double>(r.compiled.plan.pes) * static_cast<double>(cycles) / host;
    rep["final_loss"] = last_loss;
    const auto busy = t.layer_busy();
    nlohmann::json kern = nlohmann::json::array();
    const int reps = r.compiled.plan.replicas;  // every copy's PEs count
    for (const LayerPlan& l : r.compiled.plan.layers) {
      const double macs = l.macs() * samples;
      kern.push_back({{"name", g.layers[static_cast<size_t>(l.index)].name},
                      {"pes", l.pes() * reps},
                      {"busy_pct", 100.0 * static_cast<double>(busy[static_cast<size_t>(l.index)]) / (l.pes() * reps * static_cast<double>(t.cycles()))},
                      {"compute_utilisation_pct",
                       100.0 * macs / (l.p_in * l.p_out * reps * static_cast<double>(cycles) * c.hw.core.fmac_fp32)}});
    }
    rep["kernels"] = kern;
    if (InterruptGuard::requested()) rep["interrupted_after_step"] = t.steps_done();
    std::string text = "Run report\n  steps " + std::to_string(ran) + " x batch " + std::to_string(B) + ", " +
                       std::to_string(cycles) + " cycles\n  measured samples/s   " + fixed(measured, 1) +
                       " (simulated, at " + fixed(c.hw.fabric.clock_mhz, 0) + " MHz)\n  estimated samples/s  " +
                       fixed(r.report["overall_samples_per_s"].get<double>(), 1) + " (compile report)\n  host time            " +
                       fixed(host, 1) + " s, " + fixed(samples / host, 1) + " samples/s, " +
                       fixed(rep["pe_cycles_per_host_second"].get<double>() / 1e6, 2) + " M PE-cycles/s\n" +
                       "  input backpressure   " + std::to_string(t.input_refused()) +
                       " host-cycles in which a channel refused the input worker\n";
    FabricTraffic traffic;
    traffic.add(traffic0, t.fabric().totals());
    report_fabric_traffic(traffic, cycles, rep, text);
    if (c.fabric_stats) write_run_fabric_stats(t.fabric(), fs::path(c.out) / "fabric", text);
    if (c.eval && test.count > 0 && !InterruptGuard::requested()) {
      const double acc = test_accuracy(g, r.compiled.plan, c, final_state, test);
      rep["test_accuracy_pct"] = acc;
      rep["test_samples"] = test.count;
      text += "  test accuracy        " + fixed(acc, 2) + " % of " + std::to_string(test.count) +
              " (host forward pass with the weights read back from the wafer)\n";
    }
    for (const auto& k : kern) {
      text += "  " + k["name"].get<std::string>() + ": busy " + fixed(k["busy_pct"].get<double>(), 1) + " %, MAC utilisation " +
              fixed(k["compute_utilisation_pct"].get<double>(), 1) + " %\n";
    }
    if (InterruptGuard::requested()) {
      text += "  interrupted          after step " + std::to_string(t.steps_done()) + " of " + std::to_string(last) +
              " (no test accuracy); --resume " + (fs::path(c.out) / "checkpoint.onnx").string() + " goes on from there\n";
    }
    finish_run_report(c, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), rep, text, out);
    return InterruptGuard::requested() ? InterruptGuard::exit_code() : kExitOk;
  } catch (const CompileError& e) {
    err << "wafersim train: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const ConfigError& e) {
    err << "wafersim train: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const tlm::DatasetError& e) {
    err << "wafersim train: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    err << "wafersim train: error: " << e.what() << "\n";
    return kExitRuntime;
  }
}

}  // namespace wafersim
