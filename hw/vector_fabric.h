// A second engine for the fabric's routers, 16 at a time (issue 3's speed): every per-color
// fact of a router is one bit of a 32-bit mask (buffer counts and head indexes as bit planes,
// credits per output link as bit planes, served outputs of a multicast head), so credits,
// pushes, pops, arbitration and stalls are whole-mask operations over a block of 16 routers of
// a row; payloads are gathered and scattered per router. It steps a Fabric's routes and agents
// (borrowed, not owned) and must give what Router gives, counter for counter:
// testbench/system/vector_fabric_test.cc compares the two.
//
// Fabric uses it when its owner allows (Fabric::allow_vector: no traces), most PEs route
// something, and it takes the fabric: every route with one switch position and one input port
// per color, one-cycle hops, a ramp latency of 1 or 2, buffers of depth at most 7, no edge
// channels, agents that do not skip evaluations, a processor with the extensions its block step
// was built for (supported() says what is missing). Traffic endpoints it runs itself where it
// can (runs_itself); other agents it calls through PeAgent.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hw/config.h"
#include "hw/wavelet.h"

namespace wafersim {

class Fabric;
class PeAgent;
class TrafficAgent;
class WorkerPool;

class VectorFabric {
 public:
  // Empty when the engine can step `f` (routes and agents set, before its first cycle), else
  // the first reason it cannot.
  static std::string supported(const Fabric& f);
  // Throws ConfigError with supported()'s reason. `f` must outlive it and not be stepped itself.
  explicit VectorFabric(Fabric& f);

  // One cycle; with a pool, its threads step contiguous shares of the blocks (a block reads only
  // what was written in the previous cycle, so any split gives the same result).
  void step(WorkerPool* pool = nullptr);
  void run(uint64_t cycles) {
    for (uint64_t i = 0; i < cycles; ++i) step();
  }
  uint64_t cycle() const { return m_now; }

  // What Router and Fabric count, for the same router (x, y), port and color.
  uint64_t forwarded(int x, int y, int port);
  uint64_t stall(int x, int y, int port);
  uint32_t peak_occupancy(int x, int y) const;
  uint32_t peak_of_color(int x, int y, int color) const;
  uint64_t color_forwarded(int color);
  uint64_t color_stall(int color);
  uint64_t injected();
  uint64_t delivered();
  uint64_t multicast_copies();
  // Wavelets in buffers and on links (sent, not yet taken in).
  uint64_t in_flight() const;
  // Something was sent, injected or taken by an agent in the last cycle (the watchdog's test).
  bool moved() const {
    for (const Flag& f : m_moved) {
      if (f.value) return true;
    }
    return false;
  }
  // Routers it steps while anything is in flight or an agent has work, else 0.
  uint64_t active() const;
  uint32_t occupancy(int x, int y) const;
  uint32_t buffered(int x, int y, int color) const;  // its one input buffer of that color
  int input_port(int x, int y, int color) const;     // -1 when the color is not routed there
  // Warm-up: counters restart; peaks restart from the occupancy of the moment.
  void reset_stats();
  // The traffic endpoints it runs itself (most TrafficAgents): their counters (sent, consumed,
  // buffered, per flow) written back into the agents. Their arrival logs are kept as they come.
  void sync_endpoints();
  // How many agents it runs itself (the rest it calls through PeAgent).
  size_t endpoints_run() const {
    size_t n = 0;
    for (const TrafficAgent* a : m_endpoint) n += a ? 1 : 0;
    return n;
  }

 private:
  void step_block(size_t i, bool* moved);
  static bool runs_itself(const TrafficAgent& a, int colors);
  // An endpoint's arrival into its log (in the generic unit: see vector_fabric_step.cc).
  static void log_arrival(TrafficAgent* a, uint64_t now, const Wavelet& w);
  // The extensions vector_fabric_step.cc was built to use (null-terminated; names as
  // __builtin_cpu_supports takes them), and the first of them this processor lacks (or null).
  static const char* const* step_isa();
  static const char* host_lacks();
  void flush_counters();
  size_t lane(int x, int y) const { return m_guard + static_cast<size_t>(y) * m_row + static_cast<size_t>(x); }
  uint32_t* arr(int k) { return m_mem.get() + static_cast<size_t>(k) * m_stride; }
  const uint32_t* arr(int k) const { return m_mem.get() + static_cast<size_t>(k) * m_stride; }

  const HwConfig m_cfg;
  const int m_width, m_height, m_depth, m_colors, m_ramp_latency;
  size_t m_row = 0, m_guard = 0, m_stride = 0;
  // The per-lane arrays (enum in vector_fabric.cc), one block of memory on huge pages where the
  // host has them: a block of 16 routers touches a line in each of about a hundred arrays per
  // cycle, which on 4 KB pages is a hundred address translations.
  struct FreeHuge {
    size_t bytes;
    void operator()(uint32_t* p) const;
  };
  std::unique_ptr<uint32_t[], FreeHuge> m_mem{nullptr, FreeHuge{0}};
  std::vector<uint32_t> m_pay;        // (lane * colors + color) * depth + slot
  std::vector<uint32_t> m_ctrl;       // the same slots' control bits (0 or 1)
  // An agent has offered a control wavelet: until then m_ctrl and the mailboxes' control bits
  // are all 0 and not touched. (Set by one thread in the middle of a cycle; the others may see
  // it then or from the next cycle, which changes nothing: no control bit can reach them sooner.)
  std::atomic<bool> m_ctrl_seen{false};
  std::vector<PeAgent*> m_agent;      // per lane (null: none)
  std::vector<size_t> m_blocks;       // first lanes of the blocks with something routed
  std::vector<uint32_t> m_block_agents;  // per block, its lanes with an agent called through PeAgent
  std::vector<uint32_t> m_block_endpoints;  // per block, its lanes whose traffic endpoint it runs itself
  std::vector<uint32_t> m_block_drains, m_block_stalls;  // of those, the ones that draw for drains, for stalls
  std::vector<uint8_t> m_block_multicast;  // per block: some color goes out on two or more ports
  // Traffic endpoints it runs itself (vector_fabric.cc, endpoints): per lane the agent (written
  // back when counters are read), its receive queues' slots, its draws' thresholds.
  std::vector<TrafficAgent*> m_endpoint;
  std::vector<uint32_t> m_qpay, m_qctrl;        // (lane * colors + color) * 8 + slot
  std::vector<uint64_t> m_drain_below, m_stall_below, m_seed;  // per lane
  bool m_record = false;              // some endpoint keeps its arrivals

  std::vector<uint64_t> m_fwd64, m_stall64;       // per port and lane, flushed
  std::vector<uint64_t> m_color_fwd, m_color_stall;  // per color, flushed
  uint64_t m_now = 0, m_flushed_at = 0;
  uint64_t m_routers = 0;
  struct alignas(64) Flag {
    bool value = false;
  };
  std::vector<Flag> m_moved;          // per thread: something moved in the last cycle
  std::vector<size_t> m_share;        // per thread, its first block (and one past the last)
  uint64_t m_injected = 0, m_delivered = 0, m_sends = 0, m_pops = 0;  // flushed
};

}  // namespace wafersim
