#include "hw/fabric.h"

#include <algorithm>
#include <cstdlib>
#include <random>
#include <sstream>

namespace wafersim {
namespace {

std::string color_port_msg(int x, int y, int color, int port) {
  std::ostringstream os;
  os << Fabric::pe_name(x, y) << " color " << color << " port " << port_name(port);
  return os.str();
}

}  // namespace

Fabric::Fabric(const HwConfig& cfg) : m_cfg(cfg) {
  m_cfg.validate();
  m_routers.resize(static_cast<size_t>(width()) * height());
  const int h = height(), n = m_cfg.io.channels(h);  // centred on the edge
  const double per_cycle = m_cfg.io.channel_gbps * 1e3 / (32.0 * m_cfg.fabric.clock_mhz);
  for (int i = 0; i < n; ++i) {
    const int row = m_cfg.io.channel_row(h, i);
    m_channel_rows.push_back(row);
    for (int side : {kEast, kWest}) {
      m_channels[side].push_back(
          std::make_unique<EdgeChannel>(this, side, i, row, m_cfg.io.queue_depth, per_cycle));
    }
  }
  m_ctx.resize(static_cast<size_t>(m_cfg.sim.threads));
  m_pool = std::make_unique<WorkerPool>(m_cfg.sim.threads);
  m_cycle_job = [this](int t) { step_phase(t, m_now); };
}

Fabric::~Fabric() = default;

std::string Fabric::pe_name(int x, int y) {
  return "wafer.pe_" + std::to_string(x) + "_" + std::to_string(y);
}

Router& Fabric::ensure_router(int x, int y) {
  if (!contains(x, y)) {
    std::ostringstream os;
    os << "PE (" << x << ", " << y << ") is outside the " << width() << " x " << height()
       << " fabric";
    throw ConfigError(os.str());
  }
  if (m_finalized) throw ConfigError("routes and agents must be set before the first cycle");
  auto& slot = m_routers[index(x, y)];
  if (!slot) slot = std::make_unique<Router>(static_cast<uint32_t>(index(x, y)), x, y, m_cfg.router);
  return *slot;
}

void Fabric::set_route(int x, int y, int color, const ColorRoute& route) {
  if (color < 0 || color >= m_cfg.router.colors) {
    throw ConfigError(pe_name(x, y) + ": color " + std::to_string(color) + " is out of range (router.colors = " +
                      std::to_string(m_cfg.router.colors) + ")");
  }
  if (route.npos < 1 || route.npos > kMaxSwitchPositions) {
    throw ConfigError(pe_name(x, y) + " color " + std::to_string(color) + ": " +
                      std::to_string(route.npos) + " switch positions (1 to 4 allowed)");
  }
  ensure_router(x, y).set_route(color, route);
}

void Fabric::attach_agent(int x, int y, std::unique_ptr<PeAgent> agent) {
  Router& r = ensure_router(x, y);
  if (r.agent()) throw ConfigError(pe_name(x, y) + " already has an agent");
  r.set_agent(agent.get());
  agent->m_fault_flag = &m_fault_flag;
  m_agents.push_back(std::move(agent));
}

PeAgent* Fabric::agent(int x, int y) const {
  const Router* r = router(x, y);
  return r ? r->agent() : nullptr;
}

EdgeChannel* Fabric::channel(int side, int index) {
  if ((side != kEast && side != kWest) || index < 0 || index >= channels_per_edge()) return nullptr;
  return m_channels[side][static_cast<size_t>(index)].get();
}

EdgeChannel* Fabric::channel_at_row(int side, int row) {
  const auto it = std::find(m_channel_rows.begin(), m_channel_rows.end(), row);
  return it == m_channel_rows.end() ? nullptr : channel(side, static_cast<int>(it - m_channel_rows.begin()));
}

// Every route must stay on the fabric (or leave through an I/O channel), be accepted by the
// router it feeds, and have somewhere to go; a ramp needs an agent.
void Fabric::validate_routes() const {
  for (const auto& rp : m_routers) {
    if (!rp) continue;
    const Router& r = *rp;
    if (const PeAgent* a = r.agent()) {
      uint32_t from_ramp = 0, to_ramp = 0;
      for (uint32_t m = r.routed_colors(); m; m &= m - 1) {
        const int c = __builtin_ctz(m);
        if (r.route(c)->rx_any() & port_bit(kRamp)) from_ramp |= 1u << c;
        if (r.route(c)->tx_any() & port_bit(kRamp)) to_ramp |= 1u << c;
      }
      if (const uint32_t bad = a->send_colors() & ~from_ramp) {
        throw ConfigError(pe_name(r.x(), r.y()) + " sends color " + std::to_string(__builtin_ctz(bad)) +
                          " on its ramp, but no route of that color accepts from the ramp (R) there");
      }
      if (const uint32_t bad = to_ramp & ~a->receive_colors()) {
        throw ConfigError(pe_name(r.x(), r.y()) + " routes color " + std::to_string(__builtin_ctz(bad)) +
                          " to its ramp, but the core/endpoint there does not take that color");
      }
    }
    for (uint32_t m = r.routed_colors(); m; m &= m - 1) {
      const int c = __builtin_ctz(m);
      const ColorRoute& route = *r.route(c);
      for (int i = 0; i < route.npos; ++i) {
        if (route.pos[i].rx && !route.pos[i].tx) {
          throw ConfigError(pe_name(r.x(), r.y()) + " color " + std::to_string(c) + " position " +
                            std::to_string(i) + " accepts from " + port_set_name(route.pos[i].rx) +
                            " but sends nowhere");
        }
      }
      const uint8_t both = route.rx_any() | route.tx_any();
      if ((both & port_bit(kRamp)) && !r.agent()) {
        throw ConfigError(color_port_msg(r.x(), r.y(), c, kRamp) +
                          ": the route uses the ramp but no core or endpoint sits there");
      }
      for (int p = 0; p < kNumLinkPorts; ++p) {
        if (!(both & port_bit(p))) continue;
        const int nx = r.x() + port_dx(p), ny = r.y() + port_dy(p);
        const bool sends = route.tx_any() & port_bit(p);
        if (!contains(nx, ny)) {
          const bool io = (p == kEast || p == kWest) &&
                          std::find(m_channel_rows.begin(), m_channel_rows.end(), r.y()) != m_channel_rows.end();
          if (!io) {
            throw ConfigError("route leaves the fabric edge: " + color_port_msg(r.x(), r.y(), c, p) +
                              " points off the fabric and row " + std::to_string(r.y()) +
                              " has no I/O channel on that edge");
          }
          continue;
        }
        if (sends) {
          const Router* n = router(nx, ny);
          if (!n || !n->accepts(opposite(p), c)) {
            throw ConfigError(color_port_msg(r.x(), r.y(), c, p) + " sends to " + pe_name(nx, ny) +
                              ", whose route for color " + std::to_string(c) + " does not accept from " +
                              port_name(opposite(p)));
          }
        }
      }
    }
  }
}

void Fabric::finalize() {
  if (m_finalized) return;
  validate_routes();
  const int threads = m_cfg.sim.threads;
  for (auto& rp : m_routers) {
    if (!rp) continue;
    Router& r = *rp;
    for (int p = 0; p < kNumLinkPorts; ++p) {
      const int nx = r.x() + port_dx(p), ny = r.y() + port_dy(p);
      if (contains(nx, ny)) {
        r.connect(p, router(nx, ny));
      } else if (p == kEast || p == kWest) {
        r.connect_channel(p, channel_at_row(p, r.y()));
      }
    }
    r.allocate_buffers();
  }
  // Row stripes: thread t steps the routers of rows [first[t], first[t + 1]), which hold about
  // 1/T of the fabric's expected work (stripe_rows).
  m_stripes = stripe_rows(threads);
  for (auto& rp : m_routers) {
    if (!rp) continue;
    int t = 0;
    while (rp->y() >= m_stripes[static_cast<size_t>(t) + 1]) ++t;
    rp->m_owner = static_cast<uint8_t>(t);
  }
  // Wake-set bits: each owner's routers in id order (owners are row stripes, so they come in
  // order too), from a word of their own.
  m_first_word.assign(1, 0);
  m_by_bit.clear();
  auto close_stripes = [&](size_t until) {  // pad each stripe before owner `until` to a whole word
    while (m_first_word.size() <= until) {
      m_by_bit.resize((m_by_bit.size() + 63) / 64 * 64, nullptr);
      m_first_word.push_back(m_by_bit.size() / 64);
    }
  };
  for (auto& rp : m_routers) {
    if (!rp) continue;
    close_stripes(rp->m_owner);
    rp->m_word = static_cast<uint32_t>(m_by_bit.size() / 64);
    rp->m_bit = uint64_t{1} << (m_by_bit.size() % 64);
    m_by_bit.push_back(rp.get());
  }
  close_stripes(static_cast<size_t>(threads));
  for (auto& rp : m_routers) {
    if (rp) rp->link_wakes();
  }
  for (ThreadCtx& tc : m_ctx) {
    for (auto& bits : tc.wake_bits) bits.assign(m_first_word.back(), 0);
  }
  build_express();
  m_finalized = true;
  // The vector engine steps (and keeps arrays for) every lane of the fabric's blocks, the routers
  // only the routers that have work: it pays off where most PEs route something.
  size_t routed = 0;
  for (const auto& rp : m_routers) routed += rp ? 1 : 0;
  const bool dense = routed * 4 >= m_routers.size();
  if (m_vector_allowed && m_cfg.router.vector && dense && VectorFabric::supported(*this).empty()) {
    m_vector = std::make_unique<VectorFabric>(*this);
  }
  for (auto& rp : m_routers) {
    if (rp && rp->has_work()) wake(rp.get());
  }
}

// Contiguous row stripes of about equal expected work, so that threads share the work of a
// program that uses a few rows of a large fabric (a weight-streaming column, a small model's
// layer regions) rather than of its empty rows. A router that exists (something is routed
// through it) counts 1, one with an agent (a core, a traffic endpoint) kAgentWeight: under load
// an agent's evaluation and the visits its traffic brings cost several visits of a relay router.
// Without routers the rows are split evenly. The split changes host time only: results do not
// depend on the owners (fabric.md).
std::vector<int> Fabric::stripe_rows(int threads) const {
  constexpr uint64_t kAgentWeight = 8;
  const int h = height();
  std::vector<uint64_t> below(static_cast<size_t>(h) + 1, 0);  // weight of rows [0, y)
  for (int y = 0; y < h; ++y) {
    uint64_t w = 0;
    for (int x = 0; x < width(); ++x) {
      if (const Router* r = router(x, y)) w += r->agent() ? kAgentWeight : 1;
    }
    below[static_cast<size_t>(y) + 1] = below[static_cast<size_t>(y)] + w;
  }
  const uint64_t total = below.back();
  std::vector<int> first(static_cast<size_t>(threads) + 1, h);
  first[0] = 0;
  for (int t = 1; t < threads; ++t) {
    if (total == 0) {
      first[static_cast<size_t>(t)] = static_cast<int>(static_cast<int64_t>(t) * h / threads);
      continue;
    }
    // The first row at which the stripes before hold at least t/T of the weight.
    int y = first[static_cast<size_t>(t) - 1];
    while (y < h && below[static_cast<size_t>(y)] * static_cast<uint64_t>(threads) < total * static_cast<uint64_t>(t)) ++y;
    first[static_cast<size_t>(t)] = y;
  }
  return first;
}

// Express lines: runs of two or more routers along a column (or a row) whose colors all go
// straight on along it, owned by one thread, at most kExpressSlots long; one ExpressRun per
// direction of travel that carries exactly one color (with more, the order in which the
// routers' arbiters serve them would have to be kept).
void Fabric::build_express() {
  const RouterConfig& rc = m_cfg.router;
  if (!m_express_allowed || !rc.express || !rc.straight_path || rc.hop_latency != 1 || rc.buffer_depth < 2) return;
  for (int axis : {kNorth, kEast}) {
    const bool vertical = axis == kNorth;
    const int lines = vertical ? width() : height(), len = vertical ? height() : width();
    std::vector<Router*> run;
    auto close = [&] {
      for (int dir : {vertical ? kSouth : kEast, vertical ? kNorth : kWest}) {
        if (run.size() < 2) break;
        uint32_t colors = 0;
        for (const Router* r : run) {
          for (uint32_t m = r->routed_colors(); m; m &= m - 1) {
            if (r->route(__builtin_ctz(m))->pos[0].tx & port_bit(dir)) colors |= 1u << __builtin_ctz(m);
          }
        }
        if (__builtin_popcount(colors) != 1) continue;
        auto x = std::make_unique<ExpressRun>();
        x->line = run;
        if (dir == kNorth || dir == kWest) std::reverse(x->line.begin(), x->line.end());
        x->last = x->line.back();
        x->exit_port = dir;
        x->hops = static_cast<int>(x->line.size()) - 1;
        x->color = __builtin_ctz(colors);
        x->depth = rc.buffer_depth;
        size_t ring = 1;
        while (ring < static_cast<size_t>(x->hops) * static_cast<size_t>(rc.buffer_depth) + 2) ring <<= 1;
        x->exits.assign(ring, 0);
        x->flights.assign(ring, ExpressRun::Flight{});
        x->exit_mask = ring - 1;
        x->line.front()->set_express(opposite(dir), x.get(), 0, nullptr);
        x->last->set_express(0, nullptr, dir, x.get());
        // An exit neighbour of the same thread hands its credits straight to the last router.
        x->direct = x->last->take_credits_directly(dir);
        x->line.front()->let_neighbour_enter(opposite(dir), x.get());
        m_express.push_back(std::move(x));
      }
      run.clear();
    };
    for (int l = 0; l < lines; ++l) {
      for (int i = 0; i < len; ++i) {
        Router* r = vertical ? router(l, i) : router(i, l);
        const bool fits = r && r->express_axis() == axis;
        if (!fits || (!run.empty() && (run.back()->m_owner != r->m_owner || run.size() == static_cast<size_t>(kExpressSlots)))) close();
        if (fits) run.push_back(r);
      }
      close();
    }
  }
}

// Between cycles (the host, the timed list): the router steps in cycle m_cycle.
void Fabric::wake(Router* r) { mark_between(m_cycle, r); }

void Fabric::mark_between(uint64_t cycle, const Router* r) {
  m_ctx[0].wake_bits[cycle & 1][r->m_word] |= r->m_bit;
}

bool Fabric::wake_edge(const EdgeChannel& ch, int color) {
  const int x = ch.side() == kEast ? width() - 1 : 0;
  Router* r = router(x, ch.row());
  if (!r || !r->accepts(ch.side(), color)) {
    throw ConfigError("I/O channel " + std::string(port_name(ch.side())) + std::to_string(ch.index()) +
                      " (row " + std::to_string(ch.row()) + "): color " + std::to_string(color) +
                      " is not routed into the fabric at " + pe_name(x, ch.row()));
  }
  r->channel_has_input(ch.side());
  if (m_finalized) wake(r);
  return m_finalized;
}

// Thread t's routers marked for cycle `now`, word by word in id order: f(bits, routers) per
// word, router i of the word being routers[i] when bit i is set.
template <typename F>
void Fabric::collect(int t, uint64_t now, F&& f) {
  const size_t end = m_first_word[static_cast<size_t>(t) + 1];
  for (size_t k = m_first_word[static_cast<size_t>(t)]; k < end; ++k) {
    uint64_t b = 0;
    for (ThreadCtx& w : m_ctx) {
      uint64_t& v = w.wake_bits[now & 1][k];
      b |= v;
      v = 0;
    }
    if (b) f(b, &m_by_bit[k * 64]);
  }
}

void Fabric::step_phase(int t, uint64_t now) {
  ThreadCtx& tc = m_ctx[static_cast<size_t>(t)];
  tc.moves = 0;
  const uint64_t next = now + 1;
  tc.next_bits = tc.wake_bits[next & 1].data();
  if (tc.express_pending) tc.express_due(now);  // before the visits: it may wake routers for this cycle
  const bool express = !m_express.empty();
  auto visit = [&](Router* r) {
    const uint64_t t = express ? r->step(now, tc) : r->step_impl<false>(now, tc);
    if (t > next) {
      if (r->m_timed_at != t) {  // one entry per wake-up cycle, however often it is visited meanwhile
        r->m_timed_at = t;
        tc.timed.push(now, t, r->wake_index());
      }
    } else if (t) {
      tc.mark(r);
    }
  };
  // The cycle's routers in id order, then the visits in the configured order.
  // (The list has room for every router of the thread: 64 per word of its wake sets.)
  std::vector<Router*>& act = tc.active;
  const size_t room = (m_first_word[static_cast<size_t>(t) + 1] - m_first_word[static_cast<size_t>(t)]) * 64;
  if (act.size() < room) act.resize(room);
  Router** const list = act.data();
  size_t n = 0;
  collect(t, now, [&](uint64_t b, Router* const* by_bit) {
    for (; b; b &= b - 1) list[n++] = by_bit[__builtin_ctzll(b)];
  });
  tc.visits = n;
  switch (m_cfg.sim.visit_order) {
    case VisitOrder::kForward: {
      // Each visit fetches the lines of the router a few visits on (routers live on the heap; a
      // sparse wake set has one or two routers per word, so this looks across words).
      constexpr size_t kAhead = 4;
      for (size_t i = 0; i < n; ++i) {
        if (i + kAhead < n) list[i + kAhead]->prefetch(now);
        visit(list[i]);
      }
      break;
    }
    case VisitOrder::kReverse:  // (the other orders are for the determinism tests)
      for (size_t i = n; i-- > 0;) visit(list[i]);
      break;
    case VisitOrder::kShuffle: {
      std::mt19937_64 rng(m_cfg.sim.seed ^ (now * 0x9e3779b97f4a7c15ull) ^ static_cast<uint64_t>(t));
      std::shuffle(list, list + n, rng);
      for (size_t i = 0; i < n; ++i) visit(list[i]);
      break;
    }
  }
}

void Fabric::step() {
  if (!m_finalized) finalize();
  if (m_vector) {
    m_vector->step(m_pool.get());
    m_cycle = m_vector->cycle();
    if (m_fault_flag.load(std::memory_order_relaxed)) throw PeFaultError(describe_faults());
    if (m_cfg.sim.watchdog_cycles == 0) return;
    if (!m_vector->moved() && m_vector->in_flight() != 0) {
      if (++m_idle_cycles >= m_cfg.sim.watchdog_cycles) throw DeadlockError(describe_stuck());
    } else {
      m_idle_cycles = 0;
    }
    return;
  }
  m_now = m_cycle;
  // With few routers to step the hand-offs to the other threads cost more than they save (the
  // demo's CNN on 35 PEs ran at half the speed on two): the caller steps every thread's stripe
  // itself, in stripe order, which equals any order of the threads' visits (the results do not
  // depend on the threads). The last cycle's visits decide.
  if (m_pool->size() > 1 && m_last_visits < static_cast<uint64_t>(m_cfg.sim.threaded_visits)) {
    for (int t = 0; t < m_pool->size(); ++t) step_phase(t, m_now);
  } else {
    m_pool->run(m_cycle_job);
  }
  end_cycle(m_now);
}

void Fabric::run(uint64_t cycles) {
  for (uint64_t i = 0; i < cycles; ++i) step();
}

void Fabric::end_cycle(uint64_t now) {
  uint64_t moves = 0, pushed = 0, popped = 0;
  bool timed = false;
  m_last_visits = 0;
  for (ThreadCtx& tc : m_ctx) {
    m_last_visits += tc.visits;
    moves += tc.moves;
    m_channel_deliveries += tc.to_channels;
    tc.to_channels = 0;
    pushed += tc.pushed;
    popped += tc.popped;
    // Routers whose agent's busy stretch ends now rejoin (unless something woke them already).
    tc.timed.take(now, [&](uint32_t k, uint64_t c) {
      Router* r = m_by_bit[k];
      if (r->m_timed_at == c) r->m_timed_at = 0;
      mark_between(c, r);
    });
    timed |= !tc.timed.empty() || tc.express_pending;  // express wavelets are on their way
  }
  m_cycle = now + 1;
  if (m_fault_flag.load(std::memory_order_relaxed)) throw PeFaultError(describe_faults());
  if (m_cfg.sim.watchdog_cycles == 0) return;
  if (moves == 0 && pushed != popped && !timed) {
    if (++m_idle_cycles >= m_cfg.sim.watchdog_cycles) throw DeadlockError(describe_stuck());
  } else {
    m_idle_cycles = 0;
  }
}

std::string Fabric::describe_stuck() const {
  sync_vector();
  std::vector<const Router*> stuck;
  for (const auto& rp : m_routers) {
    if (rp && rp->occupancy()) stuck.push_back(rp.get());
  }
  std::ostringstream os;
  os << "deadlock: " << totals().in_flight << " wavelets buffered and nothing moved for "
     << m_idle_cycles << " cycles (sim.watchdog_cycles) at cycle " << m_cycle << "; stuck:";
  const size_t kShow = 16;
  for (size_t i = 0; i < stuck.size() && i < kShow; ++i) {
    const Router& r = *stuck[i];
    os << "\n  " << pe_name(r.x(), r.y()) << ":";
    for (uint32_t m = r.routed_colors(); m; m &= m - 1) {
      const int c = __builtin_ctz(m);
      for (int p = 0; p < kNumPorts; ++p) {
        const int b = m_vector ? (m_vector->input_port(r.x(), r.y(), c) == p ? static_cast<int>(m_vector->buffered(r.x(), r.y(), c)) : 0)
                               : r.buffered(p, c);
        if (b > 0) os << " color " << c << " (" << b << " from " << port_name(p) << ")";
      }
    }
  }
  if (stuck.size() > kShow) os << "\n  ... and " << stuck.size() - kShow << " more PEs";
  // WAFERSIM_DEADLOCK_CORES=1: every core's task, pc and ops in flight (a debugging aid).
  if (const char* e = std::getenv("WAFERSIM_DEADLOCK_CORES"); e && *e == '1') {
    for (const auto& rp : m_routers) {
      if (!rp || !rp->agent()) continue;
      const std::string st = rp->agent()->debug_state();
      if (!st.empty()) os << "\n  core " << pe_name(rp->x(), rp->y()) << ": " << st;
    }
  }
  return os.str();
}

std::string Fabric::describe_faults() const {
  std::ostringstream os;
  int n = 0;
  for (const auto& rp : m_routers) {
    if (!rp || !rp->agent() || rp->agent()->fault().empty()) continue;
    if (n++) os << "\n";
    os << pe_name(rp->x(), rp->y()) << ": " << rp->agent()->fault();
  }
  return os.str();
}

uint64_t Fabric::in_flight() const {
  sync_vector();
  uint64_t pushed = 0, popped = 0;
  for (const ThreadCtx& tc : m_ctx) {
    pushed += tc.pushed;
    popped += tc.popped;
  }
  return pushed - popped;
}

FabricTotals Fabric::totals() const {
  sync_vector();
  FabricTotals t;
  t.cycles = m_cycle;
  for (const ThreadCtx& tc : m_ctx) {
    t.injected += tc.injected;
    t.delivered += tc.delivered;
    t.multicast_copies += tc.nonfinal;
    t.forwarded += tc.express_forwarded;
  }
  t.in_flight = in_flight();
  for (const auto& rp : m_routers) {
    if (!rp) continue;
    for (uint64_t f : rp->s_forwarded) t.forwarded += f;
  }
  return t;
}

uint64_t Fabric::active_routers() const {
  if (!m_finalized) return 0;
  if (m_vector) return m_vector->active();
  uint64_t n = 0;
  for (size_t k = 0; k < m_first_word.back(); ++k) {
    uint64_t b = 0;
    for (const ThreadCtx& w : m_ctx) b |= w.wake_bits[m_cycle & 1][k];
    n += static_cast<uint64_t>(__builtin_popcountll(b));
  }
  return n;
}

void Fabric::reset_stats() {
  m_stats_from = m_cycle;
  if (m_vector) {
    m_vector->reset_stats();
    m_synced_at = ~uint64_t{0};
  }
  for (auto& rp : m_routers) {
    if (rp) rp->reset_stats(m_cycle);
  }
  for (ThreadCtx& tc : m_ctx) {
    for (ColorCounters& c : tc.color) c = ColorCounters{};
    tc.color_stall.clear();
  }
  for (auto& x : m_express) x->stats_from = m_cycle;
  for (ThreadCtx& tc : m_ctx) tc.express_forwarded = 0;  // (the routers' own counts start again too)
}

void Fabric::settle_agents() {
  for (auto& rp : m_routers) {
    if (rp && rp->agent()) rp->agent()->settle(m_cycle);
  }
}

std::vector<ColorCounters> Fabric::color_counters() const {
  sync_vector();
  std::vector<ColorCounters> v(static_cast<size_t>(m_cfg.router.colors));
  for (const ThreadCtx& tc : m_ctx) {
    for (size_t c = 0; c < v.size(); ++c) {
      v[c].forwarded += tc.color[c].forwarded;
      v[c].stall += tc.color_stall.total(static_cast<int>(c));
    }
  }
  for (const auto& rp : m_routers) {
    if (!rp) continue;
    for (size_t c = 0; c < v.size(); ++c) v[c].peak = std::max(v[c].peak, rp->peak_of_color(static_cast<int>(c)));
    // Stalls of the cycles it has slept through so far (counted at its next visit).
    if (const uint64_t n = rp->slept(m_cycle)) {
      for (uint32_t m = rp->sleeping_stall_colors(); m; m &= m - 1) v[static_cast<size_t>(__builtin_ctz(m))].stall += n;
    }
  }
  return v;
}

std::vector<const Router*> Fabric::routers() const {
  sync_vector();
  std::vector<const Router*> v;
  for (const auto& rp : m_routers) {
    if (rp) v.push_back(rp.get());
  }
  return v;
}

void Fabric::sync_vector_now() const {
  VectorFabric& v = *m_vector;
  v.sync_endpoints();
  uint64_t fwd[kNumPorts], stall[kNumPorts];
  uint32_t peak[kMaxColors] = {};
  for (const auto& rp : m_routers) {
    if (!rp) continue;
    Router& r = *rp;
    for (int p = 0; p < kNumPorts; ++p) fwd[p] = v.forwarded(r.x(), r.y(), p), stall[p] = v.stall(r.x(), r.y(), p);
    for (int c = 0; c < m_cfg.router.colors; ++c) peak[c] = v.peak_of_color(r.x(), r.y(), c);
    r.load_counts(m_cycle, fwd, stall, v.peak_occupancy(r.x(), r.y()), peak, v.occupancy(r.x(), r.y()));
  }
  // The totals, as if one thread had counted them (the others' stay at zero).
  auto& ctx = const_cast<std::vector<ThreadCtx>&>(m_ctx);
  for (ThreadCtx& tc : ctx) {
    tc.injected = tc.delivered = tc.to_channels = tc.pushed = tc.popped = tc.nonfinal = tc.express_forwarded = 0;
    for (ColorCounters& c : tc.color) c = ColorCounters{};
    tc.color_stall.clear();
  }
  ThreadCtx& t0 = ctx[0];
  t0.injected = v.injected();
  t0.delivered = v.delivered();
  t0.pushed = v.in_flight();
  t0.nonfinal = v.multicast_copies();
  for (int c = 0; c < m_cfg.router.colors; ++c) {
    t0.color[c].forwarded = v.color_forwarded(c);
    t0.color_stall.add_n(1u << c, v.color_stall(c));
  }
  m_synced_at = m_cycle;
}

}  // namespace wafersim
