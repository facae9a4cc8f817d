// The 32-bit wavelet that travels the fabric, and the router's port numbering.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace wafersim {

// One fabric message: a 32-bit payload tagged with a color (routing channel) and a control bit.
// Control wavelets are routed like data and, after leaving a router, advance that color's
// switch position there.
struct Wavelet {
  uint32_t payload = 0;
  uint8_t color = 0;
  bool ctrl = false;
  bool local = false;  // (ctrl only) a core's switch advance for its own router: never leaves it

  bool operator==(const Wavelet& o) const {
    return payload == o.payload && color == o.color && ctrl == o.ctrl && local == o.local;
  }
};

std::ostream& operator<<(std::ostream& os, const Wavelet& w);

// Router ports. y grows southward (row 0 is the northern edge), x grows eastward.
enum Port : uint8_t { kNorth = 0, kSouth = 1, kEast = 2, kWest = 3, kRamp = 4 };
constexpr int kNumPorts = 5;
constexpr int kNumLinkPorts = 4;  // N, S, E, W: the ports that lead to another router
constexpr int kMaxColors = 32;    // a 5-bit color field
constexpr int kMaxSwitchPositions = 4;

constexpr uint8_t port_bit(int p) { return static_cast<uint8_t>(1u << p); }
constexpr int opposite(int p) { return p == kNorth ? kSouth : p == kSouth ? kNorth : p == kEast ? kWest : kEast; }
constexpr int port_dx(int p) { return p == kEast ? 1 : p == kWest ? -1 : 0; }
constexpr int port_dy(int p) { return p == kSouth ? 1 : p == kNorth ? -1 : 0; }
const char* port_name(int p);              // "N", "S", "E", "W", "R"
bool parse_port(char c, int* port);        // inverse of port_name
std::string port_set_name(uint8_t mask);   // e.g. "W+R"

}  // namespace wafersim
