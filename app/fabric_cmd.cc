#include "app/fabric_cmd.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iomanip>
#include <sstream>

#include <sys/resource.h>

#include "app/interrupt.h"
#include "app/options.h"
#include "hw/atomic_file.h"
#include "hw/fabric_stats.h"
#include "hw/wafer.h"

namespace wafersim {
namespace {

std::string summary_text(const FabricRunConfig& c, const Fabric& f, const TrafficPlan& plan, double host_s,
                         uint64_t active_pe_cycles) {
  const FabricTotals t = f.totals();
  const auto& hw = c.hw;
  std::ostringstream os;
  os << std::fixed << std::setprecision(3);
  os << "fabric   " << f.width() << " x " << f.height() << " PEs, " << hw.router.colors << " colors, buffer "
     << hw.router.buffer_depth << ", hop " << hw.router.hop_latency << " / ramp " << hw.router.ramp_latency
     << " cycles, " << f.channels_per_edge() << " I/O channels per edge, " << hw.sim.threads << " thread(s)\n";
  os << "traffic  " << plan.pattern << ": " << plan.flows << " flows";
  if (plan.skipped) os << " (" << plan.skipped << " found no free color and were dropped)";
  os << ", " << plan.colors_used << " colors, rate " << c.traffic.rate << "\n";
  const double sim_us = static_cast<double>(t.cycles) / hw.fabric.clock_mhz;
  os << "ran      " << t.cycles << " cycles (" << sim_us << " us at " << hw.fabric.clock_mhz << " MHz) in "
     << host_s << " s host, " << f.routers().size() << " routers instantiated, "
     << std::setprecision(1) << static_cast<double>(active_pe_cycles) / std::max(1.0, static_cast<double>(t.cycles))
     << " active per cycle\n";
  os << std::setprecision(3);
  os << "speed    " << static_cast<double>(t.cycles) * f.width() * f.height() / std::max(host_s, 1e-9) / 1e6
     << " M PE-cycles/s (whole fabric), " << static_cast<double>(active_pe_cycles) / std::max(host_s, 1e-9) / 1e6
     << " M active PE-cycles/s, peak memory " << peak_rss_mb() << " MB\n";
  os << "wavelets injected " << t.injected << ", delivered " << t.delivered << ", in flight " << t.in_flight
     << ", multicast copies " << t.multicast_copies << ", router sends (links, ramps, channels) "
     << t.forwarded << "\n";
  return os.str();
}

}  // namespace

long peak_rss_mb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024;
}

sc_core::sc_time clock_period(double mhz) {
  const auto period_ps = static_cast<uint64_t>(std::llround(1e6 / mhz));
  return sc_core::sc_time(static_cast<double>(period_ps), sc_core::SC_PS);
}

sc_core::sc_trace_file* open_vcd(const std::string& path) {
  if (path.empty()) return nullptr;
  sc_core::sc_trace_file* tf = sc_core::sc_create_vcd_trace_file(vcd_base(path).c_str());
  tf->set_time_unit(1, sc_core::SC_PS);
  return tf;
}

bool write_interval_stats(const Fabric& f, const std::string& dir, std::string* error) {
  try {
    write_fabric_stats(f, dir);
    return true;
  } catch (const std::exception& e) {
    *error = e.what();
    sc_core::sc_stop();
    return false;
  }
}

int run_fabric_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  FabricRunConfig cfg;
  std::unique_ptr<Fabric> fabric;
  TrafficPlan plan;
  Region trace_region;
  try {
    if (!parse_fabric_options(args, &cfg, out)) return kExitOk;
    fabric = std::make_unique<Fabric>(cfg.hw);
    plan = program_traffic(*fabric, cfg.traffic);
    if (cfg.trace.vcd.empty()) fabric->allow_vector();  // the stats read the routers between cycles
    fabric->finalize();
    if (!cfg.trace.region.empty()) {
      trace_region = parse_region(cfg.trace.region, cfg.hw.fabric.width, cfg.hw.fabric.height, "trace.region");
    }
    std::filesystem::create_directories(cfg.stats.out);
    write_file_atomic(cfg.stats.out + "/config.ini", cfg.resolved_ini);
  } catch (const ConfigError& e) {
    err << "wafersim fabric: error: " << e.what() << "\n(see wafersim fabric --help)\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    err << "wafersim fabric: error: " << e.what() << "\n";
    return kExitRuntime;
  }

  Fabric& f = *fabric;
  sc_core::sc_clock clk("clk", clock_period(cfg.hw.fabric.clock_mhz));
  Wafer wafer("wafer", f, cfg.hw.sim.cycles, cfg.trace.vcd.empty() ? nullptr : &trace_region);
  wafer.clk(clk);
  sc_core::sc_trace_file* tf = open_vcd(cfg.trace.vcd);
  if (tf) wafer.trace(tf);
  uint64_t active_pe_cycles = 0;
  const StatsOptions st = cfg.stats;
  InterruptGuard interrupt;  // SIGINT/SIGTERM: stop after this cycle, write the stats so far
  std::string write_error;   // an interval's stats that could not be written stop the run
  wafer.on_cycle([&](Fabric& fab) {
    active_pe_cycles += fab.active_routers();
    if (st.warmup && fab.cycle() == st.warmup) fab.reset_stats();
    if (st.interval && fab.cycle() % st.interval == 0) write_interval_stats(fab, st.out, &write_error);
    if (InterruptGuard::requested()) sc_core::sc_stop();
  });

  const auto t0 = std::chrono::steady_clock::now();
  if (cfg.hw.sim.cycles > 0) sc_core::sc_start();
  const double host_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (tf) sc_core::sc_close_vcd_trace_file(tf);

  const std::string summary = summary_text(cfg, f, plan, host_s, active_pe_cycles);
  int rc = kExitOk;
  out << summary;
  try {
    if (!write_error.empty()) throw std::runtime_error(write_error);
    write_fabric_stats(f, cfg.stats.out);
    write_file_atomic(cfg.stats.out + "/summary.txt", summary);
    out << "wrote    " << cfg.stats.out << "/{stats.json,pe_*.csv,config.ini,summary.txt}";
    if (tf) out << ", " << cfg.trace.vcd;
    out << "\n";
  } catch (const std::exception& e) {
    err << "wafersim fabric: error: " << e.what() << "\n";
    rc = kExitRuntime;
  }
  if (!wafer.error().empty()) {
    err << "wafersim fabric: error: " << wafer.error() << "\n";
    return wafer.deadlocked() ? kExitDeadlock : kExitRuntime;
  }
  if (InterruptGuard::requested()) {
    err << "wafersim fabric: interrupted at cycle " << f.cycle() << " of " << cfg.hw.sim.cycles << "; the stats cover those cycles\n";
    return rc == kExitOk ? InterruptGuard::exit_code() : rc;
  }
  return rc;
}

}  // namespace wafersim
