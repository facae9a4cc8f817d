// One PE's router: per-color routes with switch positions, per-(input port, color) buffers,
// a round-robin arbiter per output port, and credit backpressure. Plain C++, one visit per cycle
// (step()): what neighbours exchange goes through mailboxes by cycle parity, not a commit phase.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "hw/bit_counters.h"
#include "hw/config.h"
#include "hw/pe_agent.h"
#include "hw/timed_wakes.h"
#include "hw/wavelet.h"

namespace wafersim {

class EdgeChannel;
class Router;

// A line of routers between PEs that only pass one color straight on along it in one direction
// (an express line, built by the fabric when Fabric::allow_express() was called). Its wavelets
// are not handed from router to router: the line keeps them, oldest first, with the cycle the
// first router sent each (a_0), and works out when each leaves the last router and what the
// routers between would have done. With one-cycle hops, one color and buffers of depth d >= 2,
// the routers form a pipeline of FIFOs whose send cycles a_j(k) (router j = 1..L, wavelet k)
// follow a_j(k) = max(a_{j-1}(k) + 1, a_j(k-1) + 1, a_{j+1}(k-d) + 1), the last term being
// the credit of the buffer ahead; a_L(k) = e_k, the exit. Unrolled, that gives
//   e_k = max(a_0(k) + L, e_{k-1} + 1, the first cycle the last router has a credit for it)
//   a_j(k) = max(a_0(k) + j, e_{k-(L-j)d} + L - j)                   (0 < j < L)
// (a path through the recurrence that turns back costs 2 per d wavelets, so d >= 2 makes the
// straight ones the longest). So a wavelet leaves at e_k (Router::express_try), into the exit
// neighbour's mailbox with the last router's credit taken, as the hops would have done; when
// that credit is missing it waits for the last router's next visit with credits. The first
// router may send wavelet k into the line only from cycle e_{k-Ld} + L (its credit for the
// second router: a_1(k-d) + 1), which it checks at each visit (Router::express_entry_check),
// so a line that backs up all the way holds the wavelets behind it in the first router, as it
// would. The stall cycles of the routers between, a_j(k) - max(a_{j-1}(k) + 1, a_j(k-1) + 1)
// each, are added to their counters when the wavelet leaves. Where the neighbours at either end
// are stepped by the same thread, the exit neighbour hands the credits it frees straight to the
// last router (express_credit), and the entry neighbour's general path puts a wavelet straight
// into the line when the first router would pass it on in the next cycle (its credit for that
// router whole, entry_at reached), so neither end router is visited for them. The neighbours
// see the same arrivals, credits and stalls as without it; what is not kept are the line's own forwarded
// counts per port, peaks and trace records (which is why only runs that read none of them
// allow it).
struct ExpressRun {
  std::vector<Router*> line;         // the routers in the order of travel (hops + 1 of them)
  Router* last = nullptr;            // line.back()
  int exit_port = 0;                 // the direction of travel (each router's output port)
  int hops = 0;                      // routers after the first (L)
  int color = 0;                     // the one color it carries
  int depth = 2;                     // the routers' buffer depth (d)
  struct Flight {
    uint64_t entered;                // the cycle the first router sent it (a_0)
    uint32_t payload;
    uint8_t ctrl;
    uint8_t direct;                  // put in by the entry neighbour: the first router's send is counted at exit
  };
  // Wavelets in the line: wavelet k (entered, not left) in flights[k & exit_mask], the oldest
  // at exited_n. At most hops * depth are in the line (update_entry), fewer than the ring holds.
  std::vector<Flight> flights;
  uint64_t entered_n = 0;            // wavelets that entered so far (the next one's index)
  uint64_t exited_n = 0;             // wavelets that left so far
  bool empty() const { return entered_n == exited_n; }
  const Flight& oldest() const { return flights[exited_n & exit_mask]; }
  uint64_t last_exit = 0;            // the cycle the last one left (exited_n > 0)
  uint64_t last_entered = 0;         // its a_0
  bool waiting = false;              // the oldest is due; the last router had no credit for it
  bool direct = false;               // the exit neighbour (same thread) hands its credits straight over
  uint64_t stats_from = 0;           // stall cycles before this one are not counted (Fabric::reset_stats)
  bool entry_waiting = false;        // the first router waits for a wavelet that has not left
  uint64_t entry_at = 0;             // the next wavelet may enter from this cycle (kNever: unknown)
  std::vector<uint64_t> exits;       // e_k of the last (at least hops * depth + 2) wavelets
  uint64_t exit_mask = 0;            // exits.size() - 1 (a power of two), also flights.size() - 1
  static constexpr uint64_t kNever = ~uint64_t{0};
  uint64_t exit_of(uint64_t k) const { return exits[k & exit_mask]; }
  // a_j(i), the cycle router j sent wavelet i (ExpressRun), from its a_0 and (j = L) its exit:
  // a_0 + j, or later where the wavelet (L - j) * depth ahead left late.
  uint64_t send_cycle(uint64_t j, uint64_t i, uint64_t a0, uint64_t e) const {
    const uint64_t L = static_cast<uint64_t>(hops);
    if (j == L) return e;
    const uint64_t back = (L - j) * static_cast<uint64_t>(depth);
    return i >= back ? std::max(a0 + j, exit_of(i - back) + (L - j)) : a0 + j;
  }
  // entry_at for the next wavelet k: e_{k-Ld} + L (ExpressRun), once that one has left.
  void update_entry() {
    const uint64_t back = static_cast<uint64_t>(hops) * static_cast<uint64_t>(depth);
    if (entered_n < back) entry_at = 0;
    else if (entered_n - back >= exited_n) entry_at = kNever;
    else entry_at = exit_of(entered_n - back) + static_cast<uint64_t>(hops);
  }
};

struct ExpressDelivery {
  ExpressRun* run;                   // the line whose oldest wavelet may leave in this cycle
};
constexpr int kExpressSlots = 64;  // a line is at most this many routers long

// One switch position of a color's route: input ports accepted and output ports (multicast).
struct SwitchPos {
  uint8_t rx = 0;
  uint8_t tx = 0;
};

// A color's route at one router. Position 0 is active at reset; each control wavelet of the
// color advances it once it has left this router (and a core's swadv at its own router):
// cyclically, or (hold) up to the last position, which then stays (the SDK's ring_mode false).
struct ColorRoute {
  std::array<SwitchPos, kMaxSwitchPositions> pos{};
  uint8_t npos = 1;
  bool hold = false;
  static ColorRoute simple(uint8_t rx, uint8_t tx) {
    ColorRoute r;
    r.pos[0] = {rx, tx};
    return r;
  }
  uint8_t rx_any() const;
  uint8_t tx_any() const;
};

struct ColorCounters {
  uint64_t forwarded = 0;  // wavelets sent on this color (one per output link)
  uint64_t stall = 0;      // router-cycles a ready head of this color went nowhere
  uint32_t peak = 0;       // peak occupancy of one input buffer of this color (any router)
};

// Per-thread scratch of the cycle loop: active lists and counters, padded against false sharing.
struct alignas(64) ThreadCtx {
  std::vector<Router*> active;  // routers to step this cycle
  // Routers to step in a cycle, as this thread marked them: one bit per router (Router::m_word,
  // m_bit; each owner thread's routers fill whole words, in id order) per cycle parity. Each owner
  // collects and clears its words of every thread's set at the start of the cycle; the sets of
  // the other parity are meanwhile marked for the next cycle, so the two never meet.
  std::vector<uint64_t> wake_bits[2];
  uint64_t* next_bits = nullptr;  // wake_bits[(now + 1) & 1] while cycle `now` is stepped
  void mark(const Router* r);     // step r in the next cycle
  TimedWakes timed;  // routers asleep until a cycle (their core's wake cycle, a channel's slot)
  // Wavelets leaving an express line, by cycle modulo kExpressSlots. A wavelet is booked at most
  // hops + 1 <= kExpressSlots cycles ahead (hops + 1 when the entry neighbour puts it in); the
  // slot of the current cycle is emptied at its start, so a booking 64 ahead waits there.
  std::vector<ExpressDelivery> express_at[kExpressSlots];
  uint64_t express_pending = 0;    // entries in express_at
  uint64_t express_forwarded = 0;  // sends of the routers an express wavelet passed
  void express_due(uint64_t now);  // at the start of cycle `now`: the lines' wavelets due
  uint64_t injected = 0;   // wavelets entering router buffers from an agent or a channel
  uint64_t delivered = 0;  // wavelets leaving the fabric to an agent or a channel
  uint64_t to_channels = 0;  // of which to I/O channels
  uint64_t pushed = 0, popped = 0;  // router buffer pushes and pops (in flight = pushed - popped)
  uint64_t nonfinal = 0;   // multicast sends that left a copy behind
  uint64_t moves = 0;      // anything that moved this cycle (for the watchdog)
  uint64_t visits = 0;     // routers stepped this cycle (Fabric::step's choice of threads)
  ColorCounters color[kMaxColors];  // fabric-wide per-color counters of this thread's routers
  BitCounters32 color_stall;        // per-color stall cycles (kept apart: added as a mask)
};

class alignas(64) Router {
 public:
  Router(uint32_t id, int x, int y, const RouterConfig& cfg);

