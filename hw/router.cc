#include "hw/router.h"

#include <algorithm>
#include <cassert>
#include <cstring>

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
  for (int c = 0; c < kMaxColors; ++c) {
    ColorState& cs = m_col[c];
    cs.rx_any = (m_routed >> c) & 1 ? m_route[c].rx_any() : 0;
    cs.fifo_base = static_cast<uint8_t>(n);
    cs.rx = m_route[c].pos[0].rx;
    cs.tx = m_route[c].pos[0].tx;
    n += __builtin_popcount(cs.rx_any);
    for (int p = 0; p < kNumLinkPorts; ++p) cs.credit[p] = static_cast<uint8_t>(m_cfg->buffer_depth);
  }
  // Colors that only go straight on here: one position, one input port, one output link.
  for (int c = 0; c < kMaxColors; ++c) {
    const ColorRoute& r = m_route[c];
    const uint8_t tx = r.pos[0].tx;
    const int t = __builtin_ctz(tx | 0x100u);
    const bool through = ((m_routed >> c) & 1) && r.npos == 1 && __builtin_popcount(r.pos[0].rx) == 1 &&
                         !(r.pos[0].rx & port_bit(kRamp)) && tx == port_bit(t) && t < kNumLinkPorts && m_nbr[t];
    m_col[c].through = static_cast<int8_t>(through ? t : -1);
  }
  const bool chan = std::any_of(std::begin(m_chan), std::end(m_chan), [](const EdgeChannel* c) { return c != nullptr; });
  m_straight = !m_agent && !chan && m_cfg->hop_latency == 1 && m_cfg->straight_path;
  // One block: buffer bookkeeping, then slots (both 8-byte aligned).
  m_depth = static_cast<uint8_t>(m_cfg->buffer_depth);
  const size_t depth = m_depth;
  const size_t meta_words = (static_cast<size_t>(n) * sizeof(FifoMeta) + 7) / 8;
  m_mem = std::make_unique<uint64_t[]>(meta_words + static_cast<size_t>(n) * depth);
  m_fifo = reinterpret_cast<FifoMeta*>(m_mem.get());
  m_slots = reinterpret_cast<Slot*>(m_mem.get() + meta_words);
  for (int c = 0; c < kMaxColors; ++c) {
    for (uint32_t m = m_col[c].rx_any; m; m &= m - 1) {
      FifoMeta& f = m_fifo[fifo_index(ctz(m), c)];
      const int fi = fifo_index(ctz(m), c);
      f = FifoMeta{0, 0, static_cast<uint8_t>(ctz(m)), static_cast<uint8_t>(c), static_cast<uint16_t>(fi * depth), 0};
    }
  }
}

int Router::express_axis() const {
  if (!m_straight || !m_routed) return -1;
  int axis = -1;
  for (uint32_t m = m_routed; m; m &= m - 1) {
    const int c = ctz(m);
    const int t = m_col[c].through;
    if (t < 0 || m_route[c].pos[0].rx != port_bit(opposite(t))) return -1;  // turns, or more than straight on
    const int a = t == kNorth || t == kSouth ? kNorth : kEast;
    if (axis >= 0 && a != axis) return -1;
    axis = a;
  }
  return axis;
}

void Router::set_express(int in_port, ExpressRun* entering, int out_port, ExpressRun* leaving) {
  if (entering) {
    m_xin[in_port] = entering;
    m_xin_ports |= port_bit(in_port);
  }
  if (leaving) {
    m_xout[out_port] = leaving;
    m_xout_ports |= port_bit(out_port);
  }
}

bool Router::take_credits_directly(int port) {
  Router* d = m_nbr[port];
  if (!d || d->m_owner != m_owner) return false;
  d->m_xnbr_ports |= port_bit(opposite(port));
  return true;
}

void Router::let_neighbour_enter(int port, ExpressRun* x) {
  Router* u = m_nbr[port];
  if (!u || u->m_owner != m_owner) return;
  u->m_xent[opposite(port)] = x;
  u->m_xent_ports |= port_bit(opposite(port));
}

