#include "app/options.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>

namespace wafersim {
namespace po = boost::program_options;
namespace {

std::string format_value(const boost::any& v) {
  std::ostringstream os;
  os.precision(9);  // floats read back bit for bit; doubles as the option parser printed them
  if (auto p = boost::any_cast<int>(&v)) os << *p;
  else if (auto p = boost::any_cast<uint64_t>(&v)) os << *p;
  else if (auto p = boost::any_cast<long long>(&v)) os << *p;
  else if (auto p = boost::any_cast<uint32_t>(&v)) os << *p;
  else if (auto p = boost::any_cast<float>(&v)) os << *p;
  else if (auto p = boost::any_cast<double>(&v)) os << std::setprecision(17) << *p;
  else if (auto p = boost::any_cast<bool>(&v)) os << (*p ? "true" : "false");
  else if (auto p = boost::any_cast<std::string>(&v)) os << *p;
  else throw std::logic_error("resolved_ini: an option of a type format_value does not know");
  return os.str();
}

// INI text of every option of `desc` with its resolved value, one section per key prefix.
std::string resolved_ini(const po::options_description& desc, const po::variables_map& vm, const char* cmd) {
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> sections;
  for (const auto& opt : desc.options()) {
    const std::string& key = opt->long_name();
    const auto dot = key.find('.');
    if (dot == std::string::npos || !vm.count(key)) continue;
    sections[key.substr(0, dot)].emplace_back(key.substr(dot + 1), format_value(vm[key].value()));
  }
  std::ostringstream os;
  os << "# " << cmd << ": fully resolved configuration of this run\n";
  for (const auto& [section, kv] : sections) {
    os << "\n[" << section << "]\n";
    for (const auto& [k, v] : kv) os << k << " = " << v << "\n";
  }
  return os.str();
}

void add_fabric_options(po::options_description& d, HwConfig& hw) {
  d.add_options()
      ("fabric.width", po::value(&hw.fabric.width)->default_value(hw.fabric.width), "PEs west to east (WSE-2: 757)")
      ("fabric.height", po::value(&hw.fabric.height)->default_value(hw.fabric.height), "PEs north to south (WSE-2: 996)")
      ("fabric.clock_mhz", po::value(&hw.fabric.clock_mhz)->default_value(hw.fabric.clock_mhz), "clock, converts cycles to time");
}

void add_router_options(po::options_description& d, HwConfig& hw) {
  d.add_options()
      ("router.colors", po::value(&hw.router.colors)->default_value(hw.router.colors), "routable colors (at most 32)")
      ("router.buffer_depth", po::value(&hw.router.buffer_depth)->default_value(hw.router.buffer_depth), "wavelets per (input port, color) buffer")
      ("router.hop_latency", po::value(&hw.router.hop_latency)->default_value(hw.router.hop_latency), "cycles per hop")
      ("router.ramp_latency", po::value(&hw.router.ramp_latency)->default_value(hw.router.ramp_latency), "cycles between core and router, each way")
      ("router.express", po::value(&hw.router.express)->default_value(hw.router.express),
       "host speed only, never changes results: cross lines of routers that only pass wavelets straight on in one step, in runs that read no per-router counters (weight streaming); false to compare")
      ("router.vector", po::value(&hw.router.vector)->default_value(hw.router.vector),
       "host speed only, never changes results: step the routers 16 at a time as bit planes in `wafersim fabric` runs without traces, where the fabric allows it (docs/fabric.md); false to compare");
}

void add_io_options(po::options_description& d, HwConfig& hw) {
  d.add_options()
      ("io.channels_per_edge", po::value(&hw.io.channels_per_edge)->default_value(hw.io.channels_per_edge), "channels on each of the E and W edges (at most; fewer if the edge is short)")
      ("io.spacing", po::value(&hw.io.spacing)->default_value(hw.io.spacing), "rows between channels")
      ("io.queue_depth", po::value(&hw.io.queue_depth)->default_value(hw.io.queue_depth), "host-side buffer per channel and direction")
      ("io.channel_gbps", po::value(&hw.io.channel_gbps)->default_value(hw.io.channel_gbps), "bandwidth per channel and direction");
}

void add_core_options(po::options_description& d, HwConfig& hw) {
  CoreConfig& c = hw.core;
  d.add_options()
      ("core.sram_kb", po::value(&c.sram_kb)->default_value(c.sram_kb), "SRAM per PE in KB, code and data")
      ("core.sram_banks", po::value(&c.sram_banks)->default_value(c.sram_banks), "SRAM banks (16-bit words interleaved)")
      ("core.read_ports", po::value(&c.read_ports)->default_value(c.read_ports), "SRAM vector reads per cycle")
      ("core.write_ports", po::value(&c.write_ports)->default_value(c.write_ports), "SRAM vector writes per cycle")
      ("core.vector_bits", po::value(&c.vector_bits)->default_value(c.vector_bits), "bits per SRAM access (SIMD width)")
      ("core.dsd_regs", po::value(&c.dsd_regs)->default_value(c.dsd_regs), "descriptor registers")
      ("core.microthreads", po::value(&c.microthreads)->default_value(c.microthreads), "microthreads for async vector ops")
      ("core.decode_latency", po::value(&c.decode_latency)->default_value(c.decode_latency), "cycles from fetch to execute")
      ("core.fmac_fp32", po::value(&c.fmac_fp32)->default_value(c.fmac_fp32), "fp32 FMACs per cycle")
      ("core.fmac_16", po::value(&c.fmac_16)->default_value(c.fmac_16), "fp16/cb16/bf16 FMACs per cycle")
      ("core.fmac_mixed", po::value(&c.fmac_mixed)->default_value(c.fmac_mixed), "16-bit x 16-bit + fp32 FMACs per cycle")
      ("core.add_fp32", po::value(&c.add_fp32)->default_value(c.add_fp32), "fp32 adds/moves per cycle")
      ("core.mul_fp32", po::value(&c.mul_fp32)->default_value(c.mul_fp32), "fp32 multiplies (vmul, vmuls) per cycle")
      ("core.add_16", po::value(&c.add_16)->default_value(c.add_16), "16-bit adds/moves per cycle")
      ("core.special", po::value(&c.special)->default_value(c.special), "exp/reciprocal elements per cycle")
      ("core.inq_depths", po::value(&c.inq_depths)->default_value(c.inq_depths), "words in each of the 8 input queues")
      ("core.outq_depths", po::value(&c.outq_depths)->default_value(c.outq_depths), "words in each of the 6 output queues")
      ("core.cb16_bias", po::value(&c.cb16_bias)->default_value(c.cb16_bias), "exponent bias of cb16 (1..62)")
      ("core.lazy", po::value(&c.lazy)->default_value(c.lazy),
       "host speed only, never changes results: a core that only its main thread can move skips those cycles and replays them later; false to compare");
}

void add_sim_options(po::options_description& d, HwConfig& hw, std::string& visit_order, const char* cycles_help) {
  d.add_options()
      ("sim.cycles", po::value(&hw.sim.cycles)->default_value(hw.sim.cycles), cycles_help)
      ("sim.seed", po::value(&hw.sim.seed)->default_value(hw.sim.seed), "seed of every random choice")
      ("sim.threads", po::value(&hw.sim.threads)->default_value(hw.sim.threads), "host threads (results do not depend on it)")
      ("sim.threaded_visits", po::value(&hw.sim.threaded_visits)->default_value(hw.sim.threaded_visits),
       "with sim.threads > 1, cycles after one with fewer router visits run on one thread (0: always threaded)")
      ("sim.visit_order", po::value(&visit_order)->default_value(visit_order), "forward, reverse or shuffle (results do not depend on it)")
      ("sim.watchdog_cycles", po::value(&hw.sim.watchdog_cycles)->default_value(hw.sim.watchdog_cycles), "stop when nothing moves this long with wavelets buffered (0 = off)");
}

void add_stats_options(po::options_description& d, StatsOptions& st, TraceOptions& tr) {
  d.add_options()
      ("stats.out,o", po::value(&st.out)->default_value(st.out), "results directory (also -o)")
      ("stats.warmup", po::value(&st.warmup)->default_value(st.warmup), "cycles before the counters restart")
      ("stats.interval", po::value(&st.interval)->default_value(st.interval), "also write stats every N cycles (0 = at the end only)")
      ("trace.vcd", po::value(&tr.vcd)->default_value(tr.vcd), "VCD file to write (empty = no trace)")
      ("trace.region", po::value(&tr.region)->default_value(tr.region), "x0:x1,y0:y1 of traced PEs (required with trace.vcd)");
}

// What the option parser lets through but no option of wafersim takes: a negative number for
// an unsigned option (it would wrap around to a huge one), a value that is not a finite number
// for a floating-point one, and (without positional options) a bare argument.
void check_values(const po::parsed_options& parsed, const po::variables_map& vm, bool positional, const std::string& where) {
  for (const po::option& o : parsed.options) {
    if (o.string_key.empty() || (!positional && o.position_key >= 0)) {
      throw ConfigError(where + "unexpected argument '" + (o.original_tokens.empty() ? std::string() : o.original_tokens.back()) +
                        "' (this command takes options only)");
    }
    if (!vm.count(o.string_key)) continue;
    const boost::any& v = vm[o.string_key].value();
    const bool is_unsigned = boost::any_cast<uint32_t>(&v) || boost::any_cast<uint64_t>(&v);
    for (const std::string& tok : o.value) {
      const auto first = tok.find_first_not_of(" \t");
      if (is_unsigned && first != std::string::npos && tok[first] == '-') {
        throw ConfigError(where + o.string_key + " must not be negative, got " + tok);
      }
    }
    double d = 0;
    if (auto p = boost::any_cast<double>(&v)) d = *p;
    else if (auto q = boost::any_cast<float>(&v)) d = *q;
    if (!std::isfinite(d)) throw ConfigError(where + o.string_key + " must be a finite number, got " + format_value(v));
  }
}

// Boost.Program_options writes its error messages by replacing placeholders (%value%, %option%,
// %canonical_option%, ...) with the user's text until none is left, so text that holds a
// placeholder would loop forever once the parser reports it. No option takes such text: it is
// refused first. `where` prefixes the message. Letters of either case: a bool's value is
// lowercased before it is reported ('%VALUE%' became '%value%' and hung; found by fuzz_ini).
void check_placeholders(const std::string& text, const std::string& where) {
  for (size_t a = text.find('%'); a != std::string::npos; a = text.find('%', a + 1)) {
    size_t b = a + 1;
    while (b < text.size() && (std::isalpha(static_cast<unsigned char>(text[b])) || text[b] == '_')) ++b;
    if (b > a + 1 && b < text.size() && text[b] == '%') {
      throw ConfigError(where + "'" + text.substr(a, b + 1 - a) + "' is not accepted in an option or its value " +
                        "(the option parser takes it for a placeholder of its messages)");
    }
  }
}

// Parses the command line (and the INI file it names) into `vm`; false after printing help.
bool parse_into(const std::vector<std::string>& args, const po::options_description& all,
                const po::options_description& file_opts, const po::positional_options_description* pos,
                po::variables_map& vm, std::ostream& out) {
  for (const std::string& a : args) check_placeholders(a, "");
  try {
    po::command_line_parser parser(args);
    parser.options(all);
    if (pos) parser.positional(*pos);
    const po::parsed_options cmdline = parser.run();
    po::store(cmdline, vm);
    if (vm.count("help")) {
      out << all << "\n";
      return false;
    }
    check_values(cmdline, vm, pos != nullptr, "");
    if (vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::error_code ec;
      if (!std::filesystem::is_regular_file(path, ec)) {
        throw ConfigError("config file '" + path + "' " + (std::filesystem::exists(path, ec) ? "is not a regular file" : "does not exist"));
      }
      std::ifstream file_in(path);
      if (!file_in) throw ConfigError("cannot read config file '" + path + "'");
      std::ostringstream text;
      text << file_in.rdbuf();
      check_placeholders(text.str(), "config file '" + path + "': ");
      std::istringstream in(text.str());
      try {
        const po::parsed_options file = po::parse_config_file(in, file_opts, /*allow_unregistered=*/false);
        // Every value of the file is converted and checked, also those the command line
        // overrides (store() skips an option that already has a value).
        po::variables_map own;
        po::store(file, own);
        check_values(file, own, false, "config file '" + path + "': ");
        po::store(file, vm);
      } catch (const po::error& e) {
        throw ConfigError("config file '" + path + "': " + e.what());
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw ConfigError(e.what());
  }
  return true;
}

}  // namespace

std::string vcd_base(const std::string& path) {
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".vcd") == 0) return path.substr(0, path.size() - 4);
  return path;
}

namespace {

// The results directory is named, and a warm-up can end inside the run.
void check_stats(const StatsOptions& st, uint64_t cycles, const char* cycles_name) {
  if (st.out.empty()) throw ConfigError("stats.out (-o) must name the results directory, got ''");
  if (st.warmup > 0 && st.warmup >= cycles) {
    throw ConfigError("stats.warmup " + std::to_string(st.warmup) + " is not below " + cycles_name + " " + std::to_string(cycles) +
                      ": the counters would never restart");
  }
}

void check_trace(const TraceOptions& tr, const HwConfig& hw) {
  if (!tr.vcd.empty() && tr.region.empty()) {
    throw ConfigError("trace.vcd needs trace.region (x0:x1,y0:y1): tracing is limited to a region of PEs");
  }
  if (!tr.region.empty()) parse_region(tr.region, hw.fabric.width, hw.fabric.height, "trace.region");
  if (tr.vcd.empty()) return;
  // SystemC reports a trace file it cannot open on stdout and goes on: check (and make its
  // directory) first. It writes BASE.vcd for trace.vcd BASE or BASE.vcd (open_vcd).
  const std::filesystem::path file(vcd_base(tr.vcd) + ".vcd");
  std::error_code ec;
  if (tr.vcd.back() == '/' || std::filesystem::is_directory(tr.vcd, ec) || file.filename() == ".vcd") {
    throw ConfigError("trace.vcd '" + tr.vcd + "' names a directory, not a file");
  }
  if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path(), ec);
  const bool existed = std::filesystem::exists(file, ec);
  if (!std::ofstream(file, std::ios::app)) throw ConfigError("cannot write trace.vcd '" + file.string() + "'");
  if (!existed) std::filesystem::remove(file, ec);  // the run writes it
}

}  // namespace

