// Fabric speed benchmark: simulated PE-cycles per host second under the neighbour-stream load,
// driven exactly as `wafersim fabric` drives it (one SC_METHOD on a clock). Run by
// scripts/bench_fabric; prints one JSON line.
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include <nlohmann/json.hpp>
#include <systemc>

#include "hw/traffic_gen.h"
#include "hw/wafer.h"

using namespace wafersim;

int sc_main(int argc, char** argv) {
  HwConfig hw;
  hw.fabric.width = 64;
  hw.fabric.height = 64;
  hw.sim.cycles = 2000;
  TrafficConfig tc;
  tc.pattern = "neighbour";
  std::string pattern_flows;
  bool routers_only = false;  // --engine routers: the routers' own visits (router.vector false)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "bench_fabric: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--width") hw.fabric.width = std::stoi(next());
    else if (a == "--height") hw.fabric.height = std::stoi(next());
    else if (a == "--cycles") hw.sim.cycles = std::stoull(next());
    else if (a == "--threads") hw.sim.threads = std::stoi(next());
    else if (a == "--hops") tc.hops = std::stoi(next());
    else if (a == "--depth") hw.router.buffer_depth = std::stoi(next());
    else if (a == "--pattern") tc.pattern = next();
    else if (a == "--flows") tc.flows = std::stoi(next());
    else if (a == "--engine") {
      const std::string e = next();
      if (e != "auto" && e != "routers") {
        std::cerr << "bench_fabric: --engine takes auto (as wafersim fabric) or routers\n";
        return 2;
      }
      routers_only = e == "routers";
    }
    else {
      std::cerr << "bench_fabric: unknown argument " << a << "\n";
      return 2;
    }
  }
  try {
    const auto e0 = std::chrono::steady_clock::now();
    Fabric f(hw);
    const TrafficPlan plan = program_traffic(f, tc);
    if (!routers_only) f.allow_vector();  // as `wafersim fabric` does
    f.finalize();
    sc_core::sc_clock clk("clk", sc_core::sc_time(1176, sc_core::SC_PS));
    Wafer wafer("wafer", f, hw.sim.cycles, nullptr);
    wafer.clk(clk);
    uint64_t active = 0;
    wafer.on_cycle([&](Fabric& fab) { active += fab.active_routers(); });
    const auto t0 = std::chrono::steady_clock::now();
    sc_core::sc_start();
    const auto t1 = std::chrono::steady_clock::now();
    if (!wafer.error().empty()) {
      std::cerr << "bench_fabric: " << wafer.error() << "\n";
      return 1;
    }
    const double s = std::chrono::duration<double>(t1 - t0).count();
    const FabricTotals t = f.totals();
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    nlohmann::json j = {{"impl", "wafersim"},
                        {"engine", f.vector_engine() ? "vector" : "routers"},
                        {"pattern", tc.pattern},
                        {"width", hw.fabric.width},
                        {"height", hw.fabric.height},
                        {"threads", hw.sim.threads},
                        {"cycles", t.cycles},
                        {"flows", plan.flows},
                        {"sim_seconds", s},
                        {"elab_seconds", std::chrono::duration<double>(t0 - e0).count()},
                        {"cycles_per_s", static_cast<double>(t.cycles) / s},
                        {"pe_cycles_per_s", static_cast<double>(t.cycles) * hw.fabric.width * hw.fabric.height / s},
                        {"active_pe_cycles_per_s", static_cast<double>(active) / s},
                        {"injected", t.injected},
                        {"delivered", t.delivered},
                        {"forwarded", t.forwarded},
                        {"peak_rss_kb", ru.ru_maxrss}};
    std::cout << j.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "bench_fabric: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

int main(int argc, char** argv) {
  setenv("SYSTEMC_DISABLE_COPYRIGHT_MESSAGE", "1", 0);
  return sc_core::sc_elab_and_sim(argc, argv);
}
