#include "hw/edge_io.h"

#include <algorithm>

#include "hw/fabric.h"

namespace wafersim {

EdgeChannel::EdgeChannel(Fabric* fabric, int side, int index, int row, int depth,
                         double wavelets_per_cycle)
    : m_in(static_cast<size_t>(depth)),
      m_depth(static_cast<size_t>(depth)),
      m_out(m_depth),
      m_period(wavelets_per_cycle >= 1.0 ? 1.0 : 1.0 / wavelets_per_cycle),
      m_fabric(fabric),
      m_side(side),
      m_index(index),
      m_row(row) {}

// While the channel is busy the schedule keeps its fractional part (7 Gb/s at 850 MHz is one
// wavelet per 3.886 cycles, not per 4); after an idle spell it restarts without a burst.
double EdgeChannel::next_slot(double next, uint64_t now) const {
  return std::max(next + m_period, static_cast<double>(now) + m_period - 1.0);
}

// The edge router learns of a queue that was empty; one that was not, it already watches (it
// schedules its next visit by the head's rate slot or its own full buffer, and only it pops).
bool EdgeChannel::try_inject(const Wavelet& w) {
  if (m_in.size() >= m_depth) return false;
  const uint32_t bit = 1u << w.color;
  if (m_in.empty() || !(m_checked_colors & bit)) {
    // Throws if the edge router does not route this color in; true once the fabric is final.
    if (m_fabric->wake_edge(*this, w.color)) m_checked_colors |= bit;
  }
  if (m_in.empty()) m_in_front = w;
  m_in.push_back(w);
  return true;
}

bool EdgeChannel::try_receive(Wavelet* w) {
  if (m_out.empty() || m_out.front().first > m_fabric->cycle()) return false;
  *w = m_out.front().second;
  m_out.pop_front();
  return true;
}

void EdgeChannel::fabric_took_offer(uint64_t now) {
  m_in.pop_front();
  if (!m_in.empty()) m_in_front = m_in.front();
  m_in_next = next_slot(m_in_next, now);
  ++m_injected;
  if (m_took) m_took->fetch_or(m_took_bit, std::memory_order_relaxed);  // routers of any thread
}

void EdgeChannel::fabric_deliver(const Wavelet& w, uint64_t now, uint64_t ready) {
  m_out_next = next_slot(m_out_next, now);
  ++m_received;
  if (m_record) m_log.emplace_back(ready, w);
  if (m_auto_drain) return;
  m_out.push_back({ready, w});
  if (m_delivered) m_delivered->fetch_or(m_delivered_bit, std::memory_order_relaxed);  // routers of any thread
}

}  // namespace wafersim
