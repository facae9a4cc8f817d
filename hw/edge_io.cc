#include "hw/edge_io.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "hw/fabric.h"

namespace wafersim {
namespace {

// Cycles per wavelet in the channel's fixed point (EdgeChannel::Fixed): at least one; the
// fraction keeps the double's 53 bits.
unsigned __int128 fixed_period(double wavelets_per_cycle) {
  if (!(wavelets_per_cycle > 0)) throw std::invalid_argument("an edge channel's rate must be positive");
  if (wavelets_per_cycle >= 1.0) return static_cast<unsigned __int128>(1) << 64;
  const double period = 1.0 / wavelets_per_cycle;
  if (period >= 0x1p62) throw std::invalid_argument("an edge channel's rate is too low");
  const double whole = std::floor(period);
  const double frac = std::ldexp(period - whole, 64);  // period - whole is exact and below 1
  return (static_cast<unsigned __int128>(static_cast<uint64_t>(whole)) << 64) + static_cast<uint64_t>(frac);
}

}  // namespace

EdgeChannel::EdgeChannel(Fabric* fabric, int side, int index, int row, int depth,
                         double wavelets_per_cycle)
    : m_in(static_cast<size_t>(depth)),
      m_depth(static_cast<size_t>(depth)),
      m_out(m_depth),
      m_period(fixed_period(wavelets_per_cycle)),
      m_fabric(fabric),
      m_side(side),
      m_index(index),
      m_row(row) {}

// While the channel is busy the schedule keeps its fractional part (7 Gb/s at 850 MHz is one
// wavelet per 3.886 cycles, not per 4); after an idle spell it restarts without a burst.
EdgeChannel::Fixed EdgeChannel::next_slot(Fixed next, uint64_t now) const {
  return std::max(next + m_period, (static_cast<Fixed>(now) << 64) + m_period - (Fixed{1} << 64));
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
  m_in_ready = ceil_cycle(m_in_next);
  ++m_injected;
  if (m_took) m_took->fetch_or(m_took_bit, std::memory_order_relaxed);  // routers of any thread
}

void EdgeChannel::fabric_deliver(const Wavelet& w, uint64_t now, uint64_t ready) {
  m_out_next = next_slot(m_out_next, now);
  m_out_ready = ceil_cycle(m_out_next);
  ++m_received;
  if (m_record) m_log.emplace_back(ready, w);
  if (m_auto_drain) return;
  m_out.push_back({ready, w});
  if (m_delivered) m_delivered->fetch_or(m_delivered_bit, std::memory_order_relaxed);  // routers of any thread
}

}  // namespace wafersim
