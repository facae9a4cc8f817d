#include "tlm/cluster.h"

#include <algorithm>

namespace wafersim::tlm {

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
  // After the last result each runner WRITEs every layer's dW and db and the loss, one after the
  // other: each crosses the tree, then MemoryX.
  for (const auto& d : g.layers) {
    for (double bytes : {4.0 * d.in * d.out, 4.0 * d.out}) {
      const auto b = static_cast<uint64_t>(bytes);
      p.reduce_cycles += (SwarmX::tree_ns(c.swarmx, b) + MemoryX::transfer_ns(c.memx, b)) * cycles_per_ns;
    }
  }
  p.reduce_cycles += (SwarmX::tree_ns(c.swarmx, 0) + MemoryX::transfer_ns(c.memx, 0)) * cycles_per_ns;  // the loss
  p.prefetch = c.prefetch;
  return p;
}

}  // namespace wafersim::tlm
