#include "compiler/compile.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <map>
#include <set>

#include "compiler/activation.h"
#include "compiler/ir/graph.h"
#include "compiler/autodiff.h"
#include "compiler/ops/op_class.h"
#include "compiler/passes/passes.h"

namespace wafersim::compiler {
namespace {

// Multiply-accumulates per sample of a layer: forward, weight gradient, and input gradient
// (every layer but the first).
std::string fmt(double v, int prec = 1) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", prec, v);
  return b;
}

}  // namespace

namespace {

// The GELUs and LayerNorms of graph `g` (after fuse_layernorm and fuse_gelu), for the kernel graph.
std::vector<FusedOp> fused_ops(const ir::Graph& g) {
  std::vector<FusedOp> out;
  for (const ir::Op& op : g.ops) {
    // An activation of several nodes (fuse_activations'); one of a single node is the kernel
    // graph's to match.
    const ActivationDef* ad = activation_by_kind(op.kind);
    const bool act = ad && op.sources.size() > 1;
    if ((op.kind != "Gelu" && op.kind != "LayerNorm" && !act) || op.inputs.empty() || op.outputs.empty() || op.inputs[0] < 0 ||
        op.outputs[0] < 0) {
      continue;
    }
    FusedOp fa;
    fa.kind = act ? "Activation" : op.kind;
    if (op.kind == "LayerNorm") {
      auto name = [&](size_t i) { return op.inputs.size() > i && op.inputs[i] >= 0 ? g.tensors[static_cast<size_t>(op.inputs[i])].name : ""; };
      fa.scale = name(1);
      fa.bias = name(2);
      if (const OnnxAttr* ax = op.attr("axis")) fa.axis = static_cast<int>(ax->i);
      if (const OnnxAttr* ep = op.attr("epsilon")) fa.eps = ep->f;
    }
    const OnnxAttr* ap = op.attr("approximate");
    fa.act = ap && ap->s == "tanh" ? Activation::kGeluTanh : Activation::kGelu;
    if (act) {
      fa.act = ad->act;
      std::string why;
      if (ad->params) fa.par = ad->params(ops::act_inputs(g, op), &why);
    }
    fa.nodes = op.sources;
    fa.input = g.tensors[static_cast<size_t>(op.inputs[0])].name;
    fa.output = g.tensors[static_cast<size_t>(op.outputs[0])].name;
    out.push_back(std::move(fa));
  }
  return out;
}

// The ONNX nodes fold_constants turned into constants (none of the folded graph's ops comes from
// them) and the integer values of their outputs, for the kernel graph.
FoldedValues folded_values(const OnnxModel& m, const ir::Graph& g) {
  FoldedValues f;
  std::set<std::string> kept;
  for (const ir::Op& op : g.ops) kept.insert(op.sources.begin(), op.sources.end());
  for (const OnnxNode& n : m.nodes) {
    if (!kept.count(n.name)) f.nodes.insert(n.name);
  }
  for (const ir::Tensor& t : g.tensors) {
    if (!t.data || t.data->i64.empty() || t.kind == ir::TensorKind::kParameter) continue;
    std::vector<int64_t> v = t.data->i64;
    bool ok = true;
    for (size_t i = 0; i < t.batch_multiple.size() && i < v.size(); ++i) {
      if (t.batch_multiple[i] == 0) continue;
      if (i == 0 && t.batch_multiple[i] == 1) {
        v[i] = 0;  // the batch: Reshape's 0 keeps the input's first dimension
      } else {
        ok = false;
      }
    }
    if (ok) f.ints[t.name] = std::move(v);
  }
  return f;
}

}  // namespace