// Wavelet `k` of line x enters it in cycle `now` (the first router sends it): it is due at the
// exit `hops` cycles on, unless the ones ahead are still there then (express_try schedules it
// after them).
void Router::express_enter(ExpressRun& x, uint32_t payload, uint8_t ctrl, uint64_t now, ThreadCtx& tc, bool direct) {
  // The entry rule keeps at most hops * depth wavelets in a line, fewer than its ring holds.
  assert(x.entered_n - x.exited_n <= static_cast<uint64_t>(x.hops) * static_cast<uint64_t>(x.depth) &&
         x.entered_n - x.exited_n <= x.exit_mask);
  x.flights[x.entered_n & x.exit_mask] = ExpressRun::Flight{now, payload, ctrl, static_cast<uint8_t>(direct)};
  ++x.entered_n;
  x.update_entry();
  tc.express_at[(now + static_cast<uint64_t>(x.hops)) & (kExpressSlots - 1)].push_back(ExpressDelivery{&x});
  ++tc.express_pending;
}

void Router::express_try(ExpressRun& x, uint64_t now, ThreadCtx& tc) {
  if (x.empty()) return;
  const ExpressRun::Flight f = x.oldest();
  const uint64_t L = static_cast<uint64_t>(x.hops);
  if (f.entered + L > now || (x.exited_n && x.last_exit >= now)) return;  // not due (yet, or one left now)
  const int t = x.exit_port, c = x.color;
  ColorState& cs = m_col[c];
  if (!cs.credit[t]) {
    x.waiting = true;  // the credit's return tries again (express_credit, or this router's visit)
    return;
  }
  x.waiting = false;
  Mailbox& nm = m_nbr[t]->m_mail[now & 1];
  nm.arr[opposite(t)] = Arrival{f.payload, static_cast<uint8_t>(c), f.ctrl};
  nm.valid[opposite(t)] = 1;
  if (--cs.credit[t] == 0) m_blocked[t] |= 1u << c;
  wake_neighbour(t, tc);
  ++tc.moves;
  const uint64_t k = x.exited_n;
  // The sends of the routers it passed (and of the first one, when it did not pass it itself):
  // those at or after the last statistics reset.
  const uint64_t sends = f.entered >= x.stats_from ? L + f.direct : express_sends_since(x, k, f.entered, now, f.direct);
  tc.color[c].forwarded += sends;
  tc.express_forwarded += sends;
  // The stall cycles of the routers it passed (ExpressRun): a_j(k) - max(a_{j-1}(k) + 1,
  // a_j(k-1) + 1) at router j, a_L(k) = now. None when it left at its free-flow cycle (then
  // a_j(k) = a_0(k) + j, and the one before was a cycle ahead of it everywhere).
  if (now != f.entered + L) add_express_stalls(x, k, f.entered, now, tc);

  x.exits[k & x.exit_mask] = now;
  ++x.exited_n;
  x.update_entry();
  x.last_exit = now;
  x.last_entered = f.entered;
  // The next one leaves one cycle later at the earliest (its own due cycle is scheduled already).
  if (!x.empty() && x.oldest().entered + L <= now) {
    tc.express_at[(now + 1) & (kExpressSlots - 1)].push_back(ExpressDelivery{&x});
    ++tc.express_pending;
  }
  // The first router waits for this exit: the wavelet L * depth behind may enter L cycles on.
  if (x.entry_waiting && x.entry_at != ExpressRun::kNever) {
    x.entry_waiting = false;
    x.line.front()->wake_self_at(now, x.entry_at, tc);
  }
}

uint64_t Router::express_sends_since(const ExpressRun& x, uint64_t k, uint64_t a0, uint64_t e, bool direct) {
  uint64_t n = direct && a0 >= x.stats_from ? 1 : 0;
  for (uint64_t j = 1; j <= static_cast<uint64_t>(x.hops); ++j) {
    if (x.send_cycle(j, k, a0, e) >= x.stats_from) ++n;
  }
  return n;
}

void Router::add_express_stalls(ExpressRun& x, uint64_t k, uint64_t a0, uint64_t e, ThreadCtx& tc) {
  const int t = x.exit_port;
  uint64_t total = 0;
  uint64_t below = a0;  // a_{j-1}(k)
  for (uint64_t j = 1; j <= static_cast<uint64_t>(x.hops); ++j) {
    const uint64_t here = x.send_cycle(j, k, a0, e);
    uint64_t ready = std::max(below + 1, x.stats_from);
    if (k > 0) ready = std::max(ready, x.send_cycle(j, k - 1, x.last_entered, x.last_exit) + 1);
    if (here > ready) {
      x.line[j]->s_stall[t] += here - ready;
      total += here - ready;
    }
    below = here;
  }
  if (total) tc.color_stall.add_n(1u << x.color, total);
}

void Router::wake_self_at(uint64_t now, uint64_t at, ThreadCtx& tc) {
  if (at <= now + 1) {
    tc.mark(this);
  } else if (m_timed_at != at) {
    m_timed_at = at;
    tc.timed.push(now, at, wake_index());
  }
}

