// The cluster around the wafers as the compiler and the trainer see it: MemoryX, SwarmX, the
// edge bridges and the input workers, their configuration, and the host side's pace in the
// wafer's units, from each model's own delay formula (MemoryX::transfer_ns, SwarmX::tree_ns,
// EdgeBridge::link_ns), so the compile report's estimate and the simulated models agree by
// construction.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <systemc>

#include "compiler/kernel_graph.h"
#include "compiler/ws_plan.h"
#include "tlm/dataset.h"
#include "tlm/edge_bridge.h"
#include "tlm/input_stream.h"
#include "tlm/memoryx.h"
#include "tlm/swarmx.h"
#include "tlm/ws_trainer.h"

namespace wafersim::tlm {

struct ClusterConfig {
  MemoryXConfig memx;
  SwarmXConfig swarmx;            // swarmx.systems: the data-parallel systems
  EdgeBridgeConfig bridge;
  int input_workers = 4;          // per system
  double worker_gbps = 100;       // each worker's stream
  double slow_worker_gbps = 0;    // worker 0 this slow instead (0: none)
  bool prefetch = true;           // request the next pass while this one streams
  uint64_t quantum_cycles = 1000; // the global quantum, in clock periods
  int threads = 1;                // host threads stepping the systems' wafers
};

// The cluster as one SystemC module: MemoryX, SwarmX, the trainer (the chief, every system's
// wafer and its bridge port) and each system's input streams, bound here, with the TLM global
// quantum set here once:
//
//   trainer.to_swarmx ─► swarmx.from_memory ─► swarmx.to_systems ─► trainer.port(i).weights_in
//   trainer.port(i).grads_out ─► swarmx.from_systems ─► swarmx.to_memory ─► memoryx.socket
//   input stream (i, w).socket ─► trainer.port(i).inputs_in
class Cluster : public sc_core::sc_module {
 public:
  Cluster(sc_core::sc_module_name name, const MemoryXConfig& memx, const SwarmXConfig& swarmx, const WsHostLinks& links,
          const HwConfig& hw, const compiler::KernelGraph& g, const compiler::WsCompiled& c, const Dataset& data,
          const Normalize& norm, uint64_t seed, long long first_step);
  ~Cluster() override;
  MemoryX& memoryx() { return *m_memx; }
  SwarmX& swarmx() { return *m_swarmx; }
  WsTrainer& trainer() { return *m_trainer; }

 private:
  std::unique_ptr<MemoryX> m_memx;
  std::unique_ptr<SwarmX> m_swarmx;
  std::unique_ptr<WsTrainer> m_trainer;
  std::vector<std::unique_ptr<InputStream>> m_streams;  // W per system; they use the trainer's state
};

// The links as WsTrainer uses them, in wavelets (4 bytes) per cycle at `clock_mhz`.
WsHostLinks ws_host_links(const ClusterConfig& c, double clock_mhz);

// The estimate's view of the host side for model `g`: the weights' rate (the slowest of MemoryX,
// SwarmX and the bridge), a request's latency (MemoryX, SwarmX's levels, the bridge), MemoryX's
// READ rate, and the gradients' reduction after a minibatch's last result (each layer's dW and
// db and the loss WRITten in turn through SwarmX's tree into MemoryX), in cycles.
compiler::WsHostPace ws_host_pace(const ClusterConfig& c, double clock_mhz, const compiler::KernelGraph& g);

}  // namespace wafersim::tlm
