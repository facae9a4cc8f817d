#include "tlm/edge_bridge.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "hw/config.h"
#include "hw/edge_io.h"
#include "hw/fabric.h"
#include "tlm/model_util.h"

namespace wafersim::tlm {
namespace {

constexpr const char* kMsgType = "wafersim/edge_bridge";
constexpr uint64_t kColorMask = 0x1f, kChannelShift = 8, kChannelMask = 0xff, kEastBit = 1u << 16;
constexpr uint64_t kMapMask = kColorMask | (kChannelMask << kChannelShift) | kEastBit;

using detail::hex;
using detail::str;
using detail::validated;

uint32_t load_le32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

void store_le32(unsigned char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace

void EdgeBridgeConfig::validate() const {
  if (!(link_gbps > 0) || !std::isfinite(link_gbps)) {
    throw ConfigError("edge_bridge.link_gbps must be a positive number, got " + str(link_gbps));
  }
  if (!(latency_ns >= 0) || !std::isfinite(latency_ns)) {
    throw ConfigError("edge_bridge.latency_ns must be at least 0, got " + str(latency_ns));
  }
  if (stall_limit_cycles < 1) {
    throw ConfigError("edge_bridge.stall_limit_cycles must be at least 1, got " +
                      str(stall_limit_cycles));
  }
}

// Tickets: each caller takes the next number and waits until it is served, so callers of one
// channel and direction go in call order whatever order the kernel wakes them in.
struct EdgeBridge::Lane {
  uint64_t next_ticket = 0, serving = 0;
  sc_core::sc_event turn;
};

struct EdgeBridge::Stream {
  int side = kWest, index = 0, color = 0;
  EdgeChannel* ch = nullptr;
  std::string label;  // "READ from channel W0 (row 3) color 2", for messages
};

EdgeBridge::EdgeBridge(sc_core::sc_module_name name, Fabric& fabric, const EdgeBridgeConfig& cfg,
                       sc_core::sc_time clock_period)
    : sc_module(name),
      socket("socket"),
      m_fabric(fabric),
      m_cfg(validated(cfg)),
      m_period(clock_period) {
  if (m_period == sc_core::SC_ZERO_TIME) {
    throw ConfigError(std::string(this->name()) + ": the clock period must be positive");
  }
  m_lanes.resize(static_cast<size_t>(fabric.channels_per_edge()) * 4);
  for (auto& l : m_lanes) l = std::make_unique<Lane>();
  socket.register_b_transport(this, &EdgeBridge::b_transport);
}

EdgeBridge::~EdgeBridge() = default;

uint64_t EdgeBridge::address(int side, int channel, int color) {
  if (side != kWest && side != kEast) {
    throw ConfigError("edge bridge address: side must be kWest or kEast");
  }
  if (channel < 0 || static_cast<uint64_t>(channel) > kChannelMask) {
    throw ConfigError("edge bridge address: channel " + str(channel) + " is outside 0..255");
  }
  if (color < 0 || static_cast<uint64_t>(color) > kColorMask) {
    throw ConfigError("edge bridge address: color " + str(color) + " is outside 0..31");
  }
  return (side == kEast ? kEastBit : 0) | static_cast<uint64_t>(channel) << kChannelShift |
         static_cast<uint64_t>(color);
}

double EdgeBridge::link_ns(const EdgeBridgeConfig& cfg, uint64_t bytes) {
  return cfg.latency_ns + static_cast<double>(bytes) * 8.0 / cfg.link_gbps;
}

sc_core::sc_time EdgeBridge::link_time(uint64_t bytes) const { return sc_core::sc_time(link_ns(m_cfg, bytes), sc_core::SC_NS); }

// Checks in the order of the header's table: command, byte enables, length, data pointer,
// address. On success fills *s, else says why.
::tlm::tlm_response_status EdgeBridge::check(const ::tlm::tlm_generic_payload& trans, Stream* s,
                                             std::string* why) {
  auto fail = [&](::tlm::tlm_response_status st, const std::string& msg) {
    *why = msg;
    return st;
  };
  const auto cmd = trans.get_command();
  if (cmd != ::tlm::TLM_READ_COMMAND && cmd != ::tlm::TLM_WRITE_COMMAND) {
    return fail(::tlm::TLM_COMMAND_ERROR_RESPONSE, "only READ and WRITE are supported");
  }
  if (trans.get_byte_enable_ptr()) {
    return fail(::tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, "byte enables are not supported");
  }
  const uint64_t addr = trans.get_address(), len = trans.get_data_length(),
                 width = trans.get_streaming_width();
  if (len == 0 || len % 4 != 0) {
    return fail(
        ::tlm::TLM_BURST_ERROR_RESPONSE,
        "length " + str(len) + " is not a whole number of 32-bit words (a positive multiple of 4)");
  }
  if (width < len && (width == 0 || width % 4 != 0)) {
    return fail(::tlm::TLM_BURST_ERROR_RESPONSE,
                "streaming width " + str(width) + " splits a 32-bit word");
  }
  if (!trans.get_data_ptr()) return fail(::tlm::TLM_GENERIC_ERROR_RESPONSE, "no data pointer");
  if (addr & ~kMapMask) {
    return fail(::tlm::TLM_ADDRESS_ERROR_RESPONSE,
                "address " + hex(addr) +
                    " sets bits outside the map (color [4:0], channel [15:8], edge bit 16)");
  }
  s->side = (addr & kEastBit) ? kEast : kWest;
  s->index = static_cast<int>((addr >> kChannelShift) & kChannelMask);
  s->color = static_cast<int>(addr & kColorMask);
  const std::string chan = std::string(port_name(s->side)) + str(s->index);
  s->ch = m_fabric.channel(s->side, s->index);
  if (!s->ch) {
    return fail(::tlm::TLM_ADDRESS_ERROR_RESPONSE,
                "address " + hex(addr) + ": no channel " + chan + " (the fabric has " +
                    str(m_fabric.channels_per_edge()) + " per edge)");
  }
  const bool write = cmd == ::tlm::TLM_WRITE_COMMAND;
  s->label = std::string(write ? "WRITE to" : "READ from") + " channel " + chan + " (row " +
             str(s->ch->row()) + ") color " + str(s->color);
  const int x = s->side == kEast ? m_fabric.width() - 1 : 0;
  const Router* r = m_fabric.router(x, s->ch->row());
  const ColorRoute* route = r ? r->route(s->color) : nullptr;
  if (write && !(route && (route->rx_any() & port_bit(s->side)))) {
    return fail(::tlm::TLM_ADDRESS_ERROR_RESPONSE,
                s->label + ": " + Fabric::pe_name(x, s->ch->row()) +
                    " does not route that color in from the channel");
  }
  if (!write && !(route && (route->tx_any() & port_bit(s->side)))) {
    return fail(::tlm::TLM_ADDRESS_ERROR_RESPONSE,
                s->label + ": " + Fabric::pe_name(x, s->ch->row()) +
                    " does not route that color out to the channel");
  }
  return ::tlm::TLM_OK_RESPONSE;
}

void EdgeBridge::fail(::tlm::tlm_generic_payload& trans, ::tlm::tlm_response_status status,
                      const std::string& why) {
  trans.set_response_status(status);
  ++m_stats.errors;
  m_last_error = std::string(name()) + ": " + why;
  SC_REPORT_WARNING(kMsgType, m_last_error.c_str());
}

void EdgeBridge::mark_busy(const sc_core::sc_time& start, const sc_core::sc_time& end) {
  if (start >= m_busy_until) {
    m_stats.busy += end - start;
  } else if (end > m_busy_until) {
    m_stats.busy += end - m_busy_until;
  }
  if (end > m_busy_until) m_busy_until = end;
}

// One word after the other; a refused word is offered again one clock period later.
bool EdgeBridge::write_words(::tlm::tlm_generic_payload& trans, const Stream& s, uint64_t* moved) {
  const unsigned char* p = trans.get_data_ptr();
  const uint64_t n = trans.get_data_length() / 4;
  uint64_t idle = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const Wavelet w{load_le32(p + 4 * i), static_cast<uint8_t>(s.color), false};
    while (!s.ch->try_inject(w)) {
      if (idle == m_cfg.stall_limit_cycles) {
        fail(trans, ::tlm::TLM_GENERIC_ERROR_RESPONSE,
             s.label + ": the channel took nothing for " + str(idle) +
                 " cycles (edge_bridge.stall_limit_cycles); " + str(i) + " of " + str(n) +
                 " words were taken");
        return false;
      }
      sc_core::wait(m_period);
      ++idle;
      ++m_stats.stall_cycles;
    }
    idle = 0;
    ++*moved;
  }
  return true;
}

bool EdgeBridge::read_words(::tlm::tlm_generic_payload& trans, const Stream& s, uint64_t* moved) {
  unsigned char* p = trans.get_data_ptr();
  const uint64_t n = trans.get_data_length() / 4;
  uint64_t idle = 0;
  for (uint64_t i = 0; i < n; ++i) {
    Wavelet w;
    while (!s.ch->try_receive(&w)) {
      if (idle == m_cfg.stall_limit_cycles) {
        fail(trans, ::tlm::TLM_GENERIC_ERROR_RESPONSE,
             s.label + ": nothing arrived for " + str(idle) +
                 " cycles (edge_bridge.stall_limit_cycles); " + str(i) + " of " + str(n) +
                 " words were taken");
        return false;
      }
      sc_core::wait(m_period);
      ++idle;
      ++m_stats.starve_cycles;
    }
    if (w.color != s.color) {
      fail(trans, ::tlm::TLM_GENERIC_ERROR_RESPONSE,
           s.label + ": a wavelet of color " + str(int{w.color}) + " (payload " + hex(w.payload) +
               ") arrived after " + str(i) + " of " + str(n) +
               " words; dropped (one address is one stream of one color)");
      return false;
    }
    idle = 0;
    store_le32(p + 4 * i, w.payload);
    ++*moved;
  }
  return true;
}

void EdgeBridge::b_transport(::tlm::tlm_generic_payload& trans, sc_core::sc_time& delay) {
  trans.set_dmi_allowed(false);
  Stream s;
  std::string why;
  const ::tlm::tlm_response_status st = check(trans, &s, &why);
  if (st != ::tlm::TLM_OK_RESPONSE) {
    fail(trans, st, why);
    return;
  }
  if (delay != sc_core::SC_ZERO_TIME) {  // a zero wait would move to the next delta cycle
    sc_core::wait(delay);
    delay = sc_core::SC_ZERO_TIME;
  }
  const bool write = trans.is_write();
  const size_t channel = static_cast<size_t>(s.side == kEast ? m_fabric.channels_per_edge() : 0) +
                         static_cast<size_t>(s.index);
  Lane& lane = *m_lanes[2 * channel + (write ? 1 : 0)];
  const uint64_t ticket = lane.next_ticket++;
  while (lane.serving != ticket) sc_core::wait(lane.turn);

  const sc_core::sc_time start = sc_core::sc_time_stamp();
  uint64_t moved = 0;
  const bool ok = write ? write_words(trans, s, &moved) : read_words(trans, s, &moved);
  (write ? m_stats.bytes_in : m_stats.bytes_out) += 4 * moved;
  const sc_core::sc_time now = sc_core::sc_time_stamp();
  if (ok) {
    const sc_core::sc_time end = std::max(start + link_time(trans.get_data_length()), now);
    delay = end - now;
    mark_busy(start, end);
    ++m_stats.transactions;
    trans.set_response_status(::tlm::TLM_OK_RESPONSE);
  } else {
    mark_busy(start, now);
  }
  ++lane.serving;
  lane.turn.notify();
}

}  // namespace wafersim::tlm