KernelGraph validate_model(const OnnxModel& m, const CompileOptions& o) {
  // The graph IR (docs/graph-compiler.md, step 1): every model is imported into it and
  // checked, then rewritten by the passes (step 2), whose GELUs and LayerNorms the kernel graph
  // takes. Where the kernels refuse nodes, their message says more than an IR check that fails
  // on the same nodes (a Flatten that mixes samples gives the next Gemm a wrong shape, say), so
  // an IR error waits until the kernel graph is built and goes second.
  std::vector<FusedOp> fused_groups;
  FoldedValues folded;
  std::string ir_summary, ir_rewritten, ir_passes, ir_fused, ir_training;
  std::exception_ptr ir_error;
  try {
    const ir::Graph ir = ir::from_onnx(m);
    ir::verify(ir);
    ir_summary = ir.summary();
    // The rewrite passes (step 2): what the graph is after folding and fusion.
    std::vector<std::string> log;
    const ir::Graph rewritten = passes::run_passes(ir, &log, [&](const std::string& pass, const ir::Graph& g) {
      if (pass == "fuse_activations") fused_groups = fused_ops(g);  // before fuse_dense absorbs them
      if (pass == "fold_constants") folded = folded_values(m, g);
    });
    ir_rewritten = rewritten.summary();
    for (const std::string& l : log) ir_passes += (ir_passes.empty() ? "" : ", ") + l;
    // The patterns the passes recognised: each fused kind, how many, from how many nodes.
    std::map<std::string, std::pair<int, size_t>> fused;
    std::vector<std::string> order;
    for (const ir::Op& op : rewritten.ops) {
      if (op.kind != "Dense" && op.kind != "LayerNorm" && op.kind != "Gelu" && op.kind != "Conv2d") continue;
      if (!fused.count(op.kind)) order.push_back(op.kind);
      ++fused[op.kind].first;
      fused[op.kind].second += op.sources.size();
    }
    for (const FusedOp& fa : fused_groups) {  // activations of several nodes, before fuse_dense took them
      if (fa.kind != "Activation") continue;
      const std::string k = activation(fa.act).kind;
      if (!fused.count(k)) order.push_back(k);
      ++fused[k].first;
      fused[k].second += fa.nodes.size();
    }
    for (const std::string& k : order) {
      ir_fused += (ir_fused.empty() ? "" : ", ") + std::to_string(fused[k].first) + " " + k + " (from " +
                  std::to_string(fused[k].second) + " node" + (fused[k].second == 1 ? "" : "s") + ")";
    }
    // Autodiff (step 3): the training graph, or what it lacks (not an error: today's kernels
    // decide what trains).
    try {
      ir_training = autodiff(rewritten).g.summary();
    } catch (const CompileError& e) {
      const std::string what = e.what();
      const size_t at = what.find("autodiff: ");
      ir_training = at == std::string::npos ? what : what.substr(at);
    }
  } catch (const CompileError&) {
    fused_groups.clear();
    folded = {};
    ir_error = std::current_exception();
  }
  KernelGraph g = build_kernel_graph(m, o.loss, fused_groups, folded);
  if (ir_error) {
    require_supported(g);
    std::rethrow_exception(ir_error);
  }
  g.ir_summary = ir_summary;
  g.ir_rewritten = ir_rewritten;
  g.ir_passes = ir_passes;
  g.ir_fused = ir_fused;
  g.ir_training = ir_training;
  return g;
}

// A line per op type, in graph order: its reasons, each with its first few node names, so that a
// model with dozens of nodes of one op says so in one line.
std::string unsupported_message(const std::vector<Unsupported>& list) {
  constexpr size_t kNames = 3;
  std::vector<std::string> ops;
  std::map<std::string, std::vector<std::string>> reasons;                 // op -> reasons in order
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> nodes;  // (op, reason) -> node names
  for (const Unsupported& u : list) {
    if (!reasons.count(u.op)) ops.push_back(u.op);
    auto& r = reasons[u.op];
    if (std::find(r.begin(), r.end(), u.why) == r.end()) r.push_back(u.why);
    nodes[{u.op, u.why}].push_back(u.node);
  }
  std::string msg = std::to_string(list.size()) + " unsupported node" + (list.size() > 1 ? "s" : "") + " of " +
                    std::to_string(ops.size()) + " op type" + (ops.size() > 1 ? "s" : "") + ":";
  for (const std::string& op : ops) {
    size_t n = 0;
    for (const std::string& why : reasons[op]) n += nodes[{op, why}].size();
    msg += "\n  " + op + " (" + std::to_string(n) + " node" + (n > 1 ? "s" : "") + "): ";
    bool first = true;
    for (const std::string& why : reasons[op]) {
      const auto& names = nodes[{op, why}];
      msg += (first ? "" : "; ") + why + ": ";
      first = false;
      for (size_t i = 0; i < names.size() && i < kNames; ++i) msg += (i ? ", " : "") + std::string("node '") + names[i] + "'";
      if (names.size() > kNames) msg += " and " + std::to_string(names.size() - kNames) + " more";
    }
  }
  return msg;
}

void require_supported(const KernelGraph& g) {
  if (g.unsupported.empty()) return;
  throw CompileError(unsupported_message(g.unsupported));
}