// The first router of the lines that start here: the credit of its link into each line for the
// next wavelet (ExpressRun): it may send wavelet k from cycle e_{k-Ld} + L on. True if one
// that was blocked is not any more (a credit came back, as it were).
bool Router::express_entry_check(uint64_t now, ThreadCtx& tc) {
  bool freed = false;
  for (uint32_t m = m_xin_ports; m; m &= m - 1) {
    ExpressRun& x = *m_xin[ctz(m)];
    const uint32_t bit = 1u << x.color;
    if (now < x.entry_at) {
      m_blocked[x.exit_port] |= bit;
      if (x.entry_at == ExpressRun::kNever) x.entry_waiting = true;  // its exit wakes this router
      else wake_self_at(now, x.entry_at, tc);
    } else if (m_blocked[x.exit_port] & bit) {
      m_blocked[x.exit_port] &= ~bit;
      freed = true;
    }
  }
  return freed;
}

// The last router of the lines that end here, with credits just taken: a wavelet that waited
// for one leaves now (a line whose exit neighbour hands its credits over directly is tried
// from express_credit instead).
void Router::express_retry(uint64_t now, ThreadCtx& tc) {
  for (uint32_t m = m_xout_ports; m; m &= m - 1) {
    ExpressRun& x = *m_xout[ctz(m)];
    if (x.waiting && !x.direct) express_try(x, now, tc);
  }
}

// A credit for this router's exit link `port` of express line m_xout[port], freed by the exit
// neighbour (same thread) in cycle `now`. Only express_try reads that credit, at the start of a
// cycle (ThreadCtx::express_due), so taking it now is taking it in the next cycle, as the
// mailbox would; a wavelet waiting for it is tried then.
void Router::express_credit(int port, int color, uint64_t now, ThreadCtx& tc) {
  ++m_col[color].credit[port];
  m_blocked[port] &= ~(1u << color);
  ExpressRun& x = *m_xout[port];
  if (x.waiting) {
    tc.express_at[(now + 1) & (kExpressSlots - 1)].push_back(ExpressDelivery{&x});
    ++tc.express_pending;
  }
}

void ThreadCtx::express_due(uint64_t now) {
  auto& due = express_at[now & (kExpressSlots - 1)];
  for (const ExpressDelivery& d : due) d.run->last->express_try(*d.run, now, *this);
  express_pending -= due.size();
  due.clear();
}

void Router::link_wakes() {
  for (int p = 0; p < kNumLinkPorts; ++p) {
    if (const Router* n = m_nbr[p]) m_nbr_wake[p] = n->m_word * 64u + static_cast<uint32_t>(__builtin_ctzll(n->m_bit));
  }
}

int Router::buffered(int port, int color) const {
  if (!m_fifo || !(m_col[color].rx_any & port_bit(port))) return -1;
  return m_fifo[fifo_index(port, color)].count;
}

bool Router::sent_this_cycle(int port, uint64_t now, Wavelet* w) const {
  if (m_sent_stamp != now + 1 || !(m_sent_ports & port_bit(port))) return false;
  *w = Wavelet{m_out[port].payload, m_out[port].color, m_out[port].ctrl != 0};
  return true;
}

void Router::reset_stats(uint64_t cycles) {
  if (cycles > m_last_step + 1) m_last_step = cycles - 1;  // slept cycles before it do not count
  for (auto& v : s_forwarded) v = 0;
  for (auto& v : s_stall) v = 0;
  s_peak_occupancy = m_occupancy;
  for (int c = 0; c < kMaxColors; ++c) {
    m_col[c].peak = 0;
    for (uint32_t m = m_col[c].rx_any; m; m &= m - 1) {
      const uint8_t n = m_fifo[fifo_index(ctz(m), c)].count;
      if (n > m_col[c].peak) m_col[c].peak = n;
    }
  }
}

void Router::load_counts(uint64_t cycles, const uint64_t* forwarded, const uint64_t* stall, uint32_t peak_occupancy,
                         const uint32_t* color_peak, uint32_t occupancy) {
  for (int p = 0; p < kNumPorts; ++p) s_forwarded[p] = forwarded[p], s_stall[p] = stall[p];
  m_last_step = cycles ? cycles - 1 : 0;  // no slept cycles to add
  m_stall_ports = 0;
  m_stall_colors = 0;
  s_peak_occupancy = peak_occupancy;
  for (int c = 0; c < kMaxColors; ++c) m_col[c].peak = static_cast<uint8_t>(color_peak[c]);
  m_occupancy = occupancy;
}

