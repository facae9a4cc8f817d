#include "hw/fabric_stats.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "hw/atomic_file.h"

namespace wafersim {
namespace {

using nlohmann::json;

template <typename F>
std::string pe_matrix_csv(const Fabric& f, F value) {
  std::vector<uint64_t> m(static_cast<size_t>(f.width()) * f.height(), 0);
  for (const Router* r : f.routers()) m[static_cast<size_t>(r->y()) * f.width() + r->x()] = value(*r);
  std::ostringstream os;
  for (int y = 0; y < f.height(); ++y) {
    for (int x = 0; x < f.width(); ++x) {
      if (x) os << ',';
      os << m[static_cast<size_t>(y) * f.width() + x];
    }
    os << '\n';
  }
  return os.str();
}

uint64_t sum_ports(const uint64_t (&a)[kNumPorts]) {
  uint64_t s = 0;
  for (uint64_t v : a) s += v;
  return s;
}

// Stall cycles of every port, the cycles a router has slept through included.
uint64_t stall_of(const Router& r, uint64_t cycles) {
  uint64_t n = 0;
  for (int p = 0; p < kNumPorts; ++p) n += r.stall_cycles(p, cycles);
  return n;
}

}  // namespace

json fabric_stats_json(const Fabric& f) {
  const HwConfig& cfg = f.config();
  const FabricTotals t = f.totals();
  json j;
  j["cycles"] = t.cycles;
  j["counters_since_cycle"] = f.stats_from_cycle();  // ports, colors, per-PE; totals count from 0
  j["simulated_seconds"] = static_cast<double>(t.cycles) / (cfg.fabric.clock_mhz * 1e6);
  j["fabric"] = {{"width", f.width()}, {"height", f.height()}, {"colors", cfg.router.colors},
                 {"routers_instantiated", f.routers().size()}};
  j["totals"] = {{"injected", t.injected},   {"delivered", t.delivered},
                 {"in_flight", t.in_flight}, {"multicast_copies", t.multicast_copies},
                 {"forwarded", t.forwarded}};
  uint64_t port_fwd[kNumPorts] = {}, port_stall[kNumPorts] = {};
  const std::vector<ColorCounters> colors = f.color_counters();
  std::vector<const Router*> rs = f.routers();
  for (const Router* r : rs) {
    for (int p = 0; p < kNumPorts; ++p) {
      port_fwd[p] += r->s_forwarded[p];
      port_stall[p] += r->stall_cycles(p, f.cycle());
    }
  }
  json ports = json::object();
  for (int p = 0; p < kNumPorts; ++p) {
    ports[port_name(p)] = {{"forwarded", port_fwd[p]}, {"stall_cycles", port_stall[p]}};
  }
  j["ports"] = ports;
  json cj = json::array();
  for (size_t c = 0; c < colors.size(); ++c) {
    if (!colors[c].forwarded && !colors[c].stall && !colors[c].peak) continue;
    cj.push_back({{"color", c},
                  {"forwarded", colors[c].forwarded},
                  {"stall_cycles", colors[c].stall},
                  {"peak_occupancy", colors[c].peak}});
  }
  j["colors"] = cj;
  // The PEs whose output links stalled most: where the fabric congests.
  std::sort(rs.begin(), rs.end(), [&f](const Router* a, const Router* b) {
    const uint64_t sa = stall_of(*a, f.cycle()), sb = stall_of(*b, f.cycle());
    return sa != sb ? sa > sb : a->id() < b->id();
  });
  json top = json::array();
  for (size_t i = 0; i < rs.size() && i < 10; ++i) {
    const Router& r = *rs[i];
    if (!stall_of(r, f.cycle())) break;
    top.push_back({{"pe", Fabric::pe_name(r.x(), r.y())},
                   {"stall_cycles", stall_of(r, f.cycle())},
                   {"forwarded", sum_ports(r.s_forwarded)},
                   {"peak_occupancy", r.s_peak_occupancy}});
  }
  j["most_stalled_pes"] = top;
  return j;
}

void write_fabric_stats(const Fabric& f, const std::string& dir) {
  write_file_atomic(dir + "/stats.json", fabric_stats_json(f).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  write_file_atomic(dir + "/pe_forwarded.csv", pe_matrix_csv(f, [](const Router& r) { return sum_ports(r.s_forwarded); }));
  write_file_atomic(dir + "/pe_stall.csv", pe_matrix_csv(f, [&f](const Router& r) { return stall_of(r, f.cycle()); }));
  write_file_atomic(dir + "/pe_peak_occupancy.csv",
                    pe_matrix_csv(f, [](const Router& r) { return uint64_t{r.s_peak_occupancy}; }));
  for (int p = 0; p < kNumPorts; ++p) {
    write_file_atomic(dir + "/pe_forwarded_" + port_name(p) + ".csv",
                      pe_matrix_csv(f, [p](const Router& r) { return r.s_forwarded[p]; }));
  }
}

}  // namespace wafersim