nlohmann::json compile_report(const KernelGraph& g, const Plan& plan, const Routing& r, const HwConfig& hw) {
  const double f = hw.fabric.clock_mhz * 1e6;
  const double fabric_pes = static_cast<double>(hw.fabric.width) * hw.fabric.height;
  nlohmann::json k = nlohmann::json::array();
  double total_macs = 0;
  const int R = plan.replicas;  // rates and PEs below count every copy
  for (const LayerPlan& l : plan.layers) {
    const double t = l.est.compute() + l.est.update_per_batch / plan.batch;
    // Transmission into this kernel: layer 0 from the host channels; later layers over one
    // link per input line (one wavelet per cycle).
    double trans = 0;
    for (int a = 0; a < l.p_in; ++a) trans = std::max(trans, static_cast<double>(l.in_len(a)));
    if (l.index == 0) trans = plan.transmission;
    const double compute_sps = R * f / t, trans_sps = R * f / trans;
    const int tiles = l.p_in * l.p_out;
    total_macs += l.macs();
    const DenseKernel& d = g.layers[static_cast<size_t>(l.index)];
    k.push_back({{"name", d.name},
                 {"kernel", std::string(d.conv.on ? "conv" : "dense") + (d.act != Activation::kNone ? "+" + activation_text(d.act, d.act_par) : "") +
                                (d.pool.kind == PoolParams::kMax ? "+maxpool" : d.pool.kind == PoolParams::kAvg ? "+avgpool" : "") +
                                (l.index + 1 == static_cast<int>(plan.layers.size()) ? "+softmax_xent" : "")},
                 {"shape", d.conv.on ? std::to_string(d.conv.co) + "x" + std::to_string(d.conv.c) + "x" + std::to_string(d.conv.kh) + "x" +
                                           std::to_string(d.conv.kw)
                                     : std::to_string(l.out) + "x" + std::to_string(l.in)},
                 {"orientation", l.a_type ? "A (inputs along rows)" : "B (inputs along columns)"},
                 {"tiles", std::to_string(l.p_in) + "x" + std::to_string(l.p_out)},
                 {"origin", {l.x0, l.y0}},
                 {"pes", l.pes() * R},
                 {"tile_sram_bytes", l.tile_bytes},
                 {"cycles_per_sample", t},
                 {"tiles_cycles_per_sample", l.est.fwd + l.est.bwd + l.est.update_per_batch / plan.batch},
                 {"root_cycles_per_sample", l.est.root},
                 {"overall_samples_per_s", std::min(compute_sps, trans_sps)},
                 {"compute_samples_per_s", compute_sps},
                 {"transmission_samples_per_s", trans_sps},
                 // What sets this kernel's rate: its PEs' arithmetic, or the wavelets into it
                 // (the host's I/O channels for layer 0, the fabric's links for the others).
                 {"bound", compute_sps <= trans_sps ? "compute" : l.index == 0 ? "input channels" : "fabric"},
                 {"active_pes_pct", 100.0 * l.pes() * R / fabric_pes},
                 {"compute_utilisation_pct", 100.0 * l.macs() / (tiles * t * hw.core.fmac_fp32)}});
  }
  const double t = plan.cycles_per_sample();
  double compute_t = 0;
  for (const LayerPlan& l : plan.layers) compute_t = std::max(compute_t, l.est.compute() + l.est.update_per_batch / plan.batch);
  const double overall = f * plan.batch / plan.cycles_per_batch();
  nlohmann::json j;
  j["model"] = {{"layers", static_cast<int>(plan.layers.size())}, {"parameters", g.parameters()}, {"inputs", g.in_features},
                {"classes", g.classes()}};
  j["fabric"] = {{"width", hw.fabric.width}, {"height", hw.fabric.height}, {"clock_mhz", hw.fabric.clock_mhz},
                 {"used_width", plan.used_width}, {"used_height", plan.used_height}, {"colors_used", r.colors_used},
                 {"colors", hw.router.colors}};
  j["batch"] = plan.batch;
  j["ring_depth"] = plan.ring_depth;
  j["in_flight"] = plan.in_flight;
  j["lookahead_samples"] = plan.lookahead();
  j["overall_samples_per_s"] = overall;
  j["compute_samples_per_s"] = R * f / compute_t;
  j["transmission_samples_per_s"] = R * f / plan.transmission;
  j["replicas"] = R;
  if (R > 1) {
    j["replica_band_rows"] = plan.band;
    j["gradient_sum_cycles"] = plan.reduce;
  }
  j["active_pes_pct"] = 100.0 * plan.pes / fabric_pes;
  j["active_pes"] = plan.pes;
  {  // West I/O channels that carry the inputs and the labels (and take the loss back)
    std::vector<int> used;
    for (int c = 0; c < R; ++c) {
      for (int ch : plan.row_channel) used.push_back(plan.channel(ch, c));
      used.push_back(plan.channel(plan.loss_channel, c));
    }
    std::sort(used.begin(), used.end());
    j["channels_used"] = static_cast<int>(std::unique(used.begin(), used.end()) - used.begin());
    j["channels_per_edge"] = hw.io.channels(hw.fabric.height);
  }
  j["compute_utilisation_pct"] = 100.0 * total_macs / (plan.pes * (plan.cycles_per_batch() / plan.batch) * hw.core.fmac_fp32);
  j["cycles_per_sample"] = t;
  j["coupling_pct"] = 100.0 * plan.coupling();
  j["cycles_per_batch"] = plan.cycles_per_batch();
  j["batch_fill_drain_cycles"] = plan.latency;
  j["ring_trip_cycles"] = plan.ring_trip;
  j["kernels"] = k;
  j["notes"] = g.notes;
  return j;
}

