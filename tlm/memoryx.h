// MemoryX: the weight store and optimizer of weight-streaming training, as a loosely timed
// TLM-2.0 target. The wafer never holds the whole model: it READs one layer's weights at a time
// and WRITEs the summed gradients back; the host then calls step(), which runs the optimizer in
// fp32 on MemoryX's CPUs (docs: ../shared/reference/wse-facts.md, "Host I/O, MemoryX, SwarmX").
//
// Address space: the parameter tensors lie back to back from address 0, each element one fp32
// word: byte address = base(id) + 4 * index. A transaction covers whole words of one tensor.
//   READ  [a, a+len): the tensor's current weights (fp32, host byte order).
//   WRITE [a, a+len): fp32 gradients ADDED into the tensor's gradient accumulator, element-wise
//                     fp32 adds in address order (so partial sums from several WRITEs, e.g. of
//                     SwarmX's reduction tree, accumulate); step() consumes and zeroes it.
// Errors (the payload's response status, never an exception; last_error() says why):
//   TLM_COMMAND_ERROR_RESPONSE      a command other than READ or WRITE
//   TLM_BYTE_ENABLE_ERROR_RESPONSE  byte enables (not supported)
//   TLM_BURST_ERROR_RESPONSE        length 0 or not a multiple of 4; streaming width < length
//   TLM_ADDRESS_ERROR_RESPONSE      address not word aligned, beyond the last tensor, or a range
//                                   that runs from one tensor into the next
//   TLM_GENERIC_ERROR_RESPONSE      no data pointer
// Timing (annotated, b_transport never waits): every transaction adds latency_ns to the
// caller's delay; one that moves data adds len * 8 / bandwidth_gbps ns more (1200 Gb/s, a CS-2's
// 12 x 100 GbE). Failed transactions cost the latency only. step() takes no simulated time:
// the optimizer runs on MemoryX's host CPUs, and stats() counts its work for the caller to cost.
// Capacity counts weights and optimizer state (the gradient accumulator is transient).
//
// Optimizers (chosen by name, MemoryXConfig::optimizer) follow torch.optim as PyTorch 1.13's CPU
// kernels round it, operation for operation, so a run matches it bit for bit (tested against
// 1.13.1; later versions compute Adam's m with lerp_ and may differ in the last bit). The exact
// fp32 order is in memoryx.cc. Usage:
//   MemoryX mx("memoryx", cfg);
//   const int w = mx.add_tensor("fc1.weight", initial);   // from the host, at any time
//   initiator.socket.bind(mx.socket);
//   ... READ [mx.base(w), mx.base(w) + 4 * mx.size(w)), WRITE gradients to the same range ...
//   mx.step();                                            // optimizer, then zero accumulators
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <systemc>
#include <tlm>
#include <tlm_utils/simple_target_socket.h>

namespace wafersim::tlm {

struct MemoryXConfig {
  double capacity_gb = 4096;     // 1 GB = 1e9 B; 4 TB, the smallest published MemoryX
  double bandwidth_gbps = 1200;  // matches a CS-2's 12 x 100 GbE
  double latency_ns = 2000;      // per transaction (not published: grade U)
  std::string optimizer = "sgd";  // sgd (with momentum) or adam
  float lr = 0.01f, momentum = 0.9f, beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  void validate() const;  // throws ConfigError
};

// One tensor's checkpointable state. Vectors the optimizer does not use stay empty.
struct TensorState {
  std::vector<float> weights;
  std::vector<float> momentum_buffer;  // sgd: PyTorch's state['momentum_buffer'] (set once step > 0)
  std::vector<float> exp_avg;          // adam: m
  std::vector<float> exp_avg_sq;       // adam: v
  uint64_t step = 0;                   // optimizer steps this tensor has taken (PyTorch's 'step')
};

struct MemoryXOptimizer;  // an entry of the optimizer registry (memoryx.cc)

struct MemoryXStats {
  uint64_t bytes_read = 0, bytes_written = 0;
  uint64_t transactions = 0;      // successful READs and WRITEs
  uint64_t errors = 0;            // transactions answered with an error response
  uint64_t optimizer_steps = 0;   // step() calls
  uint64_t elements_updated = 0;  // parameters the optimizer updated, over all steps
};

class MemoryX : public sc_core::sc_module {
 public:
  tlm_utils::simple_target_socket<MemoryX> socket;

  MemoryX(sc_core::sc_module_name name, const MemoryXConfig& cfg);  // validates cfg

  // Registers a parameter tensor (weights = init, optimizer state zero) and returns its id.
  // Throws ConfigError for an empty tensor, a duplicate name, or when weights + optimizer state
  // of all tensors would exceed the capacity.
  int add_tensor(const std::string& name, std::vector<float> init);
  int tensor_count() const { return static_cast<int>(m_tensors.size()); }
  int find_tensor(const std::string& name) const;  // -1 if absent
  uint64_t base(int id) const;  // byte address of element 0
  size_t size(int id) const;    // elements

  // Host side: one optimizer step over every tensor with its accumulated gradient (zero if
  // nothing was written), then zero the accumulators.
  void step();

  const std::vector<float>& weights(int id) const;
  const std::vector<float>& gradient(int id) const;  // the accumulator since the last step()
  TensorState state(int id) const;                   // for checkpoints
  // Restores a checkpoint (resume): sizes must match the tensor and the optimizer's state
  // vectors, others must be empty. The gradient accumulator is zeroed.
  void set_state(int id, TensorState s);

  const MemoryXConfig& config() const { return m_cfg; }
  uint64_t capacity_bytes() const { return m_capacity; }
  uint64_t bytes_used() const { return m_used; }   // weights + optimizer state
  uint64_t address_end() const { return m_end; }   // one past the last tensor's last byte
  sc_core::sc_time transfer_delay(uint64_t bytes) const;  // latency + bytes over the link
  static double transfer_ns(const MemoryXConfig& cfg, uint64_t bytes);  // the same, without a module

  const MemoryXStats& stats() const { return m_stats; }
  nlohmann::json stats_json() const;
  void reset_stats() { m_stats = {}; }
  const std::string& last_error() const { return m_last_error; }

  void b_transport(::tlm::tlm_generic_payload& trans, sc_core::sc_time& delay);

 private:
  struct Tensor {
    std::string name;
    uint64_t base = 0;
    TensorState s;
    std::vector<float> grad;
  };
  const Tensor& tensor(int id) const;
  ::tlm::tlm_response_status check(const ::tlm::tlm_generic_payload& trans, int* id);

  MemoryXConfig m_cfg;
  const MemoryXOptimizer* m_opt = nullptr;
  uint64_t m_capacity = 0, m_used = 0, m_end = 0;
  std::vector<Tensor> m_tensors;  // in address order
  MemoryXStats m_stats;
  std::string m_last_error;
};

}  // namespace wafersim::tlm
