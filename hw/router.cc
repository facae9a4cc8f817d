#include "hw/router.h"

#include "hw/edge_io.h"

namespace wafersim {
namespace {

inline int ctz(uint32_t m) { return __builtin_ctz(m); }

// Round-robin pick: the lowest set bit at or above `start`, else the lowest set bit.
inline int rr_pick(uint32_t mask, int start) {
  const uint32_t hi = start >= 32 ? 0 : mask & (~0u << start);
  return ctz(hi ? hi : mask);
}

}  // namespace

uint8_t ColorRoute::rx_any() const {
  uint8_t m = 0;
  for (int i = 0; i < npos; ++i) m |= pos[i].rx;
  return m;
}

uint8_t ColorRoute::tx_any() const {
  uint8_t m = 0;
  for (int i = 0; i < npos; ++i) m |= pos[i].tx;
  return m;
}

Router::Router(uint32_t id, int x, int y, const RouterConfig& cfg)
    : m_id(id),
      m_x(static_cast<uint16_t>(x)),
      m_y(static_cast<uint16_t>(y)),
      m_cfg(cfg),
      m_col(static_cast<size_t>(cfg.colors)) {
  for (auto& s : m_out_stamp) s = ~uint64_t(0);
  s_color.resize(static_cast<size_t>(cfg.colors));
}

void Router::set_route(int color, const ColorRoute& route) {
  m_col[color].route = route;
  m_routed |= 1u << color;
}

const ColorRoute* Router::route(int color) const {
  return (m_routed >> color) & 1 ? &m_col[color].route : nullptr;
}

bool Router::accepts(int port, int color) const {
  return ((m_routed >> color) & 1) && (m_col[color].route.rx_any() & port_bit(port));
}

void Router::allocate_buffers() {
  size_t n = 0;
  for (auto& cs : m_col) {
    for (auto& f : cs.fifo) f = -1;
  }
  m_rx_ports = 0;
  for (uint32_t m = m_routed; m; m &= m - 1) {
    ColorState& cs = m_col[ctz(m)];
    const uint8_t rx = cs.route.rx_any();
    for (int p = 0; p < kNumPorts; ++p) {
      if (rx & port_bit(p)) cs.fifo[p] = static_cast<int16_t>(n++);
    }
    m_rx_ports |= rx;
  }
  const auto depth = static_cast<uint16_t>(m_cfg.buffer_depth);
  m_pool.assign(n * depth, FifoEntry{});
  m_fifos.assign(n, Fifo{});
  for (size_t i = 0; i < n; ++i) m_fifos[i] = Fifo(&m_pool[i * depth], depth);
}

int Router::buffered(int port, int color) const {
  const int16_t f = m_col[color].fifo[port];
  return f < 0 ? -1 : m_fifos[f].size();
}

bool Router::sent_this_cycle(int port, uint64_t now, Wavelet* w) const {
  if (m_out_stamp[port] != now) return false;
  *w = m_out[port];
  return true;
}

void Router::reset_stats() {
  for (auto& s : s_forwarded) s = 0;
  for (auto& s : s_stall) s = 0;
  s_peak_occupancy = m_occupancy;
  for (size_t c = 0; c < s_color.size(); ++c) {
    s_color[c] = ColorCounters{};
    for (int p = 0; p < kNumPorts; ++p) {
      const int b = buffered(p, static_cast<int>(c));
      if (b > 0 && static_cast<uint32_t>(b) > s_color[c].peak) s_color[c].peak = b;
    }
  }
}

bool Router::has_work() const {
  if (m_occupancy) return true;
  if (m_agent && m_agent->has_work()) return true;
  for (int p : {kEast, kWest}) {
    if (m_chan[p] && m_chan[p]->has_inject_work()) return true;
  }
  return false;
}

// Picks the next head for color c among its accepted, non-empty input buffers (round-robin, so
// a merge interleaves its inputs fairly). A head whose link latency has not elapsed waits.
void Router::select_head(int c, uint64_t now) {
  ColorState& cs = m_col[c];
  const uint8_t rx = cs.route.pos[cs.pos].rx;
  bool waiting = false;
  for (int k = 0; k < kNumPorts; ++k) {
    int p = cs.rr_in + k;
    if (p >= kNumPorts) p -= kNumPorts;
    const int16_t fi = cs.fifo[p];
    if (fi < 0 || m_fifos[fi].empty()) continue;
    waiting = true;  // also set for buffers the current position does not accept yet
    if (!(rx & port_bit(p)) || m_fifos[fi].front().ready > now) continue;
    cs.cur_in = static_cast<uint8_t>(p);
    cs.rr_in = static_cast<uint8_t>(p + 1 == kNumPorts ? 0 : p + 1);
    cs.pending = cs.route.pos[cs.pos].tx;
    for (uint32_t t = cs.pending; t; t &= t - 1) m_want[ctz(t)] |= 1u << c;
    m_needs_head &= ~(1u << c);
    return;
  }
  if (!waiting) m_needs_head &= ~(1u << c);
}

uint32_t Router::downstream_full(int port, uint64_t now) const {
  if (port == kRamp) return m_agent ? m_agent->full_colors() : ~0u;
  if (const Router* n = m_nbr[port]) return n->m_full_in[opposite(port)];
  if (const EdgeChannel* ch = m_chan[port]) return ch->fabric_can_take(now) ? 0u : ~0u;
  return ~0u;
}

void Router::evaluate(uint64_t now, ThreadCtx& tc) {
  m_eval_stamp = now;
  m_npop = 0;
  for (uint32_t m = m_needs_head; m; m &= m - 1) select_head(ctz(m), now);

  // Every output link carries at most one wavelet; its arbiter serves colors round-robin.
  uint32_t wanting = 0, sent = 0;
  for (int p = 0; p < kNumPorts; ++p) {
    const uint32_t want = m_want[p];
    if (!want) continue;
    wanting |= want;
    const uint32_t eligible = want & ~downstream_full(p, now);
    if (!eligible) {
      ++s_stall[p];
      continue;
    }
    const int c = rr_pick(eligible, m_rr_out[p]);
    m_rr_out[p] = static_cast<uint8_t>(c + 1);
    const uint32_t bit = 1u << c;
    ColorState& cs = m_col[c];
    const int16_t fi = cs.fifo[cs.cur_in];
    const FifoEntry& head = m_fifos[fi].front();
    m_out[p] = Wavelet{head.payload, static_cast<uint8_t>(c), head.ctrl};
    m_out_stamp[p] = now;
    m_want[p] &= ~bit;
    sent |= bit;
    ++s_forwarded[p];
    ++s_color[c].forwarded;
    ++tc.moves;
    if (p < kNumLinkPorts) {
      Router* n = m_nbr[p];
      if (n && !n->m_active) tc.wake.push_back(n);
    }
    cs.pending &= static_cast<uint8_t>(~port_bit(p));
    if (cs.pending) {
      ++tc.nonfinal;
    } else {
      m_pops[m_npop++] = static_cast<int16_t>(cs.cur_in << 5 | c);
      if (head.ctrl && cs.route.npos > 1) cs.pos = static_cast<uint8_t>((cs.pos + 1) % cs.route.npos);
      cs.cur_in = kNone;
      m_needs_head |= bit;
    }
  }
  for (uint32_t m = wanting & ~sent; m; m &= m - 1) ++s_color[ctz(m)].stall;

  // The ramp link from the agent and the host channels on edge ports each carry one wavelet.
  m_agent_offer = false;
  if (m_agent) {
    const uint32_t r = m_agent->evaluate(now, m_full_in[kRamp], &m_agent_w);
    m_agent_offer = (r & PeAgent::kOffered) != 0;
    if (r) ++tc.moves;
  }
  m_chan_take = 0;
  for (int p : {kEast, kWest}) {
    EdgeChannel* ch = m_chan[p];
    if (!ch) continue;
    const Wavelet* w = ch->fabric_offer(now);
    if (w && !((m_full_in[p] >> w->color) & 1)) m_chan_take |= port_bit(p);
  }
}

void Router::push(int port, int color, uint32_t payload, bool ctrl, uint64_t ready, ThreadCtx& tc) {
  Fifo& f = m_fifos[m_col[color].fifo[port]];
  f.push(FifoEntry{ready, payload, ctrl});
  ++m_occupancy;
  ++tc.pushed;
  if (f.full()) m_full_in[port] |= 1u << color;
  if (f.size() > s_color[color].peak) s_color[color].peak = f.size();
  if (m_occupancy > s_peak_occupancy) s_peak_occupancy = m_occupancy;
  if (m_col[color].cur_in == kNone) m_needs_head |= 1u << color;
}

void Router::commit(uint64_t now, ThreadCtx& tc) {
  const uint64_t hop_ready = now + static_cast<uint64_t>(m_cfg.hop_latency);
  const uint64_t ramp_ready = now + static_cast<uint64_t>(m_cfg.ramp_latency);
  if (m_eval_stamp == now) {
    for (int i = 0; i < m_npop; ++i) {
      const int port = m_pops[i] >> 5, color = m_pops[i] & 31;
      m_fifos[m_col[color].fifo[port]].pop();
      m_full_in[port] &= ~(1u << color);
      --m_occupancy;
      ++tc.popped;
    }
    if (m_out_stamp[kRamp] == now) {
      m_agent->deliver(m_out[kRamp], ramp_ready);
      ++tc.delivered;
    }
    for (int p : {kEast, kWest}) {
      EdgeChannel* ch = m_chan[p];
      if (!ch) continue;
      if (m_out_stamp[p] == now) {
        ch->fabric_deliver(m_out[p], now, hop_ready);
        ++tc.delivered;
      }
      if (m_chan_take & port_bit(p)) {
        const Wavelet w = *ch->fabric_offer(now);
        ch->fabric_took_offer(now);
        push(p, w.color, w.payload, w.ctrl, hop_ready, tc);
        ++tc.injected;
        ++tc.moves;
      }
    }
    if (m_agent_offer) {
      push(kRamp, m_agent_w.color, m_agent_w.payload, m_agent_w.ctrl, ramp_ready, tc);
      ++tc.injected;
    }
  }
  // Pull what the neighbours sent this way during evaluate.
  for (uint32_t m = m_rx_ports & 0xf; m; m &= m - 1) {
    const int p = ctz(m);
    const Router* n = m_nbr[p];
    if (!n) continue;
    const int from = opposite(p);
    if (n->m_out_stamp[from] == now) {
      const Wavelet& w = n->m_out[from];
      push(p, w.color, w.payload, w.ctrl, hop_ready, tc);
    }
  }
}

}  // namespace wafersim
