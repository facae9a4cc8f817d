// A TLM extension for data that crossed the links while it was produced: a weight-streaming
// pass's dW, db and loss leave the wafer through the edge channels at no more than the host
// link's rate, and SwarmX sums them and MemoryX takes them as they stream (cut-through, at line
// rate). A WRITE that carries it is timed by its last byte: its time (the caller's plus its
// annotated delay) is when that byte left the system, so SwarmX adds only its nodes' latency
// (tree_time(0)) and MemoryX only its access latency (transfer_delay(0)), not the bytes' time
// over the links again. Without it a WRITE's bytes start at its time (tlm/swarmx.h, memoryx.h).
#pragma once

#include <tlm>

namespace wafersim::tlm {

struct Streamed : ::tlm::tlm_extension<Streamed> {
  ::tlm::tlm_extension_base* clone() const override { return new Streamed(*this); }
  void copy_from(const ::tlm::tlm_extension_base&) override {}
};

// Does t carry the extension?
inline bool streamed(const ::tlm::tlm_generic_payload& t) { return t.get_extension<Streamed>() != nullptr; }

}  // namespace wafersim::tlm
