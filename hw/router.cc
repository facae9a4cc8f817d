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
    : m_cfg(&cfg), m_id(id), m_x(static_cast<uint16_t>(x)), m_y(static_cast<uint16_t>(y)) {}

void Router::set_route(int color, const ColorRoute& route) {
  m_route[color] = route;
  m_routed |= 1u << color;
}

const ColorRoute* Router::route(int color) const {
  return (m_routed >> color) & 1 ? &m_route[color] : nullptr;
}

bool Router::accepts(int port, int color) const {
  return ((m_routed >> color) & 1) && (m_route[color].rx_any() & port_bit(port));
}

void Router::allocate_buffers() {
  int n = 0;
  m_rx_ports = 0;
  for (int c = 0; c < kMaxColors; ++c) {
    ColorState& cs = m_col[c];
    cs.rx_any = (m_routed >> c) & 1 ? m_route[c].rx_any() : 0;
    cs.fifo_base = static_cast<uint8_t>(n);
    cs.rx = m_route[c].pos[0].rx;
    cs.tx = m_route[c].pos[0].tx;
    n += __builtin_popcount(cs.rx_any);
    m_rx_ports |= cs.rx_any;
  }
  // One block: buffer bookkeeping, then slots (both 8-byte aligned).
  const size_t depth = static_cast<size_t>(m_cfg->buffer_depth);
  const size_t meta_words = (static_cast<size_t>(n) * sizeof(FifoMeta) + 7) / 8;
  m_mem = std::make_unique<uint64_t[]>(meta_words + static_cast<size_t>(n) * depth);
  m_fifo = reinterpret_cast<FifoMeta*>(m_mem.get());
  m_slots = reinterpret_cast<Slot*>(m_mem.get() + meta_words);
  for (int c = 0; c < kMaxColors; ++c) {
    for (uint32_t m = m_col[c].rx_any; m; m &= m - 1) {
      FifoMeta& f = m_fifo[fifo_index(ctz(m), c)];
      f = FifoMeta{0, 0, static_cast<uint8_t>(ctz(m)), static_cast<uint8_t>(c)};
    }
  }
}

int Router::buffered(int port, int color) const {
  if (!m_fifo || !(m_col[color].rx_any & port_bit(port))) return -1;
  return m_fifo[fifo_index(port, color)].count;
}

bool Router::sent_this_cycle(int port, uint64_t now, Wavelet* w) const {
  if (m_sent_cycle != now || !(m_sent_ports & port_bit(port))) return false;
  *w = m_out[port];
  return true;
}

bool Router::has_work() const {
  if (m_occupancy) return true;
  if (m_agent && m_agent->has_work()) return true;
  if (!m_has_chan) return false;
  for (int p : {kEast, kWest}) {
    if (m_chan[p] && m_chan[p]->has_inject_work()) return true;
  }
  return false;
}

// Picks the next head for color c among its accepted, non-empty input buffers (round-robin from
// the port after the last one served, so a merge interleaves its inputs fairly). A head whose
// link latency has not elapsed waits.
void Router::select_head(int c, uint64_t now) {
  ColorState& cs = m_col[c];
  if (!cs.nonempty) {
    m_needs_head &= ~(1u << c);
    return;
  }
  uint32_t cand = cs.nonempty & cs.rx;
  const int start = cs.cur_in == kNone ? 0 : cs.cur_in + 1;  // cur_in holds the last port served
  while (cand) {
    const int p = rr_pick(cand, start);
    cand &= ~(1u << p);
    const int fi = fifo_index(p, c);
    const FifoMeta& f = m_fifo[fi];
    if (!ready(m_slots[fi * m_cfg->buffer_depth + f.head].meta, now)) continue;
    cs.cur_in = static_cast<uint8_t>(p);
    cs.pending = cs.tx;
    for (uint32_t t = cs.tx; t; t &= t - 1) m_want[ctz(t)] |= 1u << c;
    m_needs_head &= ~(1u << c);
    return;
  }
}

uint32_t Router::edge_full(int port, uint64_t now) const {
  if (port == kRamp) return m_agent ? m_agent->full_colors() : ~0u;
  if (const EdgeChannel* ch = m_chan[port]) return ch->fabric_can_take(now) ? 0u : ~0u;
  return ~0u;
}

__attribute__((always_inline)) inline void Router::push(int port, int color, uint32_t payload, bool ctrl,
                                                        uint64_t ready_at, ThreadCtx& tc) {
  const int fi = fifo_index(port, color);
  FifoMeta& f = m_fifo[fi];
  const int depth = m_cfg->buffer_depth;
  int tail = f.head + f.count;
  if (tail >= depth) tail -= depth;
  m_slots[fi * depth + tail] = Slot{payload, static_cast<uint32_t>(ready_at << 1) | (ctrl ? 1u : 0u)};
  ++f.count;
  ++m_occupancy;
  ++tc.pushed;
  ColorState& cs = m_col[color];
  cs.nonempty |= port_bit(port);
  if (f.count == depth) m_full_in[port] |= 1u << color;
  if (f.count > tc.color[color].peak) tc.color[color].peak = f.count;
  if (m_occupancy > s_peak_occupancy) s_peak_occupancy = m_occupancy;
  if (!cs.pending) m_needs_head |= 1u << color;
}

