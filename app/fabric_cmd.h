// `wafersim fabric`: the router fabric under synthetic traffic, with stats and traces.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include <systemc>

namespace wafersim {

// Exit codes shared by all subcommands.
constexpr int kExitOk = 0, kExitRuntime = 1, kExitUsage = 2, kExitDeadlock = 3;

// The clock of `mhz` (period rounded to a picosecond), and the VCD file for --trace.vcd
// (SystemC adds ".vcd"; time unit 1 ps; nullptr when `path` is empty). Shared by the commands.
sc_core::sc_time clock_period(double mhz);
long peak_rss_mb();  // peak resident memory of this process so far
sc_core::sc_trace_file* open_vcd(const std::string& path);
class Fabric;
// --stats.interval, inside a run's cycle loop: writes the fabric's stats to `dir`; a write that
// fails stops the simulation (sc_stop) and leaves its message in *error for the run to report.
bool write_interval_stats(const Fabric& f, const std::string& dir, std::string* error);

int run_fabric_command(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace wafersim
