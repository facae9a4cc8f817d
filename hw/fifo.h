// Bounded FIFO of wavelets with arrival times, used for router input buffers and agent queues.
#pragma once

#include <cstdint>

namespace wafersim {

// A buffered wavelet: its payload and control bit plus the first cycle it may leave the buffer
// (arrival cycle + link latency). The color is implied by the buffer that holds it.
struct FifoEntry {
  uint64_t ready = 0;
  uint32_t payload = 0;
  bool ctrl = false;
};

// Ring buffer over storage owned elsewhere (one pool per router keeps a PE's buffers together).
// Only the PE that owns it reads or writes it during commit; neighbours read size() in evaluate.
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
