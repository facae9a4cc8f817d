// Edge I/O channels: where the host injects wavelets into the fabric and drains them from it.
#pragma once

#include <atomic>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "hw/wavelet.h"

namespace wafersim {

class Fabric;

// A FIFO of fixed capacity in one block (the channel's queues never hold more than its depth):
// front() and empty() read the object and its block, not a deque's map.
template <typename T>
class BoundedQueue {
 public:
  explicit BoundedQueue(size_t capacity) : m_buf(capacity ? capacity : 1) {}
  bool empty() const { return m_count == 0; }
  size_t size() const { return m_count; }
  const T& front() const { return m_buf[m_head]; }
  void push_back(const T& v) {
    if (m_count == m_buf.size()) throw std::logic_error("edge channel queue overflow");  // callers check first
    size_t tail = m_head + m_count;
    if (tail >= m_buf.size()) tail -= m_buf.size();
    m_buf[tail] = v;
    ++m_count;
  }
  void pop_front() {
    if (++m_head == m_buf.size()) m_head = 0;
    --m_count;
  }

 private:
  std::vector<T> m_buf;
  size_t m_head = 0, m_count = 0;
};

// One host channel on the East or West edge of the fabric, attached to the edge router of its row.
// Both directions are rate-limited on the fabric side (io.channel_gbps at the fabric clock) and
// buffered on the host side (io.queue_depth). Backpressure reaches the host: try_inject() fails
// while the inject queue is full, and the queue only drains as fast as the edge router accepts.
//
//   EdgeChannel* ch = fabric.channel(kEast, 0);
//   if (!ch->try_inject({payload, color, false})) { /* fabric backed up: retry next cycle */ }
//   Wavelet w; while (ch->try_receive(&w)) consume(w);
class alignas(64) EdgeChannel {
 public:
  EdgeChannel(Fabric* fabric, int side, int index, int row, int depth, double wavelets_per_cycle);

  // Host side; call between cycles.
  bool try_inject(const Wavelet& w);
  bool try_receive(Wavelet* w);
  void set_auto_drain(bool on) { m_auto_drain = on; }  // the host takes every arrival at once
  void set_record(bool on) { m_record = on; }          // keep what arrives, for tests
  // The fabric ORs `bit` into *word whenever it takes a wavelet from the inject queue (a host
  // that watches many channels learns which ones moved without asking each).
  void notify_takes(std::atomic<uint64_t>* word, uint64_t bit) {
    m_took = word;
    m_took_bit = bit;
  }
  // The same when the fabric puts a wavelet in the receive queue (set_auto_drain(false)).
  void notify_delivers(std::atomic<uint64_t>* word, uint64_t bit) {
    m_delivered = word;
    m_delivered_bit = bit;
  }
  const std::vector<std::pair<uint64_t, Wavelet>>& log() const { return m_log; }

  int side() const { return m_side; }
  int index() const { return m_index; }
  int row() const { return m_row; }
  uint64_t injected() const { return m_injected; }    // wavelets that entered the fabric
  uint64_t received() const { return m_received; }    // wavelets that left the fabric here
  size_t inject_queue_size() const { return m_in.size(); }
  size_t receive_queue_size() const { return m_out.size(); }
  bool has_receive_work() const { return !m_out.empty(); }  // receive_queue_size() > 0, cheaply
  bool inject_full() const { return m_in.size() >= m_depth; }  // try_inject() would refuse

  // Fabric side; called by the owning edge router only.
  bool fabric_can_take(uint64_t now) const { return m_out.size() < m_depth && now >= m_out_ready; }
  const Wavelet* fabric_offer(uint64_t now) const { return !m_in.empty() && now >= m_in_ready ? &m_in_front : nullptr; }
  void fabric_took_offer(uint64_t now);
  void fabric_deliver(const Wavelet& w, uint64_t now, uint64_t ready);
  bool has_inject_work() const { return !m_in.empty(); }
  // The first cycle from `next` on at which the rate lets the channel offer its next wavelet.
  uint64_t offer_cycle(uint64_t next) const { return std::max(next, m_in_ready); }

 private:
  // A rate slot: cycles in fixed point, the whole cycle in the upper 64 bits and its fraction
  // in the lower 64. Integer sums are exact, so a schedule depends only on the cycles between
  // the events that set it, never on how far the run has got (a double's rounding does: the
  // same burst late in a run could take a slot a cycle later than early on, and a resumed run
  // would not repeat the one it continues).
  using Fixed = unsigned __int128;
  static uint64_t ceil_cycle(Fixed t) { return static_cast<uint64_t>((t + ~uint64_t{0}) >> 64); }
  Fixed next_slot(Fixed next, uint64_t now) const;

  // What the edge router reads on its visits first, in the first cache line: whether there is
  // an offer, its rate slot's first cycle and (a copy of m_in's head) the wavelet itself.
  uint64_t m_in_ready = 0;  // ceil_cycle(m_in_next)
  Wavelet m_in_front;  // m_in.front() while m_in is not empty
  BoundedQueue<Wavelet> m_in;
  size_t m_depth;
  uint64_t m_out_ready = 0;  // ceil_cycle(m_out_next)
  BoundedQueue<std::pair<uint64_t, Wavelet>> m_out;  // (ready cycle, wavelet)
  Fixed m_in_next = 0, m_out_next = 0;  // the rate slots
  Fixed m_period;  // cycles per wavelet (at least one)
  bool m_auto_drain = false, m_record = false;
  Fabric* m_fabric;
  int m_side, m_index, m_row;
  uint32_t m_checked_colors = 0;  // colors try_inject() found routed in (the fabric was final)
  std::atomic<uint64_t>* m_took = nullptr;  // see notify_takes
  uint64_t m_took_bit = 0;
  std::atomic<uint64_t>* m_delivered = nullptr;  // see notify_delivers
  uint64_t m_delivered_bit = 0;
  uint64_t m_injected = 0, m_received = 0;
  std::vector<std::pair<uint64_t, Wavelet>> m_log;
};

}  // namespace wafersim
