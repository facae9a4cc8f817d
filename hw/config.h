// Immutable parameter structs of the wafer's hardware and of a simulation run. Defaults are the
// WSE-2 figures of docs/fabric.md (sources in ../shared/reference/wse-facts.md); the CLI fills
// them from options (app/options.cc) and constructors only read them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace wafersim {

// Any invalid parameter, route or program: the message is meant for the user as it is.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The largest fabric side (PEs) a configuration or program may ask for.
constexpr int kMaxFabricSide = 4096;

struct FabricConfig {
  int width = 757;          // PEs west->east (WSE-2 as seen by SDK programs)
  int height = 996;         // PEs north->south
  double clock_mhz = 850;   // SDK examples' assumed clock; only converts cycles to seconds
  void validate() const;
};

struct RouterConfig {
  int colors = 24;          // routable colors per router
  int buffer_depth = 4;     // wavelets per (input port, color) buffer; not published (grade U)
  int hop_latency = 1;      // cycles from leaving a router to being forwardable at the next
  int ramp_latency = 2;     // cycles between the core and its router, each direction
  // Host-side only, no effect on results: a router with no core and no channel forwards a lone
  // wavelet that goes straight on without the general path's bookkeeping (Router::step). Off
  // only to compare, in tests.
  bool straight_path = true;
  // Host-side only, no effect on when or what wavelets arrive: in a run whose owner reads no
  // per-router counters and no traces (Fabric::allow_express(): weight streaming), a wavelet
  // that enters a line of such routers whose colors all go straight on along it leaves the line
  // at the cycle it would, without a visit per router (ExpressRun, hw/router.h). Off only to
  // compare.
  bool express = true;
  // Host-side only, no effect on results: in a run whose owner reads routers only between
  // cycles and takes no traces (Fabric::allow_vector(): `wafersim fabric`), step the routers 16
  // at a time as bit planes (hw/vector_fabric.h) where that engine takes the fabric. Off only to
  // compare.
  bool vector = true;
  void validate() const;
};

struct IoConfig {
  int channels_per_edge = 60;  // at most this many channels on each of the E and W edges
  int spacing = 16;            // rows between neighbouring channels
  int queue_depth = 16;        // wavelets buffered on the host side of a channel, each direction
  double channel_gbps = 7.0;   // per channel and direction (SDK figure)
  void validate() const;
  // The channels an edge of `height` rows has, spacing rows apart and centred on it, and the row
  // of channel i (the same on both edges; hw/fabric.cc).
  int channels(int height) const { return std::min(channels_per_edge, (height - 1) / spacing + 1); }
  int channel_row(int height, int i) const { return (height - 1 - (channels(height) - 1) * spacing) / 2 + i * spacing; }
};

// The PE's compute engine (hw/pe_core.h). Defaults: WSE-2 figures of docs/core.md.
struct CoreConfig {
  int sram_kb = 48;            // code and data share it
  int sram_banks = 8;          // consecutive 16-bit words in consecutive banks
  int read_ports = 2;          // SRAM vector reads per cycle
  int write_ports = 1;         // SRAM vector writes per cycle
  int vector_bits = 64;        // one SRAM port access (SIMD vector)
  int dsd_regs = 44;
  int microthreads = 8;
  int decode_latency = 3;      // cycles from fetch (task start, taken branch) to execute
  // Elements per cycle of the vector datapath.
  int fmac_fp32 = 1;
  int fmac_16 = 4;             // fp16, cb16, bf16
  int fmac_mixed = 2;          // 16-bit sources, fp32 accumulator
  int add_fp32 = 2;            // add, sub, max, mov and the like
  int mul_fp32 = 1;            // mul, muls: the FMAC's multiplier (wse-facts.md; STREAM's fmuls)
  int add_16 = 4;
  int special = 1;             // exp, reciprocal (not published: grade U)
  std::string inq_depths = "6,6,4,4,2,2,2,2";  // words per input queue (ramp -> core)
  std::string outq_depths = "2,2,6,6,2,2";     // words per output queue (core -> ramp)
  int cb16_bias = 31;
  // Host-side only, no effect on results: a core whose main thread alone can move skips its
  // evaluations and replays them later (PeCore::m_lazy), and a core whose threads wait for a
  // queued wavelet's ramp latency sleeps until it is readable. Off only to compare (option
  // core.lazy).
  bool lazy = true;
  void validate() const;
  std::vector<int> inq() const;   // parsed inq_depths
  std::vector<int> outq() const;
};

enum class VisitOrder { kForward, kReverse, kShuffle };

struct SimConfig {
  uint64_t cycles = 1000;
  uint64_t seed = 1;
  int threads = 1;
  // With several threads, a cycle that follows one with fewer router visits than this runs on
  // the caller alone (hand-offs cost more than they save; Fabric::step). 0: always threaded.
  int threaded_visits = 256;
  VisitOrder visit_order = VisitOrder::kForward;  // order active PEs are visited; never changes results
  uint64_t watchdog_cycles = 10000;               // 0 disables the deadlock watchdog
  void validate() const;
};

// Everything the fabric model needs, handed to its constructor as one value.
struct HwConfig {
  FabricConfig fabric;
  RouterConfig router;
  IoConfig io;
  CoreConfig core;
  SimConfig sim;
  void validate() const;
};

const char* visit_order_name(VisitOrder v);
VisitOrder parse_visit_order(const std::string& s);  // throws ConfigError

}  // namespace wafersim
