// Bounded FIFO of wavelets with ready cycles: a TrafficAgent's receive queue per color (routers
// keep their buffers in their own slots, Router::FifoMeta and Router::Slot).
#pragma once

#include <cstdint>

namespace wafersim {

// A buffered wavelet: its payload and control bit plus the first cycle the agent may take it
// (the cycle the router delivered it + router.ramp_latency). The color is implied by the queue.
struct FifoEntry {
  uint64_t ready = 0;
  uint32_t payload = 0;
  bool ctrl = false;
};

// Ring buffer over storage owned elsewhere (the agent's one vector, queue_depth slots per queue).
// Only its agent touches it: deliver() pushes, evaluate() pops; the router learns that a queue
// is full from the agent's full_colors(), never from the queue.
class Fifo {
 public:
  Fifo() = default;
  Fifo(FifoEntry* slots, uint16_t depth) : m_slots(slots), m_depth(depth) {}

  bool empty() const { return m_count == 0; }
  bool full() const { return m_count == m_depth; }
  uint16_t size() const { return m_count; }
  uint16_t depth() const { return m_depth; }
  const FifoEntry& front() const { return m_slots[m_head]; }

  void push(const FifoEntry& e) {
    uint32_t tail = m_head + m_count;
    if (tail >= m_depth) tail -= m_depth;
    m_slots[tail] = e;
    ++m_count;
  }
  void pop() {
    if (++m_head == m_depth) m_head = 0;
    --m_count;
  }

 private:
  FifoEntry* m_slots = nullptr;
  uint16_t m_depth = 0;
  uint16_t m_head = 0;
  uint16_t m_count = 0;
};

}  // namespace wafersim
