#include "tlm/cluster.h"

#include <algorithm>

#include <tlm_utils/tlm_quantumkeeper.h>

#include "hw/config.h"

namespace wafersim::tlm {

Cluster::Cluster(sc_core::sc_module_name name, const MemoryXConfig& memx, const SwarmXConfig& swarmx,
                 const WsHostLinks& links, const HwConfig& hw, const compiler::KernelGraph& g,
                 const compiler::WsCompiled& c, const Dataset& data, const Normalize& norm, uint64_t seed,
                 long long first_step)
    : sc_module(name) {
  const compiler::WsPlan& p = c.plan;
  if (swarmx.systems != p.systems) throw ConfigError("swarmx.systems must equal the plan's systems");
  tlm_utils::tlm_quantumkeeper::set_global_quantum(sc_core::sc_time(1e3 / hw.fabric.clock_mhz, sc_core::SC_NS) *
                                                   static_cast<double>(links.quantum_cycles));
  m_memx = std::make_unique<MemoryX>("memoryx", memx);
  m_swarmx = std::make_unique<SwarmX>("swarmx", swarmx);
  m_trainer = std::make_unique<WsTrainer>("trainer", hw, g, c, data, norm, seed, first_step, *m_memx, links);
  m_trainer->to_swarmx.bind(m_swarmx->from_memory);
  m_swarmx->to_memory.bind(m_memx->socket);
  const int workers = std::max(1, links.workers);
  for (int i = 0; i < p.systems; ++i) {
    WsTrainer::Port& port = m_trainer->port(i);
    m_swarmx->to_systems.bind(port.weights_in);
    port.grads_out.bind(m_swarmx->from_systems);
    for (int w = 0; w < workers; ++w) {
      InputStreamConfig ic;
      ic.system = i;
      ic.index = w;
      ic.workers = workers;
      ic.shard = p.shard;
      ic.batch = p.batch;
      ic.gbps = w == 0 && links.slow_worker_gbps > 0 ? links.slow_worker_gbps : links.worker_gbps;
      m_streams.push_back(std::make_unique<InputStream>(("worker" + std::to_string(i) + "_" + std::to_string(w)).c_str(),
                                                        m_trainer->data(), m_trainer->data_order(), ic,
                                                        m_trainer->minibatch_start(), m_trainer->steps_ref()));
      m_streams.back()->socket.bind(port.inputs_in);
      m_trainer->add_input_stream(*m_streams.back());
    }
  }
}

Cluster::~Cluster() = default;

WsHostLinks ws_host_links(const ClusterConfig& c, double clock_mhz) {
  const double f = clock_mhz * 1e6;
  auto per_cycle = [&](double gbps) { return gbps * 1e9 / 32.0 / f; };
  WsHostLinks l;
  l.weights_per_cycle = per_cycle(std::min({c.memx.bandwidth_gbps, c.swarmx.link_gbps, c.bridge.link_gbps}));
  l.inputs_per_cycle = per_cycle(c.bridge.link_gbps);
  l.workers = c.input_workers;
  l.worker_gbps = c.worker_gbps;
  l.slow_worker_gbps = c.slow_worker_gbps;
  l.grads_per_cycle = per_cycle(std::min(c.swarmx.link_gbps, c.bridge.link_gbps));
  l.bridge_latency_ns = c.bridge.latency_ns;
  l.prefetch = c.prefetch;
  l.quantum_cycles = c.quantum_cycles;
  l.threads = c.threads;
  return l;
}

compiler::WsHostPace ws_host_pace(const ClusterConfig& c, double clock_mhz, const compiler::KernelGraph& g) {
  compiler::WsHostPace p;
  const double cycles_per_ns = 1e-3 * clock_mhz;
  p.weights_per_cycle = ws_host_links(c, clock_mhz).weights_per_cycle;
  p.read_per_cycle = c.memx.bandwidth_gbps * 1e9 / 32.0 / (clock_mhz * 1e6);
  p.latency_cycles =
      (MemoryX::transfer_ns(c.memx, 0) + SwarmX::tree_ns(c.swarmx, 0) + EdgeBridge::link_ns(c.bridge, 0)) * cycles_per_ns;
  // Each layer's gradients stream into SwarmX as they leave the wafer (WsTrainer::runner, at no
  // more than the host link's rate: WsHostLinks::grads_per_cycle); after the last result only the
  // first layer's sums are still on their way: the tree's and MemoryX's latencies
  // (tlm/streamed.h).
  p.reduce_cycles = (SwarmX::tree_ns(c.swarmx, 0) + MemoryX::transfer_ns(c.memx, 0)) * cycles_per_ns;
  // The input workers stream samples side by side, each every W-th in order, so the stream
  // moves at W samples per the slowest worker's sample time, and the bridge caps it.
  const double words = static_cast<double>(g.layers.empty() ? 0 : g.layers.front().in) + 1;
  const double slowest = c.slow_worker_gbps > 0 ? std::min(c.worker_gbps, c.slow_worker_gbps) : c.worker_gbps;
  const WsHostLinks links = ws_host_links(c, clock_mhz);
  p.sample_cycles = std::max(words * 32.0 / slowest * cycles_per_ns / std::max(1, c.input_workers), words / links.inputs_per_cycle);
  p.grads_per_cycle = links.grads_per_cycle;
  p.prefetch = c.prefetch;
  return p;
}

}  // namespace wafersim::tlm
