#include "app/run_cmd.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <memory>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "app/fabric_cmd.h"
#include "app/interrupt.h"
#include "app/options.h"
#include "firmware/kernels/kernels.h"
#include "firmware/program.h"
#include "hw/atomic_file.h"
#include "hw/fabric_stats.h"
#include "hw/pe_core.h"
#include "hw/wafer.h"

namespace wafersim {
namespace {

NumFormat format_option(const std::string& key, const std::string& v) {
  NumFormat f;
  if (!parse_format(v, &f)) throw ConfigError(key + " '" + v + "' is unknown (fp32, fp16, cb16 or bf16)");
  return f;
}

struct CoreRow {
  int x, y;
  std::string image;
  CoreStats s;
};

std::string pct(uint64_t part, uint64_t all) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << (all ? 100.0 * static_cast<double>(part) / static_cast<double>(all) : 0.0);
  return os.str();
}

// Per-PE table (all PEs up to 16, else the totals and the busiest and idlest few).
void core_table(std::ostream& os, const std::vector<CoreRow>& rows) {
  auto line = [&](const std::string& who, const CoreStats& s) {
    const uint64_t all = s.busy + s.stall + s.idle;
    os << "  " << std::left << std::setw(16) << who << std::right << std::setw(8) << pct(s.busy, all) << std::setw(8)
       << pct(s.stall, all) << std::setw(8) << pct(s.idle, all) << std::setw(12) << s.instructions << std::setw(12)
       << s.vector_elems << "\n";
  };
  os << "  " << std::left << std::setw(16) << "PE" << std::right << std::setw(8) << "busy%" << std::setw(8) << "stall%"
     << std::setw(8) << "idle%" << std::setw(12) << "instrs" << std::setw(12) << "vec elems" << "\n";
  auto name = [](const CoreRow& r) { return "pe_" + std::to_string(r.x) + "_" + std::to_string(r.y); };
  if (rows.size() <= 16) {
    for (const CoreRow& r : rows) line(name(r), r.s);
    return;
  }
  CoreStats tot;
  for (const CoreRow& r : rows) {
    tot.busy += r.s.busy;
    tot.stall += r.s.stall;
    tot.idle += r.s.idle;
    tot.instructions += r.s.instructions;
    tot.vector_elems += r.s.vector_elems;
  }
  line("all " + std::to_string(rows.size()), tot);
  std::vector<const CoreRow*> by(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) by[i] = &rows[i];
  std::stable_sort(by.begin(), by.end(), [](const CoreRow* a, const CoreRow* b) { return a->s.busy > b->s.busy; });
  for (size_t i = 0; i < 3; ++i) line(name(*by[i]) + " (busiest)", by[i]->s);
  for (size_t i = by.size() - 3; i < by.size(); ++i) line(name(*by[i]) + " (idlest)", by[i]->s);
}

}  // namespace