// A router sleeps while every buffered head waits for a credit or for a full core queue (and
// the core itself has nothing to do): only an arrival or a returned credit can change that, and
// both wake it (the sender posts them with a wake-up). Credits still owed keep nobody awake.
// A core that sleeps until a cycle (its wake_cycle) wakes its router then. A host channel with
// something queued wakes it at the channel's next rate slot; an offer due whose buffer here is
// full waits for this router's own sends, which only an arrival, a credit or the core can allow.
uint64_t Router::schedule(uint64_t next) const {
  if (m_occupancy && !m_can_sleep) return next;
  uint64_t at = 0;  // the earliest cycle something is due (0: nothing)
  for (uint32_t m = m_chan_in; m; m &= m - 1) {  // the channels with something to inject
    const int p = ctz(m);
    const EdgeChannel* ch = m_chan[p];
    const uint64_t slot = ch->offer_cycle(next);  // the host's pushes do not move it
    if (slot > next) {
      if (!at || slot < at) at = slot;
    } else if (!((m_full_in[p] >> ch->fabric_offer(next)->color) & 1) || !m_agent) {
      return next;
    }
  }
  if (!m_agent) return at;
  uint64_t t;
  if (m_agent_due >= next) {
    t = m_agent_due == kAgentIdle ? 0 : m_agent_due;  // as of its last evaluate
  } else {
    t = m_agent->wake_cycle(next);
  }
  return t && (!at || t < at) ? t : at;
}

// The next switch position of color c (cyclically, or up to the last with hold).
void Router::advance_switch(int c) {
  const ColorRoute& r = m_route[c];
  ColorState& cs = m_col[c];
  if (cs.pos + 1 == r.npos) {
    if (r.hold) return;
    cs.pos = 0;
  } else {
    ++cs.pos;
  }
  cs.rx = r.pos[cs.pos].rx;
  cs.tx = r.pos[cs.pos].tx;
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
    const uint32_t meta = m_slots[m_fifo[fi].base + m_fifo[fi].head].meta;
    if (!ready(meta, now)) continue;
    if (is_swadv(meta)) {
      // A core's swadv (only ever at the ramp, which returns no credit): everything queued before
      // it on this color has left, so the switch advances now and nothing is sent. The next
      // head is chosen under the new position.
      remove_head(fi);
      cs.cur_in = static_cast<uint8_t>(p);
      advance_switch(c);
      select_head(c, now);
      return;
    }
    cs.cur_in = static_cast<uint8_t>(p);
    cs.pending = cs.tx;
    for (uint32_t t = cs.tx; t; t &= t - 1) m_want[ctz(t)] |= 1u << c;
    m_needs_head &= ~(1u << c);
    return;
  }
}

uint32_t Router::edge_full(int port, uint64_t now) const {
  if (port == kRamp) return m_agent_full;  // ~0 without an agent
  if (const EdgeChannel* ch = m_chan[port]) return ch->fabric_can_take(now) ? 0u : ~0u;
  return ~0u;
}

__attribute__((always_inline)) inline void Router::push(int port, int color, uint32_t payload, uint32_t kind,
                                                        uint64_t ready_at, uint64_t now) {
  const int fi = fifo_index(port, color);
  FifoMeta& f = m_fifo[fi];
  const int depth = m_depth;
  int tail = f.head + f.count;
  if (tail >= depth) tail -= depth;
  m_slots[f.base + tail] = Slot{payload, static_cast<uint32_t>(ready_at << 2) | kind};
  ++f.count;
  ++m_occupancy;
  ColorState& cs = m_col[color];
  cs.nonempty |= port_bit(port);
  if (f.count == depth) m_full_in[port] |= 1u << color;
  if (m_occupancy > s_peak_occupancy) s_peak_occupancy = m_occupancy;
  if (f.count > cs.peak) cs.peak = f.count;
  if (cs.pending) return;
  // An idle color fed by this port alone takes this wavelet as its head straight away when it
  // is the only one buffered and already forwardable (what select_head would pick this cycle).
  if (cs.rx == port_bit(port) && f.count == 1 && ready_at <= now && kind != kKindSwadv) {
    cs.cur_in = static_cast<uint8_t>(port);
    cs.pending = cs.tx;
    for (uint32_t t = cs.tx; t; t &= t - 1) m_want[ctz(t)] |= 1u << color;
    return;
  }
  m_needs_head |= 1u << color;
}

