// The wafer as a SystemC module: one clocked process drives the whole fabric; traced PEs get
// sc_modules of their own so their signals sit under wafer.pe_X_Y in GTKWave.
#pragma once

#include <functional>
#include <string>

#include <systemc>

#include "hw/fabric.h"
#include "hw/traffic_gen.h"

namespace wafersim {

// What one output link carried in the current cycle, as GTKWave shows it.
struct TracedWavelet {
  Wavelet w;
  bool valid = false;
};

void sc_trace(sc_core::sc_trace_file* tf, const Wavelet& w, const std::string& name);
void sc_trace(sc_core::sc_trace_file* tf, const TracedWavelet& w, const std::string& name);

// Trace probe of one PE: what left on each port this cycle and how full its buffers are; with
// a core, also its running task (-1 idle), whether it made progress or stalled this cycle, and
// the occupancy of its 8 input and 6 output queues.
class PeProbe : public sc_core::sc_module {
 public:
  using sc_core::sc_module::trace;  // sc_object's trace(tf) stays visible beside ours
  PeProbe(sc_core::sc_module_name name, int x, int y);
  void sample(const Fabric& fabric, uint64_t now);
  void trace(sc_core::sc_trace_file* tf, const Fabric& fabric) const;
  int x() const { return m_x; }
  int y() const { return m_y; }

 private:
  int m_x, m_y;
  TracedWavelet m_out[kNumPorts];
  uint32_t m_occupancy = 0;
  int m_task = -1;
  bool m_busy = false, m_stall = false;
  uint64_t m_prev_busy = 0, m_prev_stall = 0;
  uint32_t m_inq[8] = {}, m_outq[6] = {};
};

// Probes of a region's PEs, named pe_X_Y, as children of the module under construction.
void make_probes(sc_core::sc_vector<PeProbe>& probes, const Region& region);

// The probes of a fabric that another process steps (a weight-streaming runner, which samples
// them after each cycle and then waits one clock period): the signals of Wafer's probes and the
// cycle, under this module's name (wafer_0.pe_X_Y, ...).
class FabricProbes : public sc_core::sc_module {
 public:
  using sc_core::sc_module::trace;  // sc_object's trace(tf) stays visible beside ours
  FabricProbes(sc_core::sc_module_name name, const Region& region);
  void trace(sc_core::sc_trace_file* tf, const Fabric& fabric);
  void sample(const Fabric& fabric, uint64_t now);

 private:
  sc_core::sc_vector<PeProbe> m_probes;
  uint64_t m_traced_cycle = 0;
};

// Not a process per PE (see docs/fabric.md): one SC_METHOD on the clock steps the plain-C++
// fabric, so a 757 x 996 wafer costs what its active PEs cost.
//
//   sc_clock clk("clk", sc_time(1176, SC_PS));
//   Wafer wafer("wafer", fabric, cycles, trace_region_or_nullptr);
//   wafer.clk(clk);
//   sc_start();                       // returns after `cycles` cycles or on an error
//   if (!wafer.error().empty()) ...
class Wafer : public sc_core::sc_module {
 public:
  using sc_core::sc_module::trace;  // sc_object's trace(tf) stays visible beside ours
  sc_core::sc_in<bool> clk;

  Wafer(sc_core::sc_module_name name, Fabric& fabric, uint64_t cycles, const Region* trace_region);
  void trace(sc_core::sc_trace_file* tf);
  // Called after every cycle, e.g. host I/O or periodic stats.
  void on_cycle(std::function<void(Fabric&)> fn) { m_on_cycle = std::move(fn); }
  const std::string& error() const { return m_error; }
  bool deadlocked() const { return m_deadlock; }

 private:
  void tick();

  Fabric& m_fabric;
  uint64_t m_stop_at;
  sc_core::sc_vector<PeProbe> m_probes;
  uint64_t m_traced_cycle = 0;
  std::function<void(Fabric&)> m_on_cycle;
  std::string m_error;
  bool m_deadlock = false;
};

}  // namespace wafersim
