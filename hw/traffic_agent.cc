#include "hw/traffic_agent.h"

#include <algorithm>

namespace wafersim {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t hash_bits(uint64_t seed, uint64_t pe, uint64_t cycle, uint64_t salt) {
  return splitmix64(splitmix64(splitmix64(seed ^ salt) ^ pe) ^ cycle);
}

double hash_uniform(uint64_t seed, uint64_t pe, uint64_t cycle, uint64_t salt) {
  return static_cast<double>(hash_bits(seed, pe, cycle, salt) >> 11) * (1.0 / 9007199254740992.0);
}

TrafficAgent::TrafficAgent(uint32_t pe_id, const TrafficAgentOptions& opts) : m_pe(pe_id), m_opts(opts) {
  std::fill(std::begin(m_queue_of), std::end(m_queue_of), -1);
}

void TrafficAgent::add_flow(const TrafficFlow& f) {
  m_send_colors |= 1u << f.color;
  Flow fl{f};
  fl.rate = std::max<uint32_t>(1, static_cast<uint32_t>(f.rate * kOne + 0.5));
  if (fl.rate < kOne) m_unit_rates = false;
  fl.credit = m_unit_rates ? kOne : 0;
  m_flows.push_back(fl);
  if (f.rate > 0) ++m_unfinished_flows;
}

void TrafficAgent::add_receive(int color) {
  if (m_queue_of[color] >= 0) return;
  m_queue_of[color] = static_cast<int8_t>(m_queues.size());
  m_queue_color.push_back(color);
  const auto depth = static_cast<uint16_t>(m_opts.queue_depth);
  m_queues.emplace_back();
  m_storage.resize(m_queues.size() * depth);  // set-up only: queues are empty, rebind them all
  for (size_t i = 0; i < m_queues.size(); ++i) m_queues[i] = Fifo(&m_storage[i * depth], depth);
  m_full &= ~(1u << color);
  m_receive_colors |= 1u << color;
}

uint32_t TrafficAgent::evaluate(uint64_t now, uint32_t ramp_full, Wavelet* out) {
  uint32_t result = 0;
  // Receive side: take at most one ready arrival per cycle (the ramp brings at most one),
  // round-robin over the colors that have one. The draw depends only on (seed, PE, cycle).
  if (m_nonempty_q && (m_opts.drain_prob >= 1.0 || hash_uniform(m_opts.seed, m_pe, now, 1) < m_opts.drain_prob)) {
    for (uint32_t cand = m_nonempty_q; cand;) {
      const uint32_t hi = m_rr_queue >= 32 ? 0 : cand & (~0u << m_rr_queue);
      const int i = __builtin_ctz(hi ? hi : cand);
      cand &= ~(1u << i);
      Fifo& q = m_queues[static_cast<size_t>(i)];
      const int color = m_queue_color[static_cast<size_t>(i)];
      if (q.front().ready > now || ((m_opts.never_drain >> color) & 1)) continue;
      if (m_opts.record) {
        m_log.push_back(Arrival{now, Wavelet{q.front().payload, static_cast<uint8_t>(color), q.front().ctrl}});
      }
      q.pop();
      if (q.empty()) m_nonempty_q &= ~(1u << i);
      m_full &= ~(1u << color);
      --m_buffered;
      ++m_consumed;
      m_rr_queue = i + 1;
      result |= kConsumed;
      break;
    }
  }
  // Send side: flows earn credit at their rate; one wavelet per cycle goes to the ramp.
  if (m_unfinished_flows == 0) return result;
  if (!m_unit_rates) {
    for (Flow& f : m_flows) f.credit = std::min(kOne, f.credit + f.rate);
  }
  if (!(m_send_colors & ~ramp_full)) return result;  // every flow's ramp buffer is full
  if (m_opts.stall_prob > 0 && hash_uniform(m_opts.seed, m_pe, now, 2) < m_opts.stall_prob) return result;
  const size_t n = m_flows.size();
  for (size_t k = 0; k < n; ++k) {
    size_t i = m_rr_flow + k;
    if (i >= n) i -= n;
    Flow& f = m_flows[i];
    if (f.credit < kOne || (f.spec.count && f.sent >= f.spec.count) || ((ramp_full >> f.spec.color) & 1)) continue;
    const bool ctrl = f.spec.ctrl_every && (f.seq % f.spec.ctrl_every) == f.spec.ctrl_every - 1;
    *out = Wavelet{make_payload(m_pe, f.seq), static_cast<uint8_t>(f.spec.color), ctrl};
    if (!m_unit_rates) f.credit -= kOne;
    ++f.seq;
    ++f.sent;
    ++m_sent;
    if (f.spec.count && f.sent == f.spec.count) --m_unfinished_flows;
    m_rr_flow = i + 1;
    return result | kOffered;
  }
  return result;
}

uint64_t TrafficAgent::deliver(const Wavelet& w, uint64_t ready) {
  const int qi = m_queue_of[w.color];
  Fifo& q = m_queues[static_cast<size_t>(qi)];
  q.push(FifoEntry{ready, w.payload, w.ctrl});
  m_nonempty_q |= 1u << qi;
  ++m_buffered;
  if (q.full()) m_full |= 1u << w.color;
  return 0;
}

}  // namespace wafersim
