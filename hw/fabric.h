// The wafer's fabric: W x H routers driven cycle by cycle, plus the edge I/O channels.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "hw/config.h"
#include "hw/edge_io.h"
#include "hw/pe_agent.h"
#include "hw/router.h"
#include "hw/vector_fabric.h"
#include "hw/worker_pool.h"

namespace wafersim {

// Thrown by the watchdog when wavelets are buffered but nothing moved for sim.watchdog_cycles.
class DeadlockError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown at the end of a cycle in which an agent (a PE's core) reported a program error.
class PeFaultError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Fabric-wide counters. Invariant after every cycle: injected + multicast_copies = delivered + in_flight.
struct FabricTotals {
  uint64_t cycles = 0;
  uint64_t injected = 0;
  uint64_t delivered = 0;
  uint64_t in_flight = 0;
  uint64_t multicast_copies = 0;
  uint64_t forwarded = 0;  // link and ramp transfers out of routers
};

// The fabric is plain C++; hw/wafer.h wraps it in an sc_module. Routers exist only where a
// route or an agent was placed, so a full-size wafer with a few flows costs little memory, and
// each cycle visits only routers with work.
//
//   Fabric f(cfg);
//   f.set_route(3, 0, /*color=*/1, ColorRoute::simple(port_bit(kRamp), port_bit(kEast)));
//   ...
//   f.run(1000);  // throws ConfigError for bad routes, DeadlockError when stuck
class Fabric {
 public:
  explicit Fabric(const HwConfig& cfg);
  ~Fabric();

  const HwConfig& config() const { return m_cfg; }
  int width() const { return m_cfg.fabric.width; }
  int height() const { return m_cfg.fabric.height; }
  bool contains(int x, int y) const { return x >= 0 && y >= 0 && x < width() && y < height(); }
  static std::string pe_name(int x, int y);  // "wafer.pe_X_Y"

  // Set-up, before the first cycle. Routes and agents are checked by finalize().
  void set_route(int x, int y, int color, const ColorRoute& route);
  void attach_agent(int x, int y, std::unique_ptr<PeAgent> agent);
  void finalize();  // throws ConfigError naming the first bad route; step() calls it if needed
  // Before finalize(): the owner reads no per-router port counters, peaks or traces, so lines of
  // routers that only pass wavelets straight on may be crossed in one step (ExpressRun, when
  // router.express is on). Arrivals, credits, stalls, totals and results stay as without it.
  void allow_express() { m_express_allowed = true; }
  // Before finalize(): the owner reads routers only through this class between cycles (routers(),
  // router(), totals(), color_counters(), ...), never their traces, so the fabric may step them
  // with the vector engine (hw/vector_fabric.h) when router.vector is on and the engine takes
  // this fabric (VectorFabric::supported). Results and counters are the same either way.
  void allow_vector() { m_vector_allowed = true; }
  bool vector_engine() const { return m_vector != nullptr; }
  size_t express_lines() const { return m_express.size(); }  // one per line and direction

  Router* router(int x, int y) {
    sync_vector();
    return m_routers[index(x, y)].get();
  }
  const Router* router(int x, int y) const {
    sync_vector();
    return m_routers[index(x, y)].get();
  }
  PeAgent* agent(int x, int y) const;
  template <typename T>
  T* agent_as(int x, int y) const { return dynamic_cast<T*>(agent(x, y)); }

  // Edge I/O: channels are numbered north to south on each edge (side kEast or kWest).
  int channels_per_edge() const { return static_cast<int>(m_channel_rows.size()); }
  const std::vector<int>& channel_rows() const { return m_channel_rows; }
  EdgeChannel* channel(int side, int index);
  EdgeChannel* channel_at_row(int side, int row);  // nullptr when the row has none

  // The cycle loop.
  void step();
  void run(uint64_t cycles);
  uint64_t cycle() const { return m_cycle; }  // cycles completed so far
  FabricTotals totals() const;
  uint64_t in_flight() const;  // totals().in_flight without the walk over every router
  // Wavelets the fabric has handed to I/O channels so far (a host polling its channels can skip
  // them while this does not change and none holds anything).
  uint64_t channel_deliveries() const { return m_channel_deliveries; }
  std::vector<ColorCounters> color_counters() const;  // per color, summed over the fabric
  uint64_t active_routers() const;  // routers that step in the next cycle
  void reset_stats();  // warm-up: port/color counters and peaks restart, state and totals stay
  void settle_agents();  // agents' own statistics up to date with the cycles completed (PeAgent::settle)
  uint64_t stats_from_cycle() const { return m_stats_from; }

  // Host side: make a router visit the next cycle (after injecting from outside the loop).
  void wake(Router* r);
  // Wakes the channel's edge router; throws ConfigError for an unrouted color. False before
  // finalize (routes may still change).
  bool wake_edge(const EdgeChannel& ch, int color);

  // All routers that exist, in id order (for stats and traces).
  std::vector<const Router*> routers() const;
  // After finalize(): thread t of sim.threads T steps the routers of rows
  // [stripes()[t], stripes()[t + 1]) (T + 1 entries).
  const std::vector<int>& stripes() const { return m_stripes; }

 private:
  size_t index(int x, int y) const { return static_cast<size_t>(y) * width() + x; }
  Router& ensure_router(int x, int y);
  void validate_routes() const;
  void end_cycle(uint64_t now);
  std::string describe_stuck() const;
  std::string describe_faults() const;  // "wafer.pe_X_Y: message" per faulted agent
  void step_phase(int t, uint64_t now);
  void mark_between(uint64_t cycle, const Router* r);  // outside the visits: r steps in `cycle`
  void build_express();
  // With the vector engine: its counters into the routers and the per-thread totals (once per
  // cycle, when something reads them).
  void sync_vector() const {
    if (m_vector && m_synced_at != m_cycle) sync_vector_now();
  }
  void sync_vector_now() const;
  std::vector<int> stripe_rows(int threads) const;
  template <typename F>
  void collect(int t, uint64_t now, F&& f);

  const HwConfig m_cfg;
  std::vector<std::unique_ptr<Router>> m_routers;  // W*H slots, null where nothing is routed
  std::vector<Router*> m_by_bit;     // routers by wake-set bit (word * 64 + bit; null: padding)
  std::vector<int> m_stripes;        // per owner thread, its first row (and one past the last)
  std::vector<size_t> m_first_word;  // per owner thread, its first wake-set word (and one past the last)
  std::vector<std::unique_ptr<PeAgent>> m_agents;
  std::vector<int> m_channel_rows;
  std::vector<std::unique_ptr<EdgeChannel>> m_channels[kNumLinkPorts];  // by side
  bool m_finalized = false;
  bool m_vector_allowed = false;
  std::unique_ptr<VectorFabric> m_vector;  // steps the routers instead of their own visits
  mutable uint64_t m_synced_at = ~uint64_t{0};
  uint64_t m_cycle = 0;
  uint64_t m_last_visits = 0;  // routers stepped in the last cycle (step's choice of threads)
  uint64_t m_idle_cycles = 0;  // consecutive cycles with wavelets buffered and nothing moving (the watchdog's count)
  uint64_t m_channel_deliveries = 0;  // wavelets handed to I/O channels so far (channel_deliveries())
  uint64_t m_stats_from = 0;   // cycle the port/color counters last restarted
  std::atomic<bool> m_fault_flag{false};  // some agent reported a fault this cycle
  std::vector<ThreadCtx> m_ctx;
  std::unique_ptr<WorkerPool> m_pool;
  std::function<void(int)> m_cycle_job;
  uint64_t m_now = 0;
  bool m_express_allowed = false;
  std::vector<std::unique_ptr<ExpressRun>> m_express;
};

}  // namespace wafersim