bool parse_fabric_options(const std::vector<std::string>& args, FabricRunConfig* cfg, std::ostream& out) {
  FabricRunConfig& c = *cfg;
  std::string visit_order = visit_order_name(c.hw.sim.visit_order);

  po::options_description general("General");
  general.add_options()
      ("help,h", "print this help and exit")
      ("config", po::value(&c.config_file), "INI file of options (the command line overrides it)");
  po::options_description fabric("Fabric [fabric]"), router("Router [router]"), io("Edge I/O [io]"),
      sim("Simulation [sim]"), traffic("Traffic generator [traffic]"), stats("Statistics and traces [stats] [trace]");
  add_fabric_options(fabric, c.hw);
  add_router_options(router, c.hw);
  add_io_options(io, c.hw);
  add_sim_options(sim, c.hw, visit_order, "cycles to simulate");
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
  add_stats_options(stats, c.stats, c.trace);

  po::options_description file_opts;
  file_opts.add(fabric).add(router).add(io).add(sim).add(traffic).add(stats);
  po::options_description all("wafersim fabric: simulate the router fabric under synthetic traffic\n\nOptions");
  all.add(general).add(file_opts);

  po::variables_map vm;
  if (!parse_into(args, all, file_opts, nullptr, vm, out)) return false;
  c.hw.sim.visit_order = parse_visit_order(visit_order);
  c.hw.validate();
  c.traffic.validate();
  check_stats(c.stats, c.hw.sim.cycles, "sim.cycles");
  check_trace(c.trace, c.hw);
  c.resolved_ini = resolved_ini(file_opts, vm, "wafersim fabric");
  return true;
}

