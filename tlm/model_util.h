// Small helpers shared by the TLM models' messages and constructors. Internal to tlm/ (and its tests).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

#include <tlm>

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

// A plain transaction: `bytes` of `data` at `addr`, no byte enables, streaming width = length.
inline void set_plain(::tlm::tlm_generic_payload& t, ::tlm::tlm_command cmd, uint64_t addr, void* data, size_t bytes) {
  t.set_command(cmd);
  t.set_address(addr);
  t.set_data_ptr(static_cast<unsigned char*>(data));
  t.set_data_length(static_cast<unsigned>(bytes));
  t.set_streaming_width(static_cast<unsigned>(bytes));
  t.set_byte_enable_ptr(nullptr);
  t.set_dmi_allowed(false);
  t.set_response_status(::tlm::TLM_INCOMPLETE_RESPONSE);
}

}  // namespace wafersim::tlm::detail
