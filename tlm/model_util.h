// Small helpers shared by the TLM models' messages and constructors. Internal to tlm/.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

namespace wafersim::tlm::detail {

// A value as operator<< prints it (sc_time, numbers) for messages.
template <typename T>
std::string str(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// An address in messages: 0x1f40.
inline std::string hex(uint64_t v) {
  std::ostringstream os;
  os << "0x" << std::hex << v;
  return os.str();
}

// The config, after its validate() (which throws): for member initialisers.
template <typename Config>
const Config& validated(const Config& cfg) {
  cfg.validate();
  return cfg;
}

}  // namespace wafersim::tlm::detail
