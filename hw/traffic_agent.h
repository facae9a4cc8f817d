// A synthetic traffic endpoint at a PE's ramp: sends flows at a rate, drains what arrives.
#pragma once

#include <cstdint>
#include <vector>

#include "hw/fifo.h"
#include "hw/pe_agent.h"

namespace wafersim {

// Payload of generated wavelets: the source PE id and a per-(source, color) sequence number,
// so a scoreboard can check order and completeness per flow.
constexpr int kSeqBits = 12;
constexpr uint32_t make_payload(uint32_t src_pe, uint32_t seq) {
  return (src_pe << kSeqBits) | (seq & ((1u << kSeqBits) - 1));
}
constexpr uint32_t payload_source(uint32_t p) { return p >> kSeqBits; }
constexpr uint32_t payload_seq(uint32_t p) { return p & ((1u << kSeqBits) - 1); }

// Deterministic per-(seed, pe, cycle, salt) uniform draw in [0, 1): independent of visiting order
// and thread count, unlike a shared generator.
double hash_uniform(uint64_t seed, uint64_t pe, uint64_t cycle, uint64_t salt);
// The 64 bits behind it: hash_uniform is (hash_bits(...) >> 11) / 2^53.
uint64_t hash_bits(uint64_t seed, uint64_t pe, uint64_t cycle, uint64_t salt);

struct TrafficFlow {
  int color = 0;
  double rate = 1.0;    // wavelets per cycle offered (at most 1: the ramp carries one per cycle)
  uint64_t count = 0;   // wavelets to send; 0 = unbounded
  uint32_t ctrl_every = 0;  // every n-th wavelet is a control wavelet (0 = never)
};

struct TrafficAgentOptions {
  int queue_depth = 4;        // receive buffer per color at the ramp
  double drain_prob = 1.0;    // chance per cycle that the endpoint takes an arrival (backpressure)
  double stall_prob = 0.0;    // chance per cycle that the endpoint holds back its sends
  uint32_t never_drain = 0;   // colors this endpoint never takes (a stuck receiver)
  uint64_t seed = 1;
  bool record = false;        // keep every arrival (tests' scoreboards)
};

//   auto a = std::make_unique<TrafficAgent>(pe_id, opts);
//   a->add_flow({/*color=*/3, /*rate=*/0.5});
//   a->add_receive(4);
//   fabric.attach_agent(x, y, std::move(a));
class TrafficAgent : public PeAgent {
 public:
  struct Arrival {
    uint64_t cycle;  // cycle the endpoint took it
    Wavelet w;
  };

  TrafficAgent(uint32_t pe_id, const TrafficAgentOptions& opts);

  void add_flow(const TrafficFlow& f);
  void add_receive(int color);

  uint64_t sent() const { return m_sent; }
  const std::vector<Arrival>& log() const { return m_log; }

  uint32_t full_colors() const override { return m_full; }
  uint32_t send_colors() const override { return m_send_colors; }
  uint32_t receive_colors() const override { return m_receive_colors; }
  uint32_t evaluate(uint64_t now, uint32_t ramp_full, Wavelet* out) override;
  uint64_t deliver(const Wavelet& w, uint64_t ready) override;
  bool has_work() const override { return m_unfinished_flows > 0 || m_buffered > 0; }
  uint64_t consumed() const override { return m_consumed; }

 private:
  friend class VectorFabric;  // runs endpoints like this one itself, 16 at a time (its state here is then written back)
  static constexpr uint32_t kOne = 1u << 16;  // credits in 16.16 fixed point
  struct Flow {
    TrafficFlow spec;
    uint32_t rate = kOne;  // spec.rate in 16.16
    uint32_t credit = 0;
    uint64_t sent = 0;
    uint32_t seq = 0;
  };

  const uint32_t m_pe;
  const TrafficAgentOptions m_opts;
  std::vector<Flow> m_flows;
  size_t m_rr_flow = 0;
  int m_unfinished_flows = 0;
  int8_t m_queue_of[32];
  std::vector<Fifo> m_queues;
  std::vector<FifoEntry> m_storage;  // queue_depth slots per queue
  std::vector<int> m_queue_color;
  uint32_t m_nonempty_q = 0;   // receive queues holding something (bit = queue index)
  int m_rr_queue = 0;
  bool m_unit_rates = true;    // every flow offers 1 per cycle: credits need no update
  uint32_t m_full = ~0u;  // colors without a receive queue are never accepted
  uint32_t m_send_colors = 0, m_receive_colors = 0;
  uint64_t m_buffered = 0, m_sent = 0, m_consumed = 0;
  std::vector<Arrival> m_log;
};

}  // namespace wafersim