bool parse_run_options(const std::vector<std::string>& args, RunConfig* cfg, std::ostream& out) {
  RunConfig& c = *cfg;
  c.hw.sim.cycles = 10000000;
  std::string visit_order = visit_order_name(c.hw.sim.visit_order);
  po::options_description general("General");
  general.add_options()
      ("help,h", "print this help and exit")
      ("program", po::value(&c.program), "fabric program: a directory with program.json, or the file itself")
      ("config", po::value(&c.config_file), "INI file of options (the command line overrides it)")
      ("show", po::value(&c.show)->default_value(c.show), "values printed per output (all go to outputs.json)");
  po::options_description fabric("Fabric [fabric] (default: the program's bounding box)"), router("Router [router]"),
      io("Edge I/O [io]"), core("PE core [core]"), sim("Simulation [sim]"), stats("Statistics and traces [stats] [trace]");
  add_fabric_options(fabric, c.hw);
  add_router_options(router, c.hw);
  add_io_options(io, c.hw);
  add_core_options(core, c.hw);
  add_sim_options(sim, c.hw, visit_order, "stop with an error if the program has not finished after this many cycles");
  add_stats_options(stats, c.stats, c.trace);
  po::options_description file_opts;
  file_opts.add(fabric).add(router).add(io).add(core).add(sim).add(stats);
  po::options_description all(
      "wafersim run PROGRAM: run a fabric program (docs/program.md) until every core halts;\n"
      "print cycles, per-PE busy/stall/idle and the outputs\n\nOptions");
  all.add(general).add(file_opts);
  po::positional_options_description pos;
  pos.add("program", 1);
  po::variables_map vm;
  if (!parse_into(args, all, file_opts, &pos, vm, out)) return false;
  if (c.program.empty()) throw ConfigError("no program given (wafersim run DIR or wafersim run DIR/program.json)");
  c.width_given = !vm["fabric.width"].defaulted();
  c.height_given = !vm["fabric.height"].defaulted();
  c.hw.sim.visit_order = parse_visit_order(visit_order);
  c.hw.validate();
  check_stats(c.stats, c.hw.sim.cycles, "sim.cycles (the most a run may take)");
  if (c.show < 0) throw ConfigError("show must be >= 0");
  // The fabric size may still change to the program's bounding box: resolve the INI text then.
  auto desc = std::make_shared<po::options_description>(file_opts);
  c.resolved_ini = [desc, vm](const HwConfig& hw) mutable {
    vm.at("fabric.width").value() = hw.fabric.width;
    vm.at("fabric.height").value() = hw.fabric.height;
    return resolved_ini(*desc, vm, "wafersim run");
  };
  return true;
}