  uint32_t id() const { return m_id; }
  // Its place in the wake sets, word * 64 + bit (Fabric::m_by_bit): what the timed list keeps.
  uint32_t wake_index() const { return m_word * 64u + static_cast<uint32_t>(__builtin_ctzll(m_bit)); }
  int x() const { return m_x; }
  int y() const { return m_y; }

  // Set-up, before the first cycle.
  void set_route(int color, const ColorRoute& route);
  const ColorRoute* route(int color) const;  // nullptr when the color is not routed here
  uint32_t routed_colors() const { return m_routed; }
  void connect(int port, Router* neighbour) { m_nbr[port] = neighbour; }
  void connect_channel(int port, EdgeChannel* ch) { m_chan[port] = ch; }
  // The channel on `port` has wavelets to inject (Fabric::wake_edge, when its queue was empty);
  // the router forgets it when a take empties that queue.
  void channel_has_input(int port) { m_chan_in |= port_bit(port); }
  void set_agent(PeAgent* agent) {
    m_agent = agent;
    m_agent_full = agent ? agent->full_colors() : ~0u;
  }
  PeAgent* agent() const { return m_agent; }
  void allocate_buffers();  // once routes are final
  void link_wakes();        // once every router has its wake-set bit (m_word, m_bit)
  // Express lines (ExpressRun): the axis along which every routed color goes straight on here
  // (kNorth for N-S, kEast for E-W) when the router has no core or channel, else -1.
  int express_axis() const;
  void set_express(int in_port, ExpressRun* entering, int out_port, ExpressRun* leaving);
  // The last router of an express line leaving on `port`: when the neighbour there is stepped by
  // the same thread, it hands the credits it frees straight to this router (express_credit).
  bool take_credits_directly(int port);
  // The first router of express line x, entered from `port`: when the neighbour there is stepped
  // by the same thread, that neighbour's general path may put its sends straight into the line.
  void let_neighbour_enter(int port, ExpressRun* x);
  // In cycle `now`, the oldest wavelet of line x, of which this router is the last, leaves if
  // it is due (e_k, ExpressRun) and this router has a credit for it: what its send on the exit
  // link would do (the neighbour's mailbox, this router's credit, the wake-up). Without the
  // credit the line waits for this router's next visit with credits.
  void express_try(ExpressRun& x, uint64_t now, ThreadCtx& tc);
  bool accepts(int port, int color) const;  // some switch position takes `color` from `port`