void Router::evaluate(uint64_t now, ThreadCtx& tc) {
  m_eval_stamp = now;
  m_npop = 0;
  for (uint32_t m = m_needs_head; m; m &= m - 1) select_head(ctz(m), now);

  // Every output link carries at most one wavelet; its arbiter serves colors round-robin.
  uint32_t wanting = 0, sent = 0;
  uint8_t sent_ports = 0;
  const int depth = m_cfg->buffer_depth;
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
    const int fi = fifo_index(cs.cur_in, c);
    const Slot& head = m_slots[fi * depth + m_fifo[fi].head];
    const bool ctrl = head.meta & 1u;
    m_out[p] = Wavelet{head.payload, static_cast<uint8_t>(c), ctrl};
    sent_ports |= port_bit(p);
    m_want[p] &= ~bit;
    sent |= bit;
    ++s_forwarded[p];
    ++tc.color[c].forwarded;
    if (p < kNumLinkPorts) {
      Router* n = m_nbr[p];
      if (n && !n->m_active) tc.wake.push_back(n);
    }
    cs.pending &= static_cast<uint8_t>(~port_bit(p));
    if (cs.pending) {
      ++tc.nonfinal;
    } else {
      m_pops[m_npop++] = static_cast<uint16_t>(fi);
      if (ctrl && m_route[c].npos > 1) {
        const ColorRoute& r = m_route[c];
        cs.pos = static_cast<uint8_t>(cs.pos + 1 == r.npos ? 0 : cs.pos + 1);
        cs.rx = r.pos[cs.pos].rx;
        cs.tx = r.pos[cs.pos].tx;
      }
      // cur_in stays as the round-robin reference; pending == 0 marks the color idle. A push
      // re-arms head selection, so only arm it here if more is already buffered.
      if (m_fifo[fi].count > 1 || (cs.nonempty & ~port_bit(cs.cur_in))) m_needs_head |= bit;
    }
  }
  if (sent_ports) {
    m_sent_cycle = now;
    m_sent_ports = sent_ports;
    tc.moves += static_cast<uint64_t>(__builtin_popcount(sent_ports));
  }
  if (const uint32_t stalled = wanting & ~sent) tc.color_stall.add(stalled);

  // The ramp link from the agent and the host channels on edge ports each carry one wavelet.
  m_agent_offer = false;
  if (m_agent) {
    const uint32_t r = m_agent->evaluate(now, m_full_in[kRamp], &m_agent_w);
    m_agent_offer = (r & PeAgent::kOffered) != 0;
    if (r) ++tc.moves;
  }
  m_chan_take = 0;
  if (!m_has_chan) return;
  for (int p : {kEast, kWest}) {
    EdgeChannel* ch = m_chan[p];
    if (!ch) continue;
    const Wavelet* w = ch->fabric_offer(now);
    if (w && !((m_full_in[p] >> w->color) & 1)) m_chan_take |= port_bit(p);
  }
}

void Router::commit(uint64_t now, ThreadCtx& tc) {
  const uint64_t hop_ready = now + static_cast<uint64_t>(m_cfg->hop_latency);
  const uint64_t ramp_ready = now + static_cast<uint64_t>(m_cfg->ramp_latency);
  if (m_eval_stamp == now) {
    const int depth = m_cfg->buffer_depth;
    for (int i = 0; i < m_npop; ++i) {
      FifoMeta& f = m_fifo[m_pops[i]];
      if (++f.head == depth) f.head = 0;
      --f.count;
      m_full_in[f.port] &= ~(1u << f.color);
      if (!f.count) m_col[f.color].nonempty &= static_cast<uint8_t>(~port_bit(f.port));
      --m_occupancy;
      ++tc.popped;
    }
    if (m_sent_cycle == now) {
      if (m_sent_ports & port_bit(kRamp)) {
        m_agent->deliver(m_out[kRamp], ramp_ready);
        ++tc.delivered;
      }
      for (int p : {kEast, kWest}) {
        if (!m_has_chan) break;
        if ((m_sent_ports & port_bit(p)) && m_chan[p]) {
          m_chan[p]->fabric_deliver(m_out[p], now, hop_ready);
          ++tc.delivered;
        }
      }
    }
    for (int p : {kEast, kWest}) {
      if (!m_chan_take) break;
      if (m_chan_take & port_bit(p)) {
        EdgeChannel* ch = m_chan[p];
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
    const int from = opposite(p);
    if (n && n->m_sent_cycle == now && (n->m_sent_ports & port_bit(from))) {
      const Wavelet& w = n->m_out[from];
      push(p, w.color, w.payload, w.ctrl, hop_ready, tc);
    }
  }
}

}  // namespace wafersim