Region run_trace_region(const RunConfig& c) {
  check_trace(c.trace, c.hw);
  return c.trace.region.empty() ? Region{} : parse_region(c.trace.region, c.hw.fabric.width, c.hw.fabric.height, "trace.region");
}


bool parse_kernel_options(const std::vector<std::string>& args, KernelGenConfig* cfg, std::ostream& out) {
  KernelGenConfig& c = *cfg;
  std::string visit_order = visit_order_name(c.hw.sim.visit_order);
  po::options_description general("General");
  general.add_options()
      ("help,h", "print this help and exit")
      ("kernel", po::value(&c.kernel), "gemv, meshgemv, allreduce, reduce, broadcast, elementwise, stream, stencil, fft or pingpong")
      ("out,o", po::value(&c.out)->default_value(c.out), "directory to write the program to")
      ("config", po::value(&c.config_file), "INI file of options (the command line overrides it)");
  po::options_description kernel("Kernel [kernel]"), router("Router [router]"), core("PE core [core]"),
      sim("Simulation [sim]");
  kernel.add_options()
      ("kernel.w", po::value(&c.w)->default_value(c.w), "PEs west to east (fft: n, the n x n PEs of an n^3 transform)")
      ("kernel.h", po::value(&c.h)->default_value(c.h), "PEs north to south")
      ("kernel.m", po::value(&c.m)->default_value(c.m), "gemv: rows of A; meshgemv: length of x (rows of W)")
      ("kernel.n", po::value(&c.n)->default_value(c.n), "gemv: columns of A; meshgemv: columns of W")
      ("kernel.len", po::value(&c.len)->default_value(c.len), "elements per PE (reduce, broadcast, elementwise, pingpong)")
      ("kernel.format", po::value(&c.format)->default_value(c.format), "fp32, fp16, cb16 or bf16")
      ("kernel.acc", po::value(&c.acc)->default_value(c.acc), "gemv: accumulation format (fp32 or the same as kernel.format)")
      ("kernel.algo", po::value(&c.algo)->default_value(c.algo), "chain, tree, two-phase or binomial (reductions)")
      ("kernel.reps", po::value(&c.reps)->default_value(c.reps), "gemv: products computed back to back")
      ("kernel.op", po::value(&c.op)->default_value(c.op), "elementwise: add, sub, mul, max, cmpgt, relu, exp, recip; stream: copy, scale, add, triad")
      ("kernel.warmup", po::value(&c.warmup)->default_value(c.warmup), "stream: untimed runs of the op before the timed one; stencil: untimed time steps (default 0)")
      ("kernel.nz", po::value(&c.nz)->default_value(c.nz), "stencil: Z cells per PE (the column in SRAM)")
      ("kernel.block", po::value(&c.block)->default_value(c.block), "stencil: Z cells per block (0: the fewest blocks that fit)")
      ("kernel.steps", po::value(&c.steps)->default_value(c.steps), "stencil: timed time steps")
      ("kernel.columns", po::value(&c.columns)->default_value(c.columns), "broadcast: down the columns instead of along the rows")
      ("kernel.distance", po::value(&c.distance)->default_value(c.distance), "pingpong: hops between the two PEs")
      ("kernel.rounds", po::value(&c.rounds)->default_value(c.rounds), "pingpong: round trips");
  add_router_options(router, c.hw);
  add_core_options(core, c.hw);
  add_sim_options(sim, c.hw, visit_order, "(unused)");
  po::options_description file_opts;
  file_opts.add(kernel).add(router).add(core).add(sim);
  po::options_description all(
      "wafersim kernel NAME -o DIR: write a kernel of the library as a fabric program with random\n"
      "inputs from sim.seed (run it with wafersim run DIR)\n\nOptions");
  all.add(general).add(file_opts);
  po::positional_options_description pos;
  pos.add("kernel", 1);
  po::variables_map vm;
  if (!parse_into(args, all, file_opts, &pos, vm, out)) return false;
  if (c.kernel.empty()) throw ConfigError("no kernel named (gemv, meshgemv, allreduce, reduce, broadcast, elementwise, stream, stencil, fft, pingpong)");
  c.hw.validate();
  if (c.out.empty()) throw ConfigError("-o needs the directory to write the program to");
  // Shapes the kernels can be built for, checked before anything is allocated.
  if (c.w < 1 || c.h < 1 || c.w > 4096 || c.h > 4096) throw ConfigError("kernel.w and kernel.h must be in [1, 4096]");
  constexpr uint64_t kMaxPes = uint64_t{1} << 20;  // a WSE-3 has 762 x 1172 = 893,064
  if (uint64_t(c.w) * uint64_t(c.h) > kMaxPes) {
    throw ConfigError("kernel.w x kernel.h = " + std::to_string(uint64_t(c.w) * uint64_t(c.h)) + " PEs; at most " +
                      std::to_string(kMaxPes) + " (a WSE-2 has 753,972)");
  }
  const uint64_t sram = static_cast<uint64_t>(c.hw.core.sram_kb) * 1024;
  if (c.len < 1 || c.len > sram / 2) {
    throw ConfigError("kernel.len must be in [1, " + std::to_string(sram / 2) + "] (16-bit elements in core.sram_kb), got " + std::to_string(c.len));
  }
  if (c.kernel == "fft" && (c.w != c.h || c.w < 2 || c.w > 512 || (c.w & (c.w - 1)))) {
    throw ConfigError("fft: kernel.w = kernel.h = n, a power of two in [2, 512] (n^3 on n x n PEs)");
  }
  if (c.kernel == "stencil") {
    if (vm["kernel.warmup"].defaulted()) c.warmup = 0;  // the default 100 is stream's
    if (c.nz < 1 || c.nz > 16384 || c.block > c.nz) throw ConfigError("kernel.nz must be in [1, 16384] and kernel.block in [0, kernel.nz]");
    if (c.steps < 1 || c.steps > (1u << 20) || c.warmup > (1u << 20)) throw ConfigError("kernel.steps must be in [1, 2^20] and kernel.warmup at most 2^20");
  }
  if (c.reps < 1 || c.rounds < 1) throw ConfigError("kernel.reps and kernel.rounds must be at least 1");
  if (c.distance < 1 || c.distance > 4095) throw ConfigError("kernel.distance must be in [1, 4095] (the two PEs share one row of at most 4096)");
  if (c.kernel == "gemv" || c.kernel == "meshgemv") {
    if (c.m < 1 || c.n < 1) throw ConfigError("kernel.m and kernel.n must be at least 1");
    if (c.kernel == "gemv" && c.h + 1 > 4096) throw ConfigError("gemv uses kernel.h + 1 rows (x enters on the row above): kernel.h must be at most 4095");
    const uint64_t elems = uint64_t{c.m} * uint64_t{c.n};
    if (elems * 2 > uint64_t(c.w) * uint64_t(c.h) * sram || elems > (uint64_t{1} << 30)) {
      throw ConfigError(c.kernel + ": the matrix (kernel.m x kernel.n = " + std::to_string(elems) + " elements) " +
                        (elems > (uint64_t{1} << 30) ? std::string("is over 2^30 elements")
                                                     : "does not fit the SRAM of " + std::to_string(c.w) + " x " +
                                                           std::to_string(c.h) + " PEs: use more PEs (kernel.w, kernel.h)"));
    }
  }
  return true;
}