int run_program_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  RunConfig cfg;
  std::unique_ptr<Fabric> fabric;
  FabricProgram prog;
  LoadedProgram loaded;
  Region trace_region;
  try {
    if (!parse_run_options(args, &cfg, out)) return kExitOk;
    prog = load_program_file(cfg.program, asm_target(cfg.hw));
    if (!cfg.width_given) cfg.hw.fabric.width = std::max(1, prog.min_width);
    if (!cfg.height_given) cfg.hw.fabric.height = std::max(1, prog.min_height);
    cfg.hw.validate();
    trace_region = run_trace_region(cfg);
    fabric = std::make_unique<Fabric>(cfg.hw);
    loaded = load_program(*fabric, prog);
    std::filesystem::create_directories(cfg.stats.out);
    write_file_atomic(cfg.stats.out + "/config.ini", cfg.resolved_ini(cfg.hw));
  } catch (const std::exception& e) {
    const bool usage = dynamic_cast<const ConfigError*>(&e) || dynamic_cast<const AsmError*>(&e);
    err << "wafersim run: error: " << e.what() << "\n";
    return usage ? kExitUsage : kExitRuntime;
  }

  Fabric& f = *fabric;
  sc_core::sc_clock clk("clk", clock_period(cfg.hw.fabric.clock_mhz));
  Wafer wafer("wafer", f, cfg.hw.sim.cycles, cfg.trace.vcd.empty() ? nullptr : &trace_region);
  wafer.clk(clk);
  sc_core::sc_trace_file* tf = open_vcd(cfg.trace.vcd);
  if (tf) wafer.trace(tf);
  size_t first_running = 0;
  bool finished = program_done(f, loaded, &first_running);
  const StatsOptions st = cfg.stats;
  InterruptGuard interrupt;  // SIGINT/SIGTERM: stop after this cycle, report and write what there is
  std::string write_error;  // an interval's stats that could not be written stop the run
  wafer.on_cycle([&](Fabric& fab) {
    if (st.warmup && fab.cycle() == st.warmup) fab.reset_stats();
    if (st.interval && fab.cycle() % st.interval == 0 && !write_interval_stats(fab, st.out, &write_error)) return;
    if (program_done(fab, loaded, &first_running)) {
      finished = true;
      sc_core::sc_stop();
    } else if (InterruptGuard::requested()) {
      sc_core::sc_stop();
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  if (!finished && cfg.hw.sim.cycles > 0) sc_core::sc_start();
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tf) sc_core::sc_close_vcd_trace_file(tf);

  // Report.
  f.settle_agents();
  std::vector<CoreRow> rows;
  for (size_t i = 0; i < loaded.cores.size(); ++i) {
    const Placement& pl = prog.placements[i];
    rows.push_back({pl.x, pl.y, prog.images[static_cast<size_t>(pl.image)].name, loaded.cores[i]->stats()});
  }
  const uint64_t cycles = f.cycle();
  const uint64_t pe_cycles = cycles * static_cast<uint64_t>(f.width()) * static_cast<uint64_t>(f.height());
  std::ostringstream sum;
  sum << std::fixed << std::setprecision(3);
  sum << "program  " << prog.name << ": " << prog.images.size() << " images on " << loaded.cores.size() << " PEs, "
      << prog.routes.size() << " routes\n";
  sum << "fabric   " << f.width() << " x " << f.height() << " PEs, " << cfg.hw.router.colors << " colors, "
      << cfg.hw.sim.threads << " thread(s)\n";
  sum << "cycles   " << cycles << (finished ? "" : " (NOT finished)") << " = "
      << static_cast<double>(cycles) / cfg.hw.fabric.clock_mhz << " us at " << cfg.hw.fabric.clock_mhz << " MHz\n";
  sum << "host     " << host_s << " s, " << static_cast<double>(pe_cycles) / std::max(host_s, 1e-9) / 1e6
      << " M PE-cycles/s (fabric), "
      << static_cast<double>(cycles * loaded.cores.size()) / std::max(host_s, 1e-9) / 1e6
      << " M core-cycles/s, peak memory " << peak_rss_mb() << " MB\n";
  sum << "cores\n";
  core_table(sum, rows);

  std::vector<OutputValues> outs;
  nlohmann::json oj = nlohmann::json::object();
  try {
    outs = read_outputs(f, prog);
  } catch (const std::exception& e) {
    err << "wafersim run: error: " << e.what() << "\n";
    return kExitUsage;
  }
  if (!outs.empty()) sum << "outputs\n";
  size_t listed = 0;
  for (const OutputValues& o : outs) {
    oj[o.name] = o.values;
    if (++listed > 16) continue;  // the rest only in outputs.json
    sum << "  " << o.name << " [" << o.values.size() << "]:";
    sum << std::setprecision(6) << std::defaultfloat;
    for (size_t i = 0; i < o.values.size() && i < static_cast<size_t>(cfg.show); ++i) sum << " " << o.values[i];
    if (o.values.size() > static_cast<size_t>(cfg.show)) sum << " ...";
    sum << "\n";
  }
  if (listed > 16) sum << "  ... " << listed - 16 << " more outputs (all in outputs.json)\n";

  if (st.warmup && cycles < st.warmup) {
    sum << "note     the run ended at cycle " << cycles << ", before stats.warmup " << st.warmup
        << ": the counters cover every cycle\n";
  }
  int rc = kExitOk;
  out << sum.str();
  try {
    if (!write_error.empty()) throw std::runtime_error(write_error);
    write_fabric_stats(f, cfg.stats.out);
    std::ostringstream csv;
    csv << "x,y,image,busy,stall,idle,instructions,vector_elems,tasks_started,filtered\n";
    for (const CoreRow& r : rows) {
      csv << r.x << "," << r.y << "," << r.image << "," << r.s.busy << "," << r.s.stall << "," << r.s.idle << ","
          << r.s.instructions << "," << r.s.vector_elems << "," << r.s.tasks_started << "," << r.s.filtered << "\n";
    }
    write_file_atomic(cfg.stats.out + "/cores.csv", csv.str());
    write_file_atomic(cfg.stats.out + "/outputs.json", oj.dump(1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    write_file_atomic(cfg.stats.out + "/summary.txt", sum.str());
    out << "wrote    " << cfg.stats.out << "/{summary.txt,cores.csv,outputs.json,stats.json,pe_*.csv,config.ini}";
    if (tf) out << ", " << cfg.trace.vcd;
    out << "\n";
  } catch (const std::exception& e) {
    err << "wafersim run: error: " << e.what() << "\n";
    rc = kExitRuntime;
  }
  if (!wafer.error().empty()) {
    err << "wafersim run: error: " << wafer.error() << "\n";
    return wafer.deadlocked() ? kExitDeadlock : kExitRuntime;
  }
  if (!finished && InterruptGuard::requested()) {
    err << "wafersim run: interrupted at cycle " << cycles << "; the report and stats cover those cycles\n";
    return rc == kExitOk ? InterruptGuard::exit_code() : rc;
  }
  if (!finished) {
    err << "wafersim run: error: the program did not finish within " << cfg.hw.sim.cycles
        << " cycles (sim.cycles); cores still running or wavelets in flight\n";
    return kExitRuntime;
  }
  return rc;
}

int kernel_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  KernelGenConfig c;
  try {
    if (!parse_kernel_options(args, &c, out)) return kExitOk;
    const AsmTarget t = asm_target(c.hw);
    const NumFormat fmt = format_option("kernel.format", c.format);
    std::mt19937 rng(static_cast<uint32_t>(c.hw.sim.seed));
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
    std::uniform_int_distribution<int> ints(-100, 100);
    auto vec = [&](size_t n, bool integers = false) {
      std::vector<float> v(n);
      for (float& x : v) x = integers ? static_cast<float>(ints(rng)) : uni(rng);
      return v;
    };
    auto per_pe = [&](size_t pes, size_t n, bool integers = false) {
      std::vector<std::vector<float>> v;
      for (size_t i = 0; i < pes; ++i) v.push_back(vec(n, integers));
      return v;
    };
    const size_t pes = static_cast<size_t>(c.w) * static_cast<size_t>(c.h);
    FabricProgram prog;
    prog.name = c.kernel;
    if (c.kernel == "gemv") {
      kernels::GemvParams g;
      g.rect = {0, 1, c.w, c.h};
      g.m = c.m;
      g.n = c.n;
      g.fmt = fmt;
      g.acc = format_option("kernel.acc", c.acc);
      g.algo = kernels::parse_reduce_algo(c.algo);
      g.reps = c.reps;
      const auto a = vec(size_t{c.m} * c.n), x = vec(c.n);
      kernels::add_gemv(prog, g, a, x, t);
    } else if (c.kernel == "allreduce" || c.kernel == "reduce") {
      kernels::ReduceParams p;
      p.rect = {0, 0, c.w, c.h};
      p.len = c.len;
      p.fmt = fmt;
      p.algo = kernels::parse_reduce_algo(c.algo);
      p.all = c.kernel == "allreduce";
      kernels::add_reduce(prog, p, per_pe(pes, c.len, true), t);
    } else if (c.kernel == "broadcast") {
      kernels::BroadcastParams p;
      p.rect = {0, 0, c.w, c.h};
      p.columns = c.columns;
      p.len = c.len;
      p.fmt = fmt;
      kernels::add_broadcast(prog, p, per_pe(static_cast<size_t>(c.columns ? c.w : c.h), c.len), t);
    } else if (c.kernel == "elementwise") {
      kernels::ElementwiseParams p;
      p.rect = {0, 0, c.w, c.h};
      p.op = c.op;
      p.len = c.len;
      p.fmt = fmt;
      kernels::add_elementwise(prog, p, per_pe(pes, c.len), per_pe(pes, c.len), t);
    } else if (c.kernel == "meshgemv") {
      kernels::MeshGemvParams g;
      g.rect = {0, 0, c.w, c.h};
      g.m = c.m;
      g.n = c.n;
      g.fmt = fmt;
      const auto w = vec(size_t{c.m} * c.n), x = vec(c.m);
      kernels::add_meshgemv(prog, g, w, x, t);
    } else if (c.kernel == "stream") {
      kernels::StreamParams p;
      p.rect = {0, 0, c.w, c.h};
      p.op = c.op;
      p.len = c.len;
      p.fmt = fmt;
      p.warmup = c.warmup;
      const bool two = kernels::stream_sources(c.op) == 2;
      kernels::add_stream(prog, p, per_pe(pes, c.len), two ? per_pe(pes, c.len) : std::vector<std::vector<float>>{}, t);
    } else if (c.kernel == "stencil") {
      kernels::StencilParams p;
      p.rect = {0, 0, c.w, c.h};
      p.nz = c.nz;
      p.block = c.block;
      p.steps = c.steps;
      p.warmup = c.warmup;
      kernels::add_stencil(prog, p, per_pe(pes, c.nz), per_pe(pes, c.nz), t);
    } else if (c.kernel == "fft") {
      kernels::FftParams p;
      p.n = static_cast<uint32_t>(c.w);
      kernels::add_fft3d(prog, p, per_pe(pes, 2 * p.n), t);
    } else if (c.kernel == "pingpong") {
      kernels::PingPongParams p;
      p.distance = c.distance;
      p.len = c.len;
      p.rounds = c.rounds;
      kernels::add_pingpong(prog, p, vec(c.len), t);
    } else {
      throw ConfigError("kernel '" + c.kernel + "' is unknown (gemv, meshgemv, allreduce, reduce, broadcast, elementwise, stream, stencil, fft, pingpong)");
    }
    save_program(prog, c.out);
    out << "wrote " << c.out << "/program.json: " << prog.name << ", " << prog.images.size() << " images on "
        << prog.placements.size() << " PEs, needs a " << prog.min_width << " x " << prog.min_height
        << " fabric (run: wafersim run " << c.out << ")\n";
  } catch (const ConfigError& e) {
    err << "wafersim kernel: error: " << e.what() << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    err << "wafersim kernel: error: " << e.what() << "\n";
    return kExitRuntime;
  }
  return kExitOk;
}

}  // namespace wafersim
