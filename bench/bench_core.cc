// Core speed benchmark: the GEMV kernel with every PE of a W x H rectangle busy, stepped as
// `wafersim run` steps it (plain fabric loop; SystemC adds one method call per cycle), timed over
// the simulation only. With --wafer, the same kernel on a 32 x 32 region of a full 757 x 996
// fabric, reporting host memory. Run by scripts/bench_core; prints one JSON line.
#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "firmware/kernels/kernels.h"
#include "firmware/program.h"
#include "hw/fabric.h"
#include "hw/pe_core.h"

using namespace wafersim;

namespace {

long peak_rss_kb() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

}  // namespace

int main(int argc, char** argv) {
  int pes = 64, tile = 64, threads = 1;
  uint32_t reps = 2;
  bool wafer = false;
  std::string fmt_name = "fp32";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << "bench_core: " << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--pes") pes = std::stoi(next());
    else if (a == "--tile") tile = std::stoi(next());
    else if (a == "--reps") reps = static_cast<uint32_t>(std::stoul(next()));
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--format") fmt_name = next();
    else if (a == "--wafer") wafer = true;
    else {
      std::cerr << "bench_core: unknown argument " << a
                << " (--pes N --tile T --reps R --threads N --format F --wafer)\n";
      return 2;
    }
  }
  HwConfig hw;
  if (wafer) pes = 32;
  hw.fabric.width = wafer ? 757 : pes;
  hw.fabric.height = wafer ? 996 : pes + 1;
  hw.sim.threads = threads;
  NumFormat fmt;
  if (!parse_format(fmt_name, &fmt)) {
    std::cerr << "bench_core: unknown format " << fmt_name << "\n";
    return 2;
  }
  const uint32_t n = static_cast<uint32_t>(pes * tile);
  std::mt19937 g(7);
  std::uniform_real_distribution<float> d(-1, 1);
  std::vector<float> a(size_t{n} * n), x(n);
  for (float& v : a) v = d(g);
  for (float& v : x) v = d(g);

  FabricProgram prog;
  kernels::GemvParams gp;
  gp.rect = {wafer ? 300 : 0, wafer ? 400 : 1, pes, pes};
  gp.m = gp.n = n;
  gp.fmt = fmt;
  gp.acc = NumFormat::kF32;
  gp.reps = reps;
  kernels::add_gemv(prog, gp, a, x, asm_target(hw));
  a.clear();
  a.shrink_to_fit();
  Fabric f(hw);
  const LoadedProgram lp = load_program(f, prog);
  prog.data.clear();
  prog.data.shrink_to_fit();
  const long rss_loaded = peak_rss_kb();

  const auto t0 = std::chrono::steady_clock::now();
  const RunResult r = run_to_completion(f, lp, 100000000);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t busy = 0, total = 0;
  for (size_t i = 0; i < lp.cores.size(); ++i) {
    if (prog.placements[i].y < gp.rect.y0) continue;  // feeders
    busy += lp.cores[i]->stats().busy;
    total += lp.cores[i]->stats().busy + lp.cores[i]->stats().stall + lp.cores[i]->stats().idle;
  }
  const double pe_cycles = static_cast<double>(r.cycles) * pes * pes;  // the tile rectangle only
  nlohmann::json j = {{"bench", wafer ? "gemv_32x32_on_757x996" : "gemv"},
                      {"pes", pes},
                      {"tile", tile},
                      {"format", fmt_name},
                      {"reps", reps},
                      {"threads", threads},
                      {"finished", r.finished},
                      {"cycles", r.cycles},
                      {"host_s", s},
                      {"pe_cycles_per_s", pe_cycles / s},
                      {"tile_busy_pct", total ? 100.0 * static_cast<double>(busy) / static_cast<double>(total) : 0.0},
                      {"peak_rss_kb_loaded", rss_loaded},
                      {"peak_rss_kb", peak_rss_kb()}};
  std::cout << j.dump() << "\n";
  return r.finished ? 0 : 1;
}