  // One cycle, in a single visit: take in what the neighbours sent and the credits they
  // returned in the previous cycle (left in this router's mailboxes of that cycle's parity),
  // choose heads, arbitrate every output, and post this cycle's sends and freed slots in the
  // neighbours' mailboxes of this cycle's parity. A router reads nothing that is written in the
  // same cycle, so any visiting order and thread split give the same result.
  // Returns when to visit it again (see schedule()).
  uint64_t step(uint64_t now, ThreadCtx& tc) {
    return m_xin_ports | m_xout_ports | m_xnbr_ports | m_xent_ports ? step_impl<true>(now, tc) : step_impl<false>(now, tc);
  }
  // The same, without (kExpress false) the bookkeeping of express lines starting or ending
  // here: the fabric calls that one directly when it has no express lines.
  template <bool kExpress>
  uint64_t step_impl(uint64_t now, ThreadCtx& tc);
  // Asks the cache for the lines step(now) reads first: the mailbox of the previous cycle's
  // parity, the hot state and the counters (the fabric calls it a few visits ahead).
  void prefetch(uint64_t now) const {
    __builtin_prefetch(&m_mail[(now + 1) & 1]);
    __builtin_prefetch(&m_occupancy);
    __builtin_prefetch(&m_nbr[0]);
    __builtin_prefetch(&m_want[0]);
    __builtin_prefetch(&s_forwarded[0]);
  }
  bool has_work() const { return schedule(1) != 0; }
  // When to visit the router again, `next` being the next cycle: `next` while it has work, a
  // later cycle when its only work is its agent's fixed busy stretch (it sleeps until then
  // unless an arrival, a credit or the host wakes it), 0 when it has nothing to do.
  uint64_t schedule(uint64_t next) const;