std::string report_text(const nlohmann::json& j) {
  std::string s;
  s += "Compile report (estimates at " + fmt(j["fabric"]["clock_mhz"].get<double>(), 0) + " MHz, batch " +
       std::to_string(j["batch"].get<int>()) + ")\n";
  s += "  overall samples/s       " + fmt(j["overall_samples_per_s"].get<double>()) + "\n";
  s += "  compute samples/s       " + fmt(j["compute_samples_per_s"].get<double>()) + "\n";
  s += "  transmission samples/s  " + fmt(j["transmission_samples_per_s"].get<double>()) + "\n";
  s += "  active PEs              " + fmt(j["active_pes_pct"].get<double>(), 3) + " % (" +
       std::to_string(j["active_pes"].get<int>()) + " of " + std::to_string(j["fabric"]["width"].get<int>()) + " x " +
       std::to_string(j["fabric"]["height"].get<int>()) + ")\n";
  if (j.contains("channels_used")) {
    s += "  I/O channels used       " + std::to_string(j["channels_used"].get<int>()) + " West of " +
         std::to_string(j["channels_per_edge"].get<int>()) + " (inputs, labels, loss), 0 East\n";
  }
  s += "  compute utilisation     " + fmt(j["compute_utilisation_pct"].get<double>()) + " %\n";
  if (j.value("replicas", 1) > 1) {
    s += "  replicas                " + std::to_string(j["replicas"].get<int>()) + " copies in bands of " +
         std::to_string(j["replica_band_rows"].get<int>()) + " rows, gradients summed on the wafer (" +
         fmt(j["gradient_sum_cycles"].get<double>(), 0) + " cycles a minibatch)\n";
  }
  if (j.value("ring_depth", 4) < 4) {
    // placement.cc place_copy_ring: the least auto ring did not fit a convolution's planes.
    s += "  input ring              " + std::to_string(j["ring_depth"].get<int>()) +
         " samples a tile (below the automatic 4: a convolution's planes fit no more, or compile.ring_depth)\n";
  }
  if (j.value("in_flight", 1) > 1) {
    s += "  minibatches in flight   " + std::to_string(j["in_flight"].get<int>()) + " (the next minibatch's first " +
         std::to_string(j["lookahead_samples"].get<int>()) + " samples enter before the update, with layer 0's weights before it)\n";
  }
  s += "  colors used             " + std::to_string(j["fabric"]["colors_used"].get<int>()) + " of " +
       std::to_string(j["fabric"]["colors"].get<int>()) + "\n";
  s += "  kernel                         tiles   PEs   overall/s   compute/s   transm./s   util %  bound\n";
  for (const auto& k : j["kernels"]) {
    char line[256];
    std::snprintf(line, sizeof line, "  %-30s %-7s %4d %11.1f %11.1f %11.1f %8.1f  %s\n",
                  (k["name"].get<std::string>() + " " + k["kernel"].get<std::string>()).substr(0, 30).c_str(),
                  k["tiles"].get<std::string>().c_str(), k["pes"].get<int>(), k["overall_samples_per_s"].get<double>(),
                  k["compute_samples_per_s"].get<double>(), k["transmission_samples_per_s"].get<double>(),
                  k["compute_utilisation_pct"].get<double>(), k["bound"].get<std::string>().c_str());
    s += line;
  }
  s += std::string("  placement (tile (0,0) of each kernel; roots below A-type, east of B-type regions") +
       (j.value("replicas", 1) > 1 ? "; copy 0's, copy r " + std::to_string(j["replica_band_rows"].get<int>()) + " x r rows south" : "") +
       "):\n";
  for (const auto& k : j["kernels"]) {
    s += "    " + k["name"].get<std::string>() + ": " + k["tiles"].get<std::string>() + " tiles at (" +
         std::to_string(k["origin"][0].get<int>()) + ", " + std::to_string(k["origin"][1].get<int>()) + "), " +
         k["orientation"].get<std::string>() + "\n";
  }
  return s;
}

CompileResult compile_model(const std::string& onnx_path, const HwConfig& hw, const CompileOptions& o,
                            const ModelState* state) {
  CompileResult res;
  res.model = import_onnx(onnx_path);
  res.graph = validate_model(res.model, o);
  require_supported(res.graph);
  const Plan plan = place_layers(res.graph, hw, o.place);
  const Routing routing = route_plan(plan, hw);
  const ModelState init = state ? *state : ModelState::from_graph(res.graph);
  res.compiled = generate(res.graph, plan, routing, init, o.hyper, asm_target(hw));
  res.report = compile_report(res.graph, plan, routing, hw);
  res.report_text = report_text(res.report);
  return res;
}

}  // namespace wafersim::compiler
