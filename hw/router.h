// One PE's router: per-color routes with switch positions, per-(input port, color) buffers,
// a round-robin arbiter per output link, and credit backpressure. Plain C++, two-phase.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "hw/bit_counters.h"
#include "hw/config.h"
#include "hw/fifo.h"
#include "hw/pe_agent.h"
#include "hw/wavelet.h"

namespace wafersim {

class EdgeChannel;
class Router;

// One switch position of a color's route: input ports accepted and output ports (multicast).
struct SwitchPos {
  uint8_t rx = 0;
  uint8_t tx = 0;
};

// A color's route at one router. Position 0 is active at reset; each control wavelet of the
// color advances it (cyclically) once it has left this router.
struct ColorRoute {
  std::array<SwitchPos, kMaxSwitchPositions> pos{};
  uint8_t npos = 1;
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
  uint32_t peak = 0;       // peak occupancy of one input buffer of this color
};

// Per-thread scratch of the cycle loop: active lists and counters, padded against false sharing.
struct alignas(64) ThreadCtx {
  std::vector<Router*> active, next, wake;
  uint64_t injected = 0;   // wavelets entering router buffers from an agent or a channel
  uint64_t delivered = 0;  // wavelets leaving the fabric to an agent or a channel
  uint64_t pushed = 0, popped = 0;  // router buffer pushes and pops (in flight = pushed - popped)
  uint64_t nonfinal = 0;   // multicast sends that left a copy behind
  uint64_t moves = 0;      // anything that moved this cycle (for the watchdog)
  ColorCounters color[kMaxColors];  // fabric-wide per-color counters of this thread's routers
  BitCounters32 color_stall;        // per-color stall cycles (kept apart: added as a mask)
};

class Router {
 public:
  Router(uint32_t id, int x, int y, const RouterConfig& cfg);

  uint32_t id() const { return m_id; }
  int x() const { return m_x; }
  int y() const { return m_y; }

  // Set-up, before the first cycle.
  void set_route(int color, const ColorRoute& route);
  const ColorRoute* route(int color) const;  // nullptr when the color is not routed here
  uint32_t routed_colors() const { return m_routed; }
  void connect(int port, Router* neighbour) { m_nbr[port] = neighbour; }
  void connect_channel(int port, EdgeChannel* ch) {
    m_chan[port] = ch;
    if (ch) m_has_chan = true;
  }
  void set_agent(PeAgent* agent) { m_agent = agent; }
  Router* neighbour(int port) const { return m_nbr[port]; }
  EdgeChannel* channel(int port) const { return m_chan[port]; }
  PeAgent* agent() const { return m_agent; }
  void allocate_buffers();  // once routes are final
  bool accepts(int port, int color) const;  // some switch position takes `color` from `port`

  // The cycle: evaluate reads only start-of-cycle state of neighbours; commit writes only this
  // router (it pulls what neighbours sent), so any visiting order and thread split give the
  // same result.
  void evaluate(uint64_t now, ThreadCtx& tc);
  void commit(uint64_t now, ThreadCtx& tc);
  bool has_work() const;

  // Activity bookkeeping, owned by the fabric's cycle loop.
  bool m_active = false;
  uint8_t m_owner = 0;         // thread that commits this router
  uint64_t m_commit_stamp = ~uint64_t(0);

  // Introspection for stats, the watchdog and tests.
  uint32_t occupancy() const { return m_occupancy; }
  int buffered(int port, int color) const;  // -1 when there is no such buffer
  uint8_t switch_position(int color) const { return m_col[color].pos; }
  bool sent_this_cycle(int port, uint64_t now, Wavelet* w) const;
  uint64_t s_forwarded[kNumPorts] = {};  // wavelets sent per output port
  uint64_t s_stall[kNumPorts] = {};      // cycles an output had candidates but no credit
  uint32_t s_peak_occupancy = 0;         // peak of all buffers together
  void reset_stats() {
    for (auto& v : s_forwarded) v = 0;
    for (auto& v : s_stall) v = 0;
    s_peak_occupancy = m_occupancy;
  }

