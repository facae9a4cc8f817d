#include "hw/wafer.h"

#include "hw/pe_core.h"

namespace wafersim {

void sc_trace(sc_core::sc_trace_file* tf, const Wavelet& w, const std::string& name) {
  sc_core::sc_trace(tf, w.payload, name + ".payload", 32);
  sc_core::sc_trace(tf, w.color, name + ".color", 5);
  sc_core::sc_trace(tf, w.ctrl, name + ".ctrl");
}

void sc_trace(sc_core::sc_trace_file* tf, const TracedWavelet& w, const std::string& name) {
  sc_trace(tf, w.w, name);
  sc_core::sc_trace(tf, w.valid, name + ".valid");
}

PeProbe::PeProbe(sc_core::sc_module_name name, int x, int y) : sc_module(name), m_x(x), m_y(y) {}

void PeProbe::sample(const Fabric& fabric, uint64_t now) {
  const Router* r = fabric.router(m_x, m_y);
  m_occupancy = r ? r->occupancy() : 0;
  for (int p = 0; p < kNumPorts; ++p) {
    m_out[p].valid = r && r->sent_this_cycle(p, now, &m_out[p].w);
  }
  if (auto* core = fabric.agent_as<PeCore>(m_x, m_y)) {
    core->settle(now + 1);  // a core that skipped this cycle: its busy or stall shows in it
    m_task = core->running_task();
    const CoreStats& st = core->stats();
    m_busy = st.busy != m_prev_busy;
    m_stall = st.stall != m_prev_stall;
    m_prev_busy = st.busy;
    m_prev_stall = st.stall;
    for (int q = 0; q < 8; ++q) m_inq[q] = static_cast<uint32_t>(core->input_queue_count(q));
    for (int q = 0; q < 6; ++q) m_outq[q] = static_cast<uint32_t>(core->output_queue_count(q));
  }
}

void PeProbe::trace(sc_core::sc_trace_file* tf, const Fabric& fabric) const {
  const std::string base = name();
  for (int p = 0; p < kNumPorts; ++p) sc_trace(tf, m_out[p], base + ".out_" + port_name(p));
  sc_core::sc_trace(tf, m_occupancy, base + ".buffered");
  if (!fabric.agent_as<PeCore>(m_x, m_y)) return;
  sc_core::sc_trace(tf, m_task, base + ".core.task");
  sc_core::sc_trace(tf, m_busy, base + ".core.busy");
  sc_core::sc_trace(tf, m_stall, base + ".core.stall");
  for (int q = 0; q < 8; ++q) sc_core::sc_trace(tf, m_inq[q], base + ".core.inq" + std::to_string(q), 8);
  for (int q = 0; q < 6; ++q) sc_core::sc_trace(tf, m_outq[q], base + ".core.outq" + std::to_string(q), 8);
}

void make_probes(sc_core::sc_vector<PeProbe>& probes, const Region& reg) {
  const size_t n = static_cast<size_t>(reg.width()) * reg.height();
  probes.init(n, [reg](const char*, size_t i) {
    const int x = reg.x0 + static_cast<int>(i % reg.width()), y = reg.y0 + static_cast<int>(i / reg.width());
    return new PeProbe(("pe_" + std::to_string(x) + "_" + std::to_string(y)).c_str(), x, y);
  });
}

FabricProbes::FabricProbes(sc_core::sc_module_name name, const Region& region) : sc_module(name), m_probes("probe") {
  make_probes(m_probes, region);
}

void FabricProbes::trace(sc_core::sc_trace_file* tf, const Fabric& fabric) {
  sc_core::sc_trace(tf, m_traced_cycle, std::string(name()) + ".cycle");
  for (const PeProbe& p : m_probes) p.trace(tf, fabric);
}

void FabricProbes::sample(const Fabric& fabric, uint64_t now) {
  m_traced_cycle = now;
  for (PeProbe& p : m_probes) p.sample(fabric, now);
}

Wafer::Wafer(sc_core::sc_module_name name, Fabric& fabric, uint64_t cycles, const Region* trace_region)
    : sc_module(name), clk("clk"), m_fabric(fabric), m_stop_at(fabric.cycle() + cycles), m_probes("probe") {
  // Stopping at the requested cycle is the normal end of a run, not news.
  sc_core::sc_report_handler::set_actions("/OSCI/SystemC", sc_core::SC_INFO, sc_core::SC_DO_NOTHING);
  if (trace_region) make_probes(m_probes, *trace_region);
  SC_HAS_PROCESS(Wafer);
  SC_METHOD(tick);
  sensitive << clk.pos();
  dont_initialize();
}

void Wafer::trace(sc_core::sc_trace_file* tf) {
  sc_core::sc_trace(tf, m_traced_cycle, std::string(name()) + ".cycle");
  for (const PeProbe& p : m_probes) p.trace(tf, m_fabric);
}

void Wafer::tick() {
  if (m_fabric.cycle() >= m_stop_at) {
    sc_core::sc_stop();
    return;
  }
  const uint64_t now = m_fabric.cycle();
  try {
    m_fabric.step();
    if (m_on_cycle) m_on_cycle(m_fabric);
  } catch (const DeadlockError& e) {
    m_error = e.what();
    m_deadlock = true;
    sc_core::sc_stop();
    return;
  } catch (const std::exception& e) {
    m_error = e.what();
    sc_core::sc_stop();
    return;
  }
  m_traced_cycle = now;
  for (PeProbe& p : m_probes) p.sample(m_fabric, now);
  // Stop on the next edge, not this one: the trace file records this cycle's values first.
}

}  // namespace wafersim
