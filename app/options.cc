#include "app/options.h"

#include <fstream>
#include <map>
#include <sstream>

namespace wafersim {
namespace po = boost::program_options;
namespace {

std::string format_value(const boost::any& v) {
  std::ostringstream os;
  if (auto p = boost::any_cast<int>(&v)) os << *p;
  else if (auto p = boost::any_cast<uint64_t>(&v)) os << *p;
  else if (auto p = boost::any_cast<double>(&v)) os << *p;
  else if (auto p = boost::any_cast<bool>(&v)) os << (*p ? "true" : "false");
  else if (auto p = boost::any_cast<std::string>(&v)) os << *p;
  return os.str();
}

// INI text of every option of `desc` with its resolved value, one section per key prefix.
std::string resolved_ini(const po::options_description& desc, const po::variables_map& vm) {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> sections;
  for (const auto& opt : desc.options()) {
    const std::string& key = opt->long_name();
    const auto dot = key.find('.');
    if (dot == std::string::npos || !vm.count(key)) continue;
    sections[key.substr(0, dot)].emplace_back(key.substr(dot + 1), format_value(vm[key].value()));
  }
  std::ostringstream os;
  os << "# wafersim fabric: fully resolved configuration of this run\n";
  for (const auto& [section, kv] : sections) {
    os << "\n[" << section << "]\n";
    for (const auto& [k, v] : kv) os << k << " = " << v << "\n";
  }
  return os.str();
}

}  // namespace

bool parse_fabric_options(const std::vector<std::string>& args, FabricRunConfig* cfg, std::ostream& out) {
  FabricRunConfig& c = *cfg;
  std::string visit_order = visit_order_name(c.hw.sim.visit_order);

  po::options_description general("General");
  general.add_options()
      ("help,h", "print this help and exit")
      ("config", po::value(&c.config_file), "INI file of options (the command line overrides it)");

  po::options_description fabric("Fabric [fabric]");
  fabric.add_options()
      ("fabric.width", po::value(&c.hw.fabric.width)->default_value(c.hw.fabric.width), "PEs west to east (WSE-2: 757)")
      ("fabric.height", po::value(&c.hw.fabric.height)->default_value(c.hw.fabric.height), "PEs north to south (WSE-2: 996)")
      ("fabric.clock_mhz", po::value(&c.hw.fabric.clock_mhz)->default_value(c.hw.fabric.clock_mhz), "clock, converts cycles to time");

  po::options_description router("Router [router]");
  router.add_options()
      ("router.colors", po::value(&c.hw.router.colors)->default_value(c.hw.router.colors), "routable colors (at most 32)")
      ("router.buffer_depth", po::value(&c.hw.router.buffer_depth)->default_value(c.hw.router.buffer_depth), "wavelets per (input port, color) buffer")
      ("router.hop_latency", po::value(&c.hw.router.hop_latency)->default_value(c.hw.router.hop_latency), "cycles per hop")
      ("router.ramp_latency", po::value(&c.hw.router.ramp_latency)->default_value(c.hw.router.ramp_latency), "cycles between core and router, each way");

  po::options_description io("Edge I/O [io]");
  io.add_options()
      ("io.channels_per_edge", po::value(&c.hw.io.channels_per_edge)->default_value(c.hw.io.channels_per_edge), "channels on each of the E and W edges (at most; fewer if the edge is short)")
      ("io.spacing", po::value(&c.hw.io.spacing)->default_value(c.hw.io.spacing), "rows between channels")
      ("io.queue_depth", po::value(&c.hw.io.queue_depth)->default_value(c.hw.io.queue_depth), "host-side buffer per channel and direction")
      ("io.channel_gbps", po::value(&c.hw.io.channel_gbps)->default_value(c.hw.io.channel_gbps), "bandwidth per channel and direction");

  po::options_description sim("Simulation [sim]");
  sim.add_options()
      ("sim.cycles", po::value(&c.hw.sim.cycles)->default_value(c.hw.sim.cycles), "cycles to simulate")
      ("sim.seed", po::value(&c.hw.sim.seed)->default_value(c.hw.sim.seed), "seed of every random choice")
      ("sim.threads", po::value(&c.hw.sim.threads)->default_value(c.hw.sim.threads), "host threads (results do not depend on it)")
      ("sim.visit_order", po::value(&visit_order)->default_value(visit_order), "forward, reverse or shuffle (results do not depend on it)")
      ("sim.watchdog_cycles", po::value(&c.hw.sim.watchdog_cycles)->default_value(c.hw.sim.watchdog_cycles), "stop when nothing moves this long with wavelets buffered (0 = off)");

  po::options_description traffic("Traffic generator [traffic]");
  traffic.add_options()
      ("traffic.pattern", po::value(&c.traffic.pattern)->default_value(c.traffic.pattern), "neighbour, row-broadcast, column-broadcast, reduce, random, hotspot, mixed or file")
      ("traffic.rate", po::value(&c.traffic.rate)->default_value(c.traffic.rate), "wavelets per cycle per source, (0, 1]")
      ("traffic.hops", po::value(&c.traffic.hops)->default_value(c.traffic.hops), "neighbour: hops East and North")
      ("traffic.flows", po::value(&c.traffic.flows)->default_value(c.traffic.flows), "random: number of flows")
      ("traffic.count", po::value(&c.traffic.count)->default_value(c.traffic.count), "wavelets per flow (0 = unbounded)")
      ("traffic.drain_prob", po::value(&c.traffic.drain_prob)->default_value(c.traffic.drain_prob), "chance per cycle a receiver takes an arrival")
      ("traffic.stall_prob", po::value(&c.traffic.stall_prob)->default_value(c.traffic.stall_prob), "chance per cycle a sender holds back")
      ("traffic.region", po::value(&c.traffic.region)->default_value(c.traffic.region), "x0:x1,y0:y1 of taking part PEs (empty = all)")
      ("traffic.routes", po::value(&c.traffic.routes)->default_value(c.traffic.routes), "file: route file (route X Y COLOR RX TX ..., flow X Y COLOR [RATE [COUNT [CTRL_EVERY]]])")
      ("traffic.hotspot_channel", po::value(&c.traffic.hotspot_channel)->default_value(c.traffic.hotspot_channel), "East channel of the hotspot (-1 = middle)");

  po::options_description stats("Statistics and traces [stats] [trace]");
  stats.add_options()
      ("stats.out", po::value(&c.stats.out)->default_value(c.stats.out), "directory for stats.json, pe_*.csv, config.ini")
      ("stats.warmup", po::value(&c.stats.warmup)->default_value(c.stats.warmup), "cycles before the counters restart")
      ("stats.interval", po::value(&c.stats.interval)->default_value(c.stats.interval), "also write stats every N cycles (0 = at the end only)")
      ("trace.vcd", po::value(&c.trace.vcd)->default_value(c.trace.vcd), "VCD file to write (empty = no trace)")
      ("trace.region", po::value(&c.trace.region)->default_value(c.trace.region), "x0:x1,y0:y1 of traced PEs (required with trace.vcd)");

  po::options_description file_opts;
  file_opts.add(fabric).add(router).add(io).add(sim).add(traffic).add(stats);
  po::options_description all("wafersim fabric: simulate the router fabric under synthetic traffic\n\nOptions");
  all.add(general).add(file_opts);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).run(), vm);
    if (vm.count("help")) {
      out << all << "\n";
      return false;
    }
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream in(path);
      if (!in) throw ConfigError("cannot read config file '" + path + "'");
      try {
        po::store(po::parse_config_file(in, file_opts, /*allow_unregistered=*/false), vm);
      } catch (const po::error& e) {
        throw ConfigError("config file '" + path + "': " + e.what());
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(e.what());
  }
  c.hw.sim.visit_order = parse_visit_order(visit_order);
  c.hw.validate();
  c.traffic.validate();
  if (!c.trace.vcd.empty() && c.trace.region.empty()) {
    throw ConfigError("trace.vcd needs trace.region (x0:x1,y0:y1): tracing is limited to a region of PEs");
  }
  if (!c.trace.region.empty()) parse_region(c.trace.region, c.hw.fabric.width, c.hw.fabric.height, "trace.region");
  c.resolved_ini = resolved_ini(file_opts, vm);
  return true;
}

}  // namespace wafersim
