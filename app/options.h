// Command-line and INI options of `wafersim fabric`, one options_description per subsystem.
#pragma once

#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "hw/config.h"
#include "hw/traffic_gen.h"

namespace wafersim {

struct StatsOptions {
  std::string out = "wafersim-out";  // results directory
  uint64_t warmup = 0;                // cycles before counters restart
  uint64_t interval = 0;              // rewrite stats every N cycles during the run (0 = only at the end)
};

struct TraceOptions {
  std::string vcd;     // VCD file ("" = no trace)
  std::string region;  // x0:x1,y0:y1
};

// Everything one `wafersim fabric` run uses, resolved from defaults, the INI file and the
// command line (command line wins).
struct FabricRunConfig {
  HwConfig hw;
  TrafficConfig traffic;
  StatsOptions stats;
  TraceOptions trace;
  std::string config_file;
  std::string resolved_ini;  // every option with its final value, INI syntax
};

// Parses; returns false after printing help to `out`. Throws ConfigError with a user-facing
// message for unknown options, bad values, malformed INI files and values out of range.
bool parse_fabric_options(const std::vector<std::string>& args, FabricRunConfig* cfg, std::ostream& out);

}  // namespace wafersim