  // Introspection for stats, the watchdog and tests.
  uint32_t occupancy() const { return m_occupancy; }
  int buffered(int port, int color) const;  // -1 when there is no such buffer
  uint8_t switch_position(int color) const { return m_col[color].pos; }
  bool sent_this_cycle(int port, uint64_t now, Wavelet* w) const;
  // The same, with the cycles slept since its last visit up to `cycles` (Fabric::cycle()): a
  // router whose heads all wait on another PE sleeps, and each of those cycles stalls the same
  // ports and colors as its last visit (added at its next visit).
  uint64_t stall_cycles(int port, uint64_t cycles) const {
    return s_stall[port] + ((m_stall_ports >> port) & 1 ? slept(cycles) : 0);  // ports imply colors
  }
  uint32_t sleeping_stall_colors() const { return m_stall_colors; }  // stalled in each slept cycle
  uint64_t slept(uint64_t cycles) const { return cycles > m_last_step + 1 ? cycles - m_last_step - 1 : 0; }
  uint32_t peak_of_color(int color) const { return m_col[color].peak; }  // one buffer's peak
  // Warm-up, after `cycles` cycles: counters restart; peaks restart from the occupancy of the moment.
  void reset_stats(uint64_t cycles);
  // The counters of a router the vector engine steps (Fabric, VectorFabric), as of `cycles`
  // cycles: per port sent and stalled cycles, the peaks, the wavelets buffered now. Its own
  // buffers are not used meanwhile.
  void load_counts(uint64_t cycles, const uint64_t* forwarded, const uint64_t* stall, uint32_t peak_occupancy,
                   const uint32_t* color_peak, uint32_t occupancy);

 private:
  static constexpr uint8_t kNone = 0xff;
  // Per-color state, 16 bytes (four colors per cache line). A color's buffers are consecutive,
  // one per accepted input port in port order, starting at fifo_base.
  struct ColorState {
    uint8_t cur_in = kNone;  // input port of the head in service, or last served (round-robin)
    uint8_t pending = 0;     // outputs the current head still has to reach (0 = idle)
    uint8_t nonempty = 0;    // input ports with a buffered wavelet of this color
    uint8_t pos = 0;         // current switch position
    uint8_t rx = 0, tx = 0;  // ports of the current position
    uint8_t rx_any = 0;      // ports accepted in any position (one buffer each)
    uint8_t fifo_base = 0;
    uint8_t credit[kNumLinkPorts] = {};  // free downstream slots per output link
    uint8_t peak = 0;        // peak occupancy of one of its buffers
    int8_t through = -1;     // the one output link when it only goes straight on here, else -1
    uint8_t pad[2] = {};
  };
  static_assert(sizeof(ColorState) == 16, "four colors per cache line");
  // Buffer bookkeeping, 8 bytes; its slots live in m_slots.
  struct FifoMeta {
    uint8_t head = 0;
    uint8_t count = 0;
    uint8_t port = 0;
    uint8_t color = 0;
    uint16_t base = 0;  // index of its first slot in m_slots
    uint16_t pad = 0;
  };
  // A buffered wavelet: payload and (ready cycle << 2 | local << 1 | ctrl), ready kept modulo
  // 2^30; local marks a core's swadv, which the router takes as its own switch advance.
  struct Slot {
    uint32_t payload;
    uint32_t meta;
  };
  struct Arrival {
    uint32_t payload;
    uint8_t color;
    uint8_t ctrl;
  };
  // What the neighbours left for this router in one cycle parity, one cache line: per input
  // link port the wavelet sent (and whether one was) and the colors whose buffer there freed a
  // slot. Each entry has one writer (the neighbour on that port, during cycle t into parity
  // t & 1) and one reader (this router, during cycle t + 1), so any visiting order and thread
  // split give the same result.
  struct alignas(64) Mailbox {
    Arrival arr[kNumLinkPorts];
    uint32_t cred[kNumLinkPorts];
    uint8_t valid[kNumLinkPorts];
  };