bool parse_validate_options(const std::vector<std::string>& args, ValidateConfig* cfg, std::ostream& out) {
  ValidateConfig& c = *cfg;
  c.hw.sim.cycles = 100000000;  // a bound on each case's run, not its length
  std::string visit_order = visit_order_name(c.hw.sim.visit_order);
  po::options_description general("General");
  general.add_options()
      ("help,h", "print this help and exit")
      ("case", po::value(&c.cases)->multitoken(), "cases or families to run (default: all; --list names them)")
      ("quick", po::bool_switch(&c.quick), "the quick subset (the default ctest set runs it)")
      ("list", po::bool_switch(&c.list), "list the cases with their published figures and exit")
      ("max-error", po::value(&c.max_error)->default_value(c.max_error), "exit 1 when a case is more than this many percent off (0: report only)")
      ("out,o", po::value(&c.out)->default_value(c.out), "directory for validation.json and validation.md")
      ("config", po::value(&c.config_file), "INI file of options (the command line overrides it)");
  po::options_description fabric("Fabric [fabric]"), router("Router [router]"), core("PE core [core]"),
      sim("Simulation [sim]");
  add_fabric_options(fabric, c.hw);
  add_router_options(router, c.hw);
  add_core_options(core, c.hw);
  add_sim_options(sim, c.hw, visit_order, "cycles at most per case run");
  po::options_description file_opts;
  file_opts.add(fabric).add(router).add(core).add(sim);
  po::options_description all(
      "wafersim validate [CASE...] [-o DIR]: run the validation cases (kernels as the published\n"
      "implementations describe them) and compare their cycles with the published CS-2 figures\n"
      "(docs/validation.md). The fabric size of each case is its own; the other options are the\n"
      "hardware the cases run on\n\nOptions");
  all.add(general).add(file_opts);
  po::positional_options_description pos;
  pos.add("case", -1);
  po::variables_map vm;
  if (!parse_into(args, all, file_opts, &pos, vm, out)) return false;
  c.hw.sim.visit_order = parse_visit_order(visit_order);
  for (const char* key : {"fabric.width", "fabric.height"}) {
    if (vm.count(key) && !vm[key].defaulted()) {
      throw ConfigError(std::string(key) + " is set by each validation case (the size its published run used); it cannot be given");
    }
  }
  c.hw.validate();
  if (c.out.empty()) throw ConfigError("-o needs the directory to write the results to");
  if (!(c.max_error >= 0) || c.max_error > 1e6) throw ConfigError("max-error must be a percentage >= 0");
  return true;
}

}  // namespace wafersim