// Removes the head of buffer fi (no credit: pop's part that a swadv at the ramp needs too).
__attribute__((always_inline)) inline void Router::remove_head(int fi) {
  FifoMeta& f = m_fifo[fi];
  if (++f.head == m_depth) f.head = 0;
  --f.count;
  --m_occupancy;
  m_full_in[f.port] &= ~(1u << f.color);
  if (!f.count) m_col[f.color].nonempty &= static_cast<uint8_t>(~port_bit(f.port));
}

// Removes the head of buffer fi; a buffer fed by a neighbour returns that neighbour a credit
// through its mailbox of this cycle's parity.
template <bool kExpress>
__attribute__((always_inline)) inline void Router::pop(int fi, uint64_t now, ThreadCtx& tc) {
  remove_head(fi);
  const FifoMeta& f = m_fifo[fi];
  if (f.port < kNumLinkPorts) {
    if (Router* n = m_nbr[f.port]) {
      if (kExpress && __builtin_expect(m_xnbr_ports & port_bit(f.port), 0)) {
        n->express_credit(opposite(f.port), f.color, now, tc);
      } else {
        n->m_mail[now & 1].cred[opposite(f.port)] |= 1u << f.color;
        wake_neighbour(f.port, tc);
      }
    }
  }
}

// Takes in the credits the neighbours returned in the previous cycle (parity prev).
__attribute__((always_inline)) inline bool Router::take_credits(int prev) {
  uint64_t cred_lo, cred_hi;
  uint32_t* const cred = m_mail[prev].cred;
  std::memcpy(&cred_lo, &cred[0], 8);
  std::memcpy(&cred_hi, &cred[2], 8);
  if (!(cred_lo | cred_hi)) return false;
  for (int p = 0; p < kNumLinkPorts; ++p) {
    const uint32_t back = cred[p];
    if (!back) continue;
    cred[p] = 0;
    m_blocked[p] &= ~back;
    for (uint32_t b = back; b; b &= b - 1) ++m_col[ctz(b)].credit[p];
  }
  return true;
}

// 4. The ramp link from the agent and the host channels on edge ports each carry one wavelet.
// `*_full` are the start-of-cycle full buffers of those ports. True if that changed anything
// the router's heads depend on (a wavelet pushed, or room for a head waiting at the ramp).
__attribute__((always_inline)) inline bool Router::agent_and_channels(uint64_t now, ThreadCtx& tc, uint32_t ramp_full,
                                                                      uint32_t east_full, uint32_t west_full) {
  bool changed = false;
  if (m_agent && now < m_agent_due) {
    // Nothing is due at the agent before m_agent_due (see PeAgent::wake_cycle): its evaluate()
    // would only count the cycle, and its next one accounts for the cycles skipped.
    if (m_agent_due != kAgentIdle) ++tc.moves;  // busy, or a wake-up is due: not a deadlock
  } else if (m_agent) {
    Wavelet w;
    const uint32_t full_before = m_agent_full;
    const uint32_t r = m_agent->evaluate(now, ramp_full, &w);
    m_agent_saw_full = (r & PeAgent::kRampWait) ? ramp_full : 0;
    if (r & (PeAgent::kOffered | PeAgent::kConsumed)) ++tc.moves;
    m_agent_full = m_agent->full_colors();
    // The agent matters to this router's heads only through what it offers and the room in its
    // queues (heads waiting for the ramp).
    if ((r & PeAgent::kOffered) || (m_want[kRamp] && m_agent_full != full_before)) changed = true;
    if (r & PeAgent::kOffered) {
      push(kRamp, w.color, w.payload, w.local ? kKindSwadv : w.ctrl ? kKindCtrl : 0u,
           now + static_cast<uint64_t>(m_cfg->ramp_latency), now);
      if (!w.local) {  // a swadv never travels: not a wavelet in flight (select_head takes it)
        ++tc.injected;
        ++tc.pushed;
      }
    }
    if (m_agent->skips_evaluations()) {
      const uint64_t t = m_agent->wake_cycle(now + 1);
      m_agent_due = t ? t : kAgentIdle;
    }
  }
  // A ramp buffer the agent last saw full has freed (its head left, this cycle or before the
  // start-of-cycle copy): the agent can offer again from the next cycle.
  if (m_agent_saw_full & ~m_full_in[kRamp]) {
    m_agent_saw_full &= m_full_in[kRamp];
    if (now + 1 < m_agent_due) m_agent_due = now + 1;
  }
  for (uint32_t m = m_chan_in; m; m &= m - 1) {  // the channels with something to inject
    const int p = ctz(m);
    EdgeChannel* ch = m_chan[p];
    const Wavelet* offer = ch->fabric_offer(now);
    if (!offer || (((p == kEast ? east_full : west_full) >> offer->color) & 1)) continue;
    const Wavelet w = *offer;
    ch->fabric_took_offer(now);
    if (!ch->has_inject_work()) m_chan_in &= static_cast<uint8_t>(~port_bit(p));
    push(p, w.color, w.payload, w.ctrl ? kKindCtrl : 0u, now + static_cast<uint64_t>(m_cfg->hop_latency), now);
    ++tc.injected;
    ++tc.pushed;
    ++tc.moves;
    changed = true;
  }
  return changed;
}

