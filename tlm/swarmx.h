// SwarmX: the broadcast/reduce tree between MemoryX and N CS-2 systems, as a loosely timed
// TLM-2.0 model. In data-parallel weight streaming, MemoryX's weights are broadcast down the tree
// to every system, and the systems' gradients are summed up the tree into one write to MemoryX.
//
// Tree. The N systems are the leaves. Level 1 has ceil(N / f) nodes, node j taking systems
// j*f .. j*f+f-1 (f = fan-out, 2 or 4); level k has ceil(N / f^k) nodes, node j taking nodes
// j*f .. j*f+f-1 of level k-1; the top level has one node, the root, wired to MemoryX.
// depth() = max(1, ceil(log_f N)) levels; nodes() = sum over k = 1..depth of ceil(N / f^k).
// N=1: 1 level, 1 node; N=5 f=4: 2 levels, 3 nodes; N=8 f=2: 3 levels, 7 nodes.
//
// Timing. The nodes stream cut-through at link rate, so B bytes cross the tree in
//   tree_time(B) = depth * node_latency_ns + B * 8 / link_gbps   (ns)
// - Broadcast: a WRITE entering from_memory at t (the caller's time plus its annotated delay)
//   reaches every system at t + tree_time(B): SwarmX calls each system's b_transport in turn
//   with the delay that puts it there. The copies travel in parallel, so the caller's delay
//   comes back as tree_time(B) plus the largest delay any system annotated.
// - Reduce: system i's WRITE of B bytes of fp32 at address A is its contribution; it arrives at
//   the system's time plus annotated delay. When all N contributions for A are in, the sum leaves
//   the root at last_arrival (the latest of those arrivals) + tree_time(B) as one WRITE to
//   MemoryX. Every contributor returns with a delay that puts it at
//   T = last_arrival + tree_time(B) + MemoryX's annotated delay: the early ones block in
//   b_transport (sc_core::wait, so callers must be SC_THREADs) until the sum has been written;
//   the call that completes the set writes it. A loss is just a one-value gradient at an
//   address of its own.
// - Streamed contributions (tlm/streamed.h: every one of the set carries the extension) crossed
//   the links as they were produced, so their time is their last byte's: the sum leaves the root
//   at last_arrival + tree_time(0) and goes to MemoryX with the extension (latency only there).
//
// Summation order (fixed, independent of arrival order). Every node adds its children in index
// order with fp32 additions: acc = child[0]; acc += child[1]; ... So with f=4, N=5 element e of
// the sum is (((g0 + g1) + g2) + g3) + g4, and with f=2, N=4 it is (g0 + g1) + (g2 + g3).
//
// Protocol. System i is the i-th binding of to_systems and of from_systems (same order for
// both); each must be bound exactly `systems` times. Both target sockets serve WRITEs only; a
// READ gets TLM_COMMAND_ERROR_RESPONSE. On from_systems, so does (with its own status) a byte
// enable, a streaming width below the length, a length that is not whole fp32 values, one that
// differs from the first contribution for the address, or a second contribution from one system
// before the sum has left. Each error also raises SC_REPORT_WARNING (type "wafersim/swarmx");
// a rejected call returns at once and is not counted, the others keep waiting for a good one.
// An error response from a system (broadcast) or from MemoryX (sum) is passed back to the
// caller(s), the first one if several systems fail.
// Broadcast copies share the caller's data array (a WRITE target never modifies it).
//
//   SwarmXConfig cfg;  cfg.systems = 4;
//   SwarmX sx("swarmx", cfg);
//   memx_out.bind(sx.from_memory);  sx.to_memory.bind(memx_in);
//   for (auto& s : systems) { sx.to_systems.bind(s.weights_in); s.grads_out.bind(sx.from_systems); }
//   stats(): bytes broadcast and reduced, transactions, busy time (tree_time of each transfer,
//   overlaps counted once, merged in the order the transfers are issued).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <systemc>
#include <tlm>
#include <tlm_utils/multi_passthrough_initiator_socket.h>
#include <tlm_utils/multi_passthrough_target_socket.h>
#include <tlm_utils/simple_initiator_socket.h>
#include <tlm_utils/simple_target_socket.h>

namespace wafersim::tlm {

struct SwarmXConfig {
  int systems = 1;                  // CS-2 systems (leaves)
  int fanout = 4;                   // children per node: 1:4 nodes, or 1:2
  double link_gbps = 1200.0;        // a system's link into the tree: a CS-2's 12 x 100 GbE
  double node_latency_ns = 1000.0;  // per node level, cut-through; not published (grade U)
  void validate() const;            // throws ConfigError
};

struct SwarmXStats {
  uint64_t bytes_broadcast = 0;  // bytes MemoryX wrote into the tree (once per WRITE, not per system)
  uint64_t bytes_reduced = 0;    // bytes of sums the tree wrote to MemoryX
  uint64_t transactions = 0;     // b_transport calls served, on from_memory and from_systems
  uint64_t reductions = 0;       // sums written to MemoryX
  uint64_t errors = 0;           // calls answered with an error response
  sc_core::sc_time busy;         // simulated time the tree was moving data
};

class SwarmX : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<SwarmX> from_memory;
  tlm_utils::multi_passthrough_initiator_socket<SwarmX> to_systems;
  tlm_utils::multi_passthrough_target_socket<SwarmX> from_systems;
  tlm_utils::simple_initiator_socket<SwarmX> to_memory;

  SwarmX(sc_core::sc_module_name name, const SwarmXConfig& cfg);  // validates cfg

  // The tree's shape, also without a module (for reports and tests).
  static int tree_depth(int systems, int fanout);
  static int tree_nodes(int systems, int fanout);
  // The fixed-order sum of parts[0..N) (N = parts.size() systems), element by element, as the
  // tree adds them: out[e] = tree sum of parts[i][e] for e < count.
  static void tree_sum(const std::vector<const float*>& parts, size_t count, int fanout, float* out);
  int depth() const { return m_depth; }
  int nodes() const { return m_nodes; }
  const SwarmXConfig& config() const { return m_cfg; }
  // depth * node_latency + bytes * 8 / link_gbps.
  sc_core::sc_time tree_time(uint64_t bytes) const;
  // The same in ns for a configuration, without a module (the compile report's estimate).
  static double tree_ns(const SwarmXConfig& cfg, uint64_t bytes);

  const SwarmXStats& stats() const { return m_stats; }
  void reset_stats() {
    m_stats = SwarmXStats();
    m_busy_until = sc_core::SC_ZERO_TIME;
  }

 private:
  struct Pending;  // contributions for one address, shared with the callers waiting on it

  void start_of_simulation() override;
  void broadcast(::tlm::tlm_generic_payload& p, sc_core::sc_time& delay);
  void contribute(int id, ::tlm::tlm_generic_payload& p, sc_core::sc_time& delay);
  void reduce(Pending& pending, ::tlm::tlm_generic_payload& p);
  void reject(::tlm::tlm_generic_payload& p, ::tlm::tlm_response_status status, const std::string& why);
  void mark_busy(const sc_core::sc_time& start, const sc_core::sc_time& length);

  const SwarmXConfig m_cfg;
  const int m_depth, m_nodes;
  std::map<uint64_t, std::shared_ptr<Pending>> m_pending;  // by address
  SwarmXStats m_stats;
  sc_core::sc_time m_busy_until;
};

}  // namespace wafersim::tlm