namespace wafersim {

bool parse_train_options(const std::vector<std::string>& args, TrainConfig* cfg, std::ostream& out, bool train) {
  TrainConfig& c = *cfg;
  c.model = WAFERSIM_DEMO_MODEL;
  std::string visit_order = visit_order_name(c.hw.sim.visit_order);
  po::options_description general("General");
  general.add_options()
      ("help,h", "print this help and exit")
      ("model", po::value(&c.model)->default_value(c.model), "ONNX model as torch.onnx.export writes it")
      ("config", po::value(&c.config_file), "INI file of options (the command line overrides it)")
      ("out,o", po::value(&c.out)->default_value(c.out), "directory for the artifacts and reports")
      ("mode", po::value(&c.mode)->default_value(c.mode),
       "execution mode: layer-pipelined, weight-streaming, or auto (layer-pipelined when the model fits)")
      ("systems", po::value(&c.ws.systems)->default_value(c.ws.systems), "weight streaming: CS-2 systems, data parallel")
      ("validate-only", po::bool_switch(&c.validate_only), "stop after matching the graph to kernels; list unsupported ops");
  if (!train) {
    general.add_options()("compile-only", po::bool_switch(&c.compile_only),
                          "write the fabric program and the compile report to --out, do not run");
  } else {
    general.add_options()("resume", po::value(&c.resume), "continue from a checkpoint written by an earlier run");
  }
  po::options_description comp("Compiler [compile]"), tr("Training [train]"), data("Data [data]"), fabric("Fabric [fabric]"),
      router("Router [router]"), io("Edge I/O [io]"), core("PE core [core]"), sim("Simulation [sim]"),
      ws("Weight streaming and the cluster [ws] [memoryx] [swarmx] [edge_bridge] [input]");
  ws.add_options()
      ("ws.columns", po::value(&c.ws.columns)->default_value(c.ws.columns), "sample columns per wafer (0: chosen with ws.rows by the compile estimate, within compile.max_pes)")
      ("ws.dw_block", po::value(&c.ws.dw_block)->default_value(c.ws.dw_block), "dW rows a feature row sends along its reduction at once (0: chosen by the compile estimate, up to 64 as SRAM allows; 1: output by output)")
      ("ws.rows", po::value(&c.ws.rows)->default_value(c.ws.rows), "feature rows per wafer (0: chosen with ws.columns by the compile estimate; rows layout: at most every I/O channel row but the root's and the narrowest layer; grid: io.spacing rows per such channel)")
      ("ws.layout", po::value(&c.ws_layout)->default_value(c.ws_layout),
       "rows: a feature row on each West channel row; grid: bands of adjacent feature rows round each channel row, fed through relays in the edge columns of both edges, to cover the wafer; auto: the one the compile estimate prefers")
      ("ws.prefetch", po::value(&c.prefetch)->default_value(c.prefetch), "request the next layer's weights while the current one streams")
      ("ws.quantum_cycles", po::value(&c.quantum_cycles)->default_value(c.quantum_cycles),
       "global quantum of the cluster's SystemC threads, in clock periods (a wafer runs ahead of the kernel at most this far)")
      ("ws.threads", po::value(&c.ws_threads)->default_value(c.ws_threads),
       "host threads that step the systems' wafers side by side between synchronisations (--systems N > 1); no effect on results")
      ("memoryx.capacity_gb", po::value(&c.memx.capacity_gb)->default_value(c.memx.capacity_gb), "weight store, GB (weights + optimizer state)")
      ("memoryx.bandwidth_gbps", po::value(&c.memx.bandwidth_gbps)->default_value(c.memx.bandwidth_gbps), "MemoryX link, Gb/s")
      ("memoryx.latency_ns", po::value(&c.memx.latency_ns)->default_value(c.memx.latency_ns), "per transaction")
      ("memoryx.optimizer", po::value(&c.memx.optimizer)->default_value(c.memx.optimizer), "sgd (with train.momentum) or adam")
      ("memoryx.beta1", po::value(&c.memx.beta1)->default_value(c.memx.beta1, "0.9"), "adam")
      ("memoryx.beta2", po::value(&c.memx.beta2)->default_value(c.memx.beta2, "0.999"), "adam")
      ("memoryx.eps", po::value(&c.memx.eps)->default_value(c.memx.eps, "1e-08"), "adam")
      ("swarmx.fanout", po::value(&c.swarmx.fanout)->default_value(c.swarmx.fanout), "children per broadcast/reduce node: 2 or 4")
      ("swarmx.link_gbps", po::value(&c.swarmx.link_gbps)->default_value(c.swarmx.link_gbps), "line rate of the tree's links, Gb/s (a CS-2's 12 x 100 GbE per system)")
      ("swarmx.node_latency_ns", po::value(&c.swarmx.node_latency_ns)->default_value(c.swarmx.node_latency_ns), "per tree level")
      ("edge_bridge.link_gbps", po::value(&c.bridge.link_gbps)->default_value(c.bridge.link_gbps), "a system's host link, Gb/s (12 x 100 GbE)")
      ("edge_bridge.latency_ns", po::value(&c.bridge.latency_ns)->default_value(c.bridge.latency_ns), "host to wafer edge")
      ("input.workers", po::value(&c.input_workers)->default_value(c.input_workers), "input workers per system, each streaming every N-th sample of its shard")
      ("input.worker_gbps", po::value(&c.worker_gbps)->default_value(c.worker_gbps), "each worker's stream, Gb/s")
      ("input.slow_worker_gbps", po::value(&c.slow_worker_gbps)->default_value(c.slow_worker_gbps), "worker 0 this slow instead (0: none), to study input starvation");
  comp.add_options()
      ("compile.max_pes", po::value(&c.compile.place.max_pes)->default_value(c.compile.place.max_pes),
       "PEs the model may use, in either mode (layer-pipelined regions; weight streaming's rows, columns and roots per system); 0 (the default): the whole fabric, the most throughput")
      ("compile.ring_depth", po::value(&c.compile.place.ring_depth)->default_value(c.compile.place.ring_depth),
       "samples in flight per tile within a minibatch (1..64); 0: enough for a sample's round trip, at least 4, as SRAM allows")
      ("compile.replicas", po::value(&c.compile.place.replicas)->default_value(c.compile.place.replicas),
       "layer-pipelined copies of the model trained data-parallel, their gradients summed on the wafer (1..4096); 0: as many as raise the estimated samples/s")
      ("train.batch", po::value(&c.compile.place.batch)->default_value(c.compile.place.batch), "samples per weight update")
      ("train.in_flight", po::value(&c.compile.place.in_flight)->default_value(c.compile.place.in_flight),
       "layer-pipelined minibatches in flight: 1, plain SGD (each minibatch enters after the last update); 2, the next minibatch's first few samples (at most the ring) enter layer 0 before the update, with its weights before it")
      ("train.loss", po::value(&c.compile.loss)->default_value(c.compile.loss),
       "loss when the graph has none: softmax_xent; graph: require the graph's own");
  if (train) {
    tr.add_options()
        ("train.steps", po::value(&c.steps)->default_value(c.steps), "minibatches to train (0: 1800, the demo's)")
        ("train.lr", po::value(&c.compile.hyper.lr)->default_value(c.compile.hyper.lr, "0.01"), "learning rate")
        ("train.momentum", po::value(&c.compile.hyper.momentum)->default_value(c.compile.hyper.momentum, "0.9"), "SGD momentum")
        ("train.log_every", po::value(&c.log_every)->default_value(c.log_every), "progress line every N steps (0: about 20 lines)")
        ("train.progress_seconds", po::value(&c.progress_seconds)->default_value(c.progress_seconds),
         "weight streaming: a line per layer pass once a minibatch has run this many host seconds (0: none)")
        ("train.checkpoint_every", po::value(&c.checkpoint_every)->default_value(c.checkpoint_every),
         "write OUT/checkpoint.onnx every N steps (0: only at the end)")
        ("train.eval", po::value(&c.eval)->default_value(c.eval), "evaluate test-set accuracy at the end");
    data.add_options()
        ("data.source", po::value(&c.data)->default_value(c.data), "fashion-mnist, idx or npy")
        ("data.dir", po::value(&c.data_dir)->default_value(c.data_dir), "Fashion-MNIST directory (Debian's dataset-fashion-mnist)")
        ("data.train_x", po::value(&c.train_x), "idx/npy: training samples")
        ("data.train_y", po::value(&c.train_y), "idx/npy: training labels")
        ("data.test_x", po::value(&c.test_x), "idx/npy: test samples")
        ("data.test_y", po::value(&c.test_y), "idx/npy: test labels")
        ("data.scale", po::value(&c.norm.scale)->default_value(c.norm.scale), "input normalisation: (x * scale - mean) / std")
        ("data.mean", po::value(&c.norm.mean)->default_value(c.norm.mean), "")
        ("data.std", po::value(&c.norm.std)->default_value(c.norm.std), "")
        ("trace.vcd", po::value(&c.trace.vcd)->default_value(c.trace.vcd), "VCD file of the run (empty = no trace; slows the run)")
        ("trace.region", po::value(&c.trace.region)->default_value(c.trace.region),
         "x0:x1,y0:y1 of traced PEs (required with trace.vcd)")
        ("stats.fabric", po::value(&c.fabric_stats)->default_value(c.fabric_stats),
         "write the wafer's port, color and per-PE counters over the steps to OUT/fabric (weight streaming: "
         "OUT/fabric/system_K, and no express lines, so slower); scripts/plot_fabric_heatmaps draws them");
  }
  add_fabric_options(fabric, c.hw);
  add_router_options(router, c.hw);
  add_io_options(io, c.hw);
  add_core_options(core, c.hw);
  add_sim_options(sim, c.hw, visit_order, "(not used by training: it runs until the steps are done)");
  po::options_description file_opts;
  file_opts.add(comp);
  if (train) file_opts.add(tr).add(data);
  file_opts.add(ws).add(fabric).add(router).add(io).add(core).add(sim);
  po::options_description all(train ? "wafersim train [MODEL.onnx]: compile the model and train it on the simulated wafer\n"
                                      "(layer-pipelined or weight streaming), streaming loss values back; docs/training.md\n\nOptions"
                                    : "wafersim compile [MODEL.onnx]: compile an ONNX model for the wafer (docs/compiler.md)\n\nOptions");
  all.add(general).add(file_opts);
  po::positional_options_description pos;
  pos.add("model", 1);
  po::variables_map vm;
  if (!parse_into(args, all, file_opts, &pos, vm, out)) return false;
  c.hw.sim.visit_order = parse_visit_order(visit_order);
  c.hw.validate();
  if (c.mode != "layer-pipelined" && c.mode != "weight-streaming" && c.mode != "auto") {
    throw ConfigError("mode '" + c.mode + "' is unknown (layer-pipelined, weight-streaming or auto)");
  }
  // Options that the run would ignore are errors, not silently dropped.
  if (c.validate_only && c.compile_only) throw ConfigError("--validate-only and --compile-only exclude each other");
  if (c.out.empty()) throw ConfigError("--out (-o) must name the directory for the outputs, got ''");
  if (train && vm.count("resume")) {
    if (c.resume.empty()) throw ConfigError("--resume needs the checkpoint file to continue from");
    if (vm.count("model") && !vm["model"].defaulted()) {
      throw ConfigError("give a model or --resume, not both: the checkpoint is the model, with its weights");
    }
  }
  if (c.mode == "layer-pipelined") {
    for (const auto& opt : ws.options()) {
      const std::string& key = opt->long_name();
      if (!vm.count(key)) continue;
      boost::any def;  // a default value (as a run's config.ini repeats it) changes nothing
      const bool at_default = opt->semantic()->apply_default(def) && format_value(def) == format_value(vm[key].value());
      if (!at_default) {
        throw ConfigError(key + " applies to weight streaming only (--mode weight-streaming or auto), not to layer-pipelined mode");
      }
    }
  }
  if (train && c.data == "fashion-mnist") {
    for (const char* key : {"data.train_x", "data.train_y", "data.test_x", "data.test_y"}) {
      if (vm.count(key)) throw ConfigError(std::string(key) + " is read with data.source idx or npy only, not fashion-mnist");
    }
  }
  if (c.compile.place.in_flight < 1 || c.compile.place.in_flight > 2) {
    throw ConfigError("train.in_flight must be 1 or 2, got " + std::to_string(c.compile.place.in_flight));
  }
  if (c.compile.place.in_flight != 1 && c.mode == "weight-streaming") {
    throw ConfigError("train.in_flight applies to layer-pipelined mode only: weight streaming runs one minibatch at a time");
  }
  if (c.ws.systems < 1 || c.ws.systems > 1024) throw ConfigError("--systems must be in 1..1024, got " + std::to_string(c.ws.systems));
  if (c.ws.systems > 1 && c.mode == "layer-pipelined") {
    throw ConfigError("--systems " + std::to_string(c.ws.systems) + " needs weight-streaming mode (layer-pipelined runs on one system)");
  }
  if (c.ws.columns < 0 || c.ws.rows < 0) throw ConfigError("ws.columns and ws.rows must be >= 0");
  if (c.ws.dw_block < 0 || c.ws.dw_block > 4096) throw ConfigError("ws.dw_block must be in 0..4096, got " + std::to_string(c.ws.dw_block));
  if (c.ws_layout != "rows" && c.ws_layout != "grid" && c.ws_layout != "auto") {
    throw ConfigError("ws.layout must be rows, grid or auto (got '" + c.ws_layout + "')");
  }
  c.ws.grid = c.ws_layout == "grid";
  c.ws.auto_layout = c.ws_layout == "auto";
  if (c.quantum_cycles < 1 || c.quantum_cycles > 100000000) throw ConfigError("ws.quantum_cycles must be in 1..100000000");
  if (c.ws_threads < 1 || c.ws_threads > 256) throw ConfigError("ws.threads must be in 1..256, got " + std::to_string(c.ws_threads));
  if (c.input_workers < 1 || c.input_workers > 1024) {
    throw ConfigError("input.workers must be in 1..1024, got " + std::to_string(c.input_workers));
  }
  if (!(c.worker_gbps > 0) || !(c.slow_worker_gbps >= 0)) throw ConfigError("input.worker_gbps must be > 0 and input.slow_worker_gbps >= 0");
  if (c.compile.place.batch < 1 || c.compile.place.batch > (1 << 24)) throw ConfigError("train.batch must be in 1..16777216");
  if (c.compile.place.max_pes < 0) throw ConfigError("compile.max_pes must be >= 0");
  if (c.compile.place.ring_depth < 0 || c.compile.place.ring_depth > 64) {
    throw ConfigError("compile.ring_depth must be 0 (auto) or in 1..64");
  }
  if (c.compile.place.replicas < 0 || c.compile.place.replicas > 4096) {
    throw ConfigError("compile.replicas must be 0 (auto) or in 1..4096, got " + std::to_string(c.compile.place.replicas));
  }
  if (c.compile.place.replicas > 1 && c.mode == "weight-streaming") {
    throw ConfigError("compile.replicas applies to layer-pipelined mode only: weight streaming spreads each layer over the wafer");
  }
  if (train) {
    if (c.steps < 0) throw ConfigError("train.steps must be >= 0");
    if (c.steps == 0) c.steps = 1800;
    if (c.checkpoint_every < 0 || c.log_every < 0) throw ConfigError("train.checkpoint_every and train.log_every must be >= 0");
    if (!(c.progress_seconds >= 0)) throw ConfigError("train.progress_seconds must be >= 0");
    if (!(c.compile.hyper.lr > 0) || !std::isfinite(c.compile.hyper.lr)) throw ConfigError("train.lr must be a positive number");
    if (!(c.compile.hyper.momentum >= 0 && c.compile.hyper.momentum < 1)) throw ConfigError("train.momentum must be in [0, 1)");
    if (!(c.norm.std > 0) || !std::isfinite(c.norm.std)) throw ConfigError("data.std must be a positive number");
    if (!(c.norm.scale != 0)) throw ConfigError("data.scale must be a non-zero number");
    if (c.data != "fashion-mnist" && c.data != "idx" && c.data != "npy") {
      throw ConfigError("data.source '" + c.data + "' is unknown (fashion-mnist, idx or npy)");
    }
    if (c.data != "fashion-mnist" && (c.train_x.empty() || c.train_y.empty())) {
      throw ConfigError("data.source " + c.data + " needs data.train_x and data.train_y");
    }
  }
  c.ws.batch = c.compile.place.batch;
  c.ws.max_pes = c.compile.place.max_pes;  // one PE budget for both modes
  c.swarmx.systems = c.ws.systems;
  c.memx.lr = c.compile.hyper.lr;
  c.memx.momentum = c.compile.hyper.momentum;
  c.memx.validate();
  c.swarmx.validate();
  c.bridge.validate();
  if (train) check_trace(c.trace, c.hw);
  c.resolved_ini = resolved_ini(file_opts, vm, train ? "wafersim train" : "wafersim compile");
  return true;
}

Region train_trace_region(const TrainConfig& c) {
  return c.trace.region.empty() ? Region{} : parse_region(c.trace.region, c.hw.fabric.width, c.hw.fabric.height, "trace.region");
}

}  // namespace wafersim
