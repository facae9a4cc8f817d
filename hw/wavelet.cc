#include "hw/wavelet.h"

#include <string>

namespace wafersim {

std::ostream& operator<<(std::ostream& os, const Wavelet& w) {
  return os << (w.ctrl ? "ctrl" : "data") << "(c" << int(w.color) << ":0x" << std::hex << w.payload
            << std::dec << ")";
}

const char* port_name(int p) {
  static const char* const kNames[kNumPorts] = {"N", "S", "E", "W", "R"};
  return p >= 0 && p < kNumPorts ? kNames[p] : "?";
}

bool parse_port(char c, int* port) {
  static const char kLetters[] = "NSEWR";
  for (int p = 0; p < kNumPorts; ++p) {
    if (kLetters[p] == c) {
      *port = p;
      return true;
    }
  }
  return false;
}

std::string port_set_name(uint8_t mask) {
  std::string s;
  for (int p = 0; p < kNumPorts; ++p) {
    if (mask & port_bit(p)) {
      if (!s.empty()) s += '+';
      s += port_name(p);
    }
  }
  return s.empty() ? "-" : s;
}

}  // namespace wafersim