  void express_enter(ExpressRun& x, uint32_t payload, uint8_t ctrl, uint64_t now, ThreadCtx& tc, bool direct = false);
  __attribute__((noinline)) bool express_entry_check(uint64_t now, ThreadCtx& tc);
  __attribute__((noinline)) void express_retry(uint64_t now, ThreadCtx& tc);
  void wake_self_at(uint64_t now, uint64_t at, ThreadCtx& tc);
  static void add_express_stalls(ExpressRun& x, uint64_t k, uint64_t a0, uint64_t e, ThreadCtx& tc);
  static uint64_t express_sends_since(const ExpressRun& x, uint64_t k, uint64_t a0, uint64_t e, bool direct);
  bool take_credits(int prev);  // the credits returned in the previous cycle; false if none
  void select_head(int c, uint64_t now);
  uint32_t edge_full(int port, uint64_t now) const;  // ramp, I/O channel or nothing
  template <bool kExpress>
  void pop(int fi, uint64_t now, ThreadCtx& tc);
  void express_credit(int port, int color, uint64_t now, ThreadCtx& tc);
  bool agent_and_channels(uint64_t now, ThreadCtx& tc, uint32_t ramp_full, uint32_t east_full, uint32_t west_full);
  // Makes the neighbour on link port p visit next cycle (the wake sets keep the visits in id order).
  void wake_neighbour(int p, ThreadCtx& tc) const {
    const uint32_t k = m_nbr_wake[p];
    tc.next_bits[k >> 6] |= uint64_t{1} << (k & 63);
  }
  int fifo_index(int port, int color) const {
    const ColorState& cs = m_col[color];
    return cs.fifo_base + __builtin_popcount(cs.rx_any & (port_bit(port) - 1u));
  }
  // The kind bits of Slot::meta (push's `kind`): 0 data, control, a core's switch advance.
  static constexpr uint32_t kKindCtrl = 1, kKindSwadv = 3, kKindMask = 3;
  static bool ready(uint32_t meta, uint64_t now) {
    return static_cast<int32_t>((static_cast<uint32_t>(now) << 2) - (meta & ~kKindMask)) >= 0;
  }
  static bool is_swadv(uint32_t meta) { return (meta & kKindMask) == kKindSwadv; }
  void push(int port, int color, uint32_t payload, uint32_t kind, uint64_t ready_at, uint64_t now);
  void advance_switch(int color);
  void remove_head(int fi);

  // --- Data, hot first: a visit touches its mailbox line, the three lines after the mailboxes
  // (the fabric prefetches them), the stats line and the lines of the colors that move. ---

  // Lines 0-1: the mailboxes, by cycle parity.
  Mailbox m_mail[2] = {};