template <bool kExpress>
uint64_t Router::step_impl(uint64_t now, ThreadCtx& tc) {
  const int prev = static_cast<int>((now + 1) & 1);  // parity of the previous cycle
  // The common case of a router between PEs (no core, no channel, one-cycle hops), empty and
  // with no stall on record: take the credits, and a lone wavelet of a color that only goes
  // straight on leaves at once (or two, that leave on different links). This does what push, the
  // arbiter and pop would do (the buffer's slot is not written: it is empty before and after;
  // the in-flight count does not change).
  const bool credits = take_credits(prev);
  if (kExpress) {
    if (m_xout_ports && credits) express_retry(now, tc);
    if (m_xin_ports && express_entry_check(now, tc)) m_can_sleep = false;  // its arbiters may now send
  }
  if (m_straight && !(m_occupancy | m_needs_head | m_stall_colors)) {
    uint32_t arrived;
    std::memcpy(&arrived, m_mail[prev].valid, sizeof arrived);
    if (!arrived) {
      m_can_sleep = !credits;
      return 0;  // empty, no core, no channel: nothing to do until an arrival or a credit
    }
    // A wavelet that goes straight on, over a link it may use (credit left), leaves at once.
    auto pass = [&](int p, int c, int t) __attribute__((always_inline)) {
      const Arrival& a = m_mail[prev].arr[p];
      ColorState& cs = m_col[c];
      const uint32_t bit = 1u << c;
      if (!cs.peak) cs.peak = 1;
      cs.cur_in = static_cast<uint8_t>(p);
      m_rr_out[t] = static_cast<uint8_t>(c + 1);
      m_out[t] = a;
      ++s_forwarded[t];
      ++tc.color[c].forwarded;
      if (kExpress && __builtin_expect(m_xin_ports & port_bit(p), 0)) {
        express_enter(*m_xin[p], a.payload, a.ctrl, now, tc);  // into an express line
      } else {
        Mailbox& nm = m_nbr[t]->m_mail[now & 1];
        nm.arr[opposite(t)] = a;
        nm.valid[opposite(t)] = 1;
        if (--cs.credit[t] == 0) m_blocked[t] |= bit;
        wake_neighbour(t, tc);
      }
      if (kExpress && __builtin_expect(m_xnbr_ports & port_bit(p), 0)) {
        m_nbr[p]->express_credit(opposite(p), c, now, tc);
      } else {
        m_nbr[p]->m_mail[now & 1].cred[opposite(p)] |= bit;  // it came over link p, so that neighbour exists
        wake_neighbour(p, tc);
      }
      ++tc.moves;
    };
    auto through = [&](int p, int* c) {  // the output link if the arrival on p can pass, else -1
      *c = m_mail[prev].arr[p].color;
      const int t = m_col[*c].through;
      return t >= 0 && !(m_blocked[t] & (1u << *c)) ? t : -1;
    };
    if ((arrived & (arrived - 1)) == 0) {
      const int p = ctz(arrived) >> 3;
      int c;
      const int t = through(p, &c);
      if (t >= 0) {
        std::memset(m_mail[prev].valid, 0, sizeof arrived);
        if (!s_peak_occupancy) s_peak_occupancy = 1;
        pass(p, c, t);
        m_sent_stamp = now + 1;
        m_sent_ports = port_bit(t);
        m_can_sleep = false;
        return 0;  // the credit's return wakes it
      }
    } else {
      // Two wavelets that pass each other (as the two directions of a column's streams do):
      // what the general path would do, both buffered for a moment (a peak of two) and both
      // sent on different links.
      const int p1 = ctz(arrived) >> 3;
      const uint32_t rest = arrived & ~(0xffu << (8 * p1));
      if ((rest & (rest - 1)) == 0) {
        const int p2 = ctz(rest) >> 3;
        int c1, c2;
        const int t1 = through(p1, &c1), t2 = through(p2, &c2);
        if (t1 >= 0 && t2 >= 0 && t1 != t2) {
          std::memset(m_mail[prev].valid, 0, sizeof arrived);
          if (s_peak_occupancy < 2) s_peak_occupancy = 2;
          pass(p1, c1, t1);
          pass(p2, c2, t2);
          m_sent_stamp = now + 1;
          m_sent_ports = static_cast<uint8_t>(port_bit(t1) | port_bit(t2));
          m_can_sleep = false;
          return 0;
        }
      }
    }
  }

  // Everything else: any mix of arrivals, heads, multicast, switch positions, a core and channels.
  const RouterConfig& cfg = *m_cfg;
  uint32_t arrived;
  std::memcpy(&arrived, m_mail[prev].valid, sizeof arrived);
  // A head waits for the ramp and the agent is due: its queues may have opened by themselves at
  // a cycle it named (PeAgent::full_colors), so the copy is read again.
  if (m_want[kRamp] && m_agent && now >= m_agent_due) m_agent_full = m_agent->full_colors();
  if (m_can_sleep && !(arrived | static_cast<uint32_t>(credits)) &&
      !(m_want[kRamp] && (m_want[kRamp] & ~edge_full(kRamp, now)))) {
    // Visited for its core or a channel alone: its last visit changed nothing and nothing came
    // in since, so its arbiters would find what they found then (every head blocked; the agent's
    // queues may open by themselves at a cycle it named, hence the check). The cycle counts as
    // a slept one (its stalls are added at the next full visit).
    m_can_sleep = !agent_and_channels(now, tc, m_full_in[kRamp], m_full_in[kEast], m_full_in[kWest]) && !m_needs_head;
    return schedule(now + 1);
  }
  // Cycles slept (or visited for the core alone, above) since the last full visit stalled what
  // that visit stalled (nothing changed meanwhile: an arrival or a credit would have woken it). A
  // stalled port means a stalled color; a router with nothing stalled may take the straight-on
  // path, which leaves the record alone.
  if (m_stall_colors && now > m_last_step + 1) {
    const uint64_t n = now - m_last_step - 1;
    for (uint32_t m = m_stall_ports; m; m &= m - 1) s_stall[ctz(m)] += n;
    tc.color_stall.add_n(m_stall_colors, n);
  }
  const uint32_t ramp_full = m_full_in[kRamp];  // start-of-cycle credit of the local injectors
  const uint32_t east_full = m_full_in[kEast], west_full = m_full_in[kWest];

  // 1. What the neighbours sent in the previous cycle (the credits they returned are in).
  if (arrived) {
    std::memset(m_mail[prev].valid, 0, sizeof arrived);
    const uint64_t ready_at = now - 1 + static_cast<uint64_t>(cfg.hop_latency);
    for (uint32_t m = arrived; m;) {  // one byte per port: visit the set ones
      const int p = ctz(m) >> 3;
      m &= ~(0xffu << (8 * p));
      const Arrival& a = m_mail[prev].arr[p];
      push(p, a.color, a.payload, a.ctrl ? kKindCtrl : 0u, ready_at, now);
    }
  }
  bool changed = arrived != 0 || credits;

  // 2. Heads for colors that need one.
  for (uint32_t m = m_needs_head; m; m &= m - 1) select_head(ctz(m), now);

  // 3. Every output link carries at most one wavelet; its arbiter serves colors round-robin.
  uint32_t wanting = 0, sent = 0;
  uint8_t sent_ports = 0, stall_ports = 0;
  bool any_next_want = false, edge_wait = false;
  uint32_t next_want[kNumPorts] = {};
  for (int p = 0; p < kNumPorts; ++p) {
    const uint32_t want = m_want[p];
    if (!want) continue;
    wanting |= want;
    Router* n = p < kNumLinkPorts ? m_nbr[p] : nullptr;
    if (!n && p != kRamp) edge_wait = true;  // an I/O channel: its host side and rate change without us
    const uint32_t eligible = want & ~(n ? m_blocked[p] : edge_full(p, now));
    if (!eligible) {
      ++s_stall[p];
      stall_ports |= port_bit(p);
      continue;
    }
    const int c = rr_pick(eligible, m_rr_out[p]);
    m_rr_out[p] = static_cast<uint8_t>(c + 1);
    const uint32_t bit = 1u << c;
    ColorState& cs = m_col[c];
    const int fi = fifo_index(cs.cur_in, c);
    const Slot& head = m_slots[m_fifo[fi].base + m_fifo[fi].head];
    const Wavelet w{head.payload, static_cast<uint8_t>(c), (head.meta & kKindCtrl) != 0};
    const Arrival out{head.payload, static_cast<uint8_t>(c), static_cast<uint8_t>(head.meta & kKindCtrl)};
    m_out[p] = out;
    sent_ports |= port_bit(p);
    m_want[p] &= ~bit;
    sent |= bit;
    ++s_forwarded[p];
    ++tc.color[c].forwarded;
    if (kExpress && __builtin_expect(m_xin_ports & port_bit(cs.cur_in), 0) && n) {
      // Into the express line that starts here (its credit: express_entry_check).
      express_enter(*m_xin[cs.cur_in], out.payload, out.ctrl, now, tc);
      ++tc.pushed;
    } else if (kExpress && __builtin_expect(m_xent_ports & port_bit(p), 0) && cs.credit[p] == m_depth &&
               now + 1 >= m_xent[p]->entry_at) {
      // The line's first router would pass it on in the next cycle: it has nothing of ours
      // buffered or on its way (the credit is whole) and may send it then (entry_at). So it
      // enters the line now, as sent by that router in the next cycle; the credit that router
      // would return in the next cycle is never short of one (depth >= 2), so it is not taken.
      express_enter(*m_xent[p], out.payload, out.ctrl, now + 1, tc, true);  // (its send counted at exit)
      ++tc.pushed;
    } else if (n) {
      const int q = opposite(p);
      Mailbox& nm = n->m_mail[now & 1];
      nm.arr[q] = out;
      nm.valid[q] = 1;
      if (--cs.credit[p] == 0) m_blocked[p] |= bit;
      ++tc.pushed;  // in flight from here (on the link, then in n's buffer)
      wake_neighbour(p, tc);
    } else if (p == kRamp) {
      const uint64_t due = m_agent->deliver(w, now + static_cast<uint64_t>(cfg.ramp_latency));
      m_agent_full = m_agent->full_colors();
      if (due < m_agent_due) m_agent_due = due;  // an arrival: evaluate the agent then (0: this cycle)
      ++tc.delivered;
    } else {
      m_chan[p]->fabric_deliver(w, now, now + static_cast<uint64_t>(cfg.hop_latency));
      ++tc.delivered;
      ++tc.to_channels;
    }
    cs.pending &= static_cast<uint8_t>(~port_bit(p));
    if (cs.pending) {
      ++tc.nonfinal;  // a copy left; the head stays for the other outputs
    } else {
      // cur_in stays as the round-robin reference; pending == 0 marks the color idle. A push
      // re-arms head selection, so only arm it here if more is already buffered.
      const bool more = m_fifo[fi].count > 1 || (cs.nonempty & ~port_bit(cs.cur_in));
      pop<kExpress>(fi, now, tc);
      ++tc.popped;
      if (w.ctrl && m_route[c].npos > 1) advance_switch(c);
      if (more) {
        // A color fed by one port has one candidate: the next wavelet of this buffer. Take it
        // as the head for the next cycle now (its outputs join the arbiters after this loop).
        const FifoMeta& f = m_fifo[fi];
        const uint32_t meta = f.count ? m_slots[f.base + f.head].meta : 0;
        if (cs.rx == port_bit(cs.cur_in) && f.count && ready(meta, now + 1) && !is_swadv(meta)) {
          cs.pending = cs.tx;
          for (uint32_t t = cs.tx; t; t &= t - 1) next_want[ctz(t)] |= bit;
          any_next_want = true;
        } else {
          m_needs_head |= bit;
        }
      }
    }
  }
  if (any_next_want) {
    for (int p = 0; p < kNumPorts; ++p) m_want[p] |= next_want[p];
  }
  if (sent_ports) {
    m_sent_stamp = now + 1;
    m_sent_ports = sent_ports;
    tc.moves += static_cast<uint64_t>(__builtin_popcount(sent_ports));
  }
  const uint32_t stalled = wanting & ~sent;
  if (stalled) tc.color_stall.add(stalled);
  m_stall_ports = stall_ports;
  m_stall_colors = stalled;
  m_last_step = now;
  changed |= sent_ports != 0;

  // 4. The agent and the channels.
  if (agent_and_channels(now, tc, ramp_full, east_full, west_full)) changed = true;
  m_can_sleep = !changed && !m_needs_head && !edge_wait;
  return schedule(now + 1);
}

template uint64_t Router::step_impl<false>(uint64_t, ThreadCtx&);
template uint64_t Router::step_impl<true>(uint64_t, ThreadCtx&);

}  // namespace wafersim