 private:
  static constexpr uint8_t kNone = 0xff;
  // Hot per-color state, 8 bytes. A color's buffers are consecutive, one per accepted input
  // port in port order, starting at fifo_base.
  struct ColorState {
    uint8_t cur_in = kNone;  // input port of the head in service, or last served (round-robin)
    uint8_t pending = 0;     // outputs the current head still has to reach (0 = idle)
    uint8_t nonempty = 0;    // input ports with a buffered wavelet of this color
    uint8_t pos = 0;         // current switch position
    uint8_t rx = 0, tx = 0;  // ports of the current position
    uint8_t rx_any = 0;      // ports accepted in any position (one buffer each)
    uint8_t fifo_base = 0;
  };
  // Buffer bookkeeping, 4 bytes; its slots live in m_slots.
  struct FifoMeta {
    uint8_t head = 0;
    uint8_t count = 0;
    uint8_t port = 0;
    uint8_t color = 0;
  };
  // A buffered wavelet: payload and (ready cycle << 1 | ctrl), ready kept modulo 2^31.
  struct Slot {
    uint32_t payload;
    uint32_t meta;
  };

  void select_head(int c, uint64_t now);
  uint32_t downstream_full(int port, uint64_t now) const {
    if (port < kNumLinkPorts && m_nbr[port]) return m_nbr[port]->m_full_in[opposite(port)];
    return edge_full(port, now);
  }
  uint32_t edge_full(int port, uint64_t now) const;  // ramp, I/O channel or nothing
  int fifo_index(int port, int color) const {
    const ColorState& cs = m_col[color];
    return cs.fifo_base + __builtin_popcount(cs.rx_any & (port_bit(port) - 1u));
  }
  static bool ready(uint32_t meta, uint64_t now) {
    return static_cast<int32_t>((static_cast<uint32_t>(now) << 1) - (meta & ~1u)) >= 0;
  }
  void push(int port, int color, uint32_t payload, bool ctrl, uint64_t ready_at, ThreadCtx& tc);

  // --- read by neighbours: credit state (evaluate) and this cycle's sends (commit) ---
  uint32_t m_full_in[kNumPorts] = {};  // colors whose buffer from each input is full
  uint64_t m_sent_cycle = ~uint64_t(0);
  uint8_t m_sent_ports = 0;            // output ports that carried a wavelet in m_sent_cycle
  Wavelet m_out[kNumPorts];

  // --- own state ---
  uint32_t m_needs_head = 0;  // colors without a head in service that may have one waiting
  uint32_t m_want[kNumPorts] = {};  // colors whose head waits for each output
  uint32_t m_occupancy = 0;
  uint8_t m_rr_out[kNumPorts] = {};
  uint8_t m_rx_ports = 0;     // input link ports of any route (where to pull from)
  uint8_t m_npop = 0;
  uint8_t m_chan_take = 0;    // link ports whose channel offer is taken this cycle
  bool m_agent_offer = false;
  bool m_has_chan = false;    // an I/O channel hangs off this router (edge rows only)
  uint64_t m_eval_stamp = ~uint64_t(0);
  uint16_t m_pops[kNumPorts];  // buffer indices to pop in commit
  Wavelet m_agent_w;
  Router* m_nbr[kNumLinkPorts] = {};
  EdgeChannel* m_chan[kNumLinkPorts] = {};
  PeAgent* m_agent = nullptr;
  const RouterConfig* m_cfg;
  ColorState m_col[kMaxColors];
  FifoMeta* m_fifo = nullptr;  // in m_mem
  Slot* m_slots = nullptr;     // in m_mem, depth slots per buffer
  std::unique_ptr<uint64_t[]> m_mem;

  // --- set-up and cold state ---
  uint32_t m_id;
  uint16_t m_x, m_y;
  uint32_t m_routed = 0;       // colors with a route here
  ColorRoute m_route[kMaxColors];
};

}  // namespace wafersim