  // Line 2: what every visit reads first.
  uint32_t m_occupancy = 0;
  uint32_t m_needs_head = 0;   // colors without a head in service that may have one waiting
  uint32_t m_stall_colors = 0; // colors that stalled in the last full visit
  uint32_t m_agent_full = ~0u; // the agent's full_colors() (it changes in evaluate and deliver only); ~0 without one
  uint32_t m_blocked[kNumLinkPorts] = {};  // colors with no credit left on each output link
  uint32_t m_nbr_wake[kNumLinkPorts] = {}; // the neighbours' wake-set bits (word * 64 + bit)
  bool m_straight = false;     // no core, no channel, one-cycle hops (see step())
  bool m_can_sleep = false;    // the last step changed nothing and every head waits on another PE
  uint8_t m_chan_in = 0;       // ports whose I/O channel has wavelets queued to inject
  uint8_t m_xin_ports = 0;     // link ports where an express line starts (m_xin)
  uint8_t m_xout_ports = 0;    // link ports where an express line ends (m_xout)
  uint8_t m_xnbr_ports = 0;    // link ports to the last router of an express line in this thread:
                               // the credits this router frees go straight to it (express_credit)
  uint8_t m_xent_ports = 0;    // link ports to the first router of an express line in this thread:
                               // this router's sends may enter the line directly (m_xent)
  uint8_t m_stall_ports = 0;   // ports that stalled in the last full visit (they stall in every slept cycle too)
  uint8_t m_sent_ports = 0;    // what left in the last cycle stepped (for traces), with m_out
  uint8_t m_depth = 1;         // router.buffer_depth, kept here to spare a load per access
  uint8_t m_rr_out[kNumPorts] = {};

 public:
  // Activity bookkeeping, owned by the fabric's cycle loop (only the owner thread touches it).
  uint8_t m_owner = 0;         // thread that steps this router

 private:
  // Line 3.
  Router* m_nbr[kNumLinkPorts] = {};
  uint64_t m_sent_stamp = ~uint64_t(0);  // cycle + 1 of m_sent_ports; never matches before the first send
  uint64_t m_last_step = 0;    // the cycle of its last visit through the general path
  FifoMeta* m_fifo = nullptr;  // in m_mem
  Slot* m_slots = nullptr;     // in m_mem, depth slots per buffer

  // Line 4: arbiters and the agent.
  uint32_t m_want[kNumPorts] = {};     // colors whose head waits for each output
  uint32_t m_full_in[kNumPorts] = {};  // colors whose buffer from each input is full
  PeAgent* m_agent = nullptr;
  // The first cycle the agent must be evaluated again, as its wake_cycle() said after its last
  // evaluate (kAgentIdle: only an arrival wakes it; an arrival resets it to 0, to evaluate it in
  // the cycle it comes).
  static constexpr uint64_t kAgentIdle = ~uint64_t(0);
  uint64_t m_agent_due = 0;
  const RouterConfig* m_cfg;
  // The ramp_full its last evaluate() was given: when one of those buffers frees, the agent is
  // evaluated in the next cycle (a core may sleep on a full one: PeCore::m_outq_wait).
  uint32_t m_agent_saw_full = 0;

 public:
  // Line 5: counters and the wake-set bit.
  uint64_t s_forwarded[kNumPorts] = {};  // wavelets sent per output port
  uint32_t s_peak_occupancy = 0;         // peak of all buffers together
  uint32_t m_word = 0;                   // its bit in the wake sets (ThreadCtx::wake_bits)
  uint64_t m_bit = 0;
  uint64_t m_timed_at = 0;               // cycle of its entry in the timed wake list (0: none)
  // Line 6.
  uint64_t s_stall[kNumPorts] = {};      // visited cycles an output had candidates but no credit

 private:
  Arrival m_out[kNumPorts] = {};         // what left on each port in the last cycle stepped
  EdgeChannel* m_chan[kNumLinkPorts] = {};

  // The colors' lines.
  alignas(64) ColorState m_col[kMaxColors];

  // Express lines starting here (by the port their wavelets come in on) and ending here (by
  // the port they leave on).
  ExpressRun* m_xin[kNumLinkPorts] = {};
  ExpressRun* m_xout[kNumLinkPorts] = {};
  ExpressRun* m_xent[kNumLinkPorts] = {};

  // --- set-up and cold state ---
  std::unique_ptr<uint64_t[]> m_mem;
  uint32_t m_id;
  uint16_t m_x, m_y;
  uint32_t m_routed = 0;       // colors with a route here
  ColorRoute m_route[kMaxColors];

};

inline void ThreadCtx::mark(const Router* r) { next_bits[r->m_word] |= r->m_bit; }

}  // namespace wafersim
