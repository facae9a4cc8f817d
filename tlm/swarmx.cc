#include "tlm/swarmx.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "hw/config.h"
#include "tlm/model_util.h"
#include "tlm/streamed.h"

namespace wafersim::tlm {
namespace {

constexpr const char* kMsgType = "wafersim/swarmx";

using detail::hex;
using detail::str;
using detail::validated;

}  // namespace

void SwarmXConfig::validate() const {
  if (systems < 1) throw ConfigError("swarmx.systems must be at least 1, got " + str(systems));
  if (fanout != 2 && fanout != 4) throw ConfigError("swarmx.fanout must be 2 or 4, got " + str(fanout));
  if (!(link_gbps > 0) || !std::isfinite(link_gbps)) {
    throw ConfigError("swarmx.link_gbps must be a positive number, got " + str(link_gbps));
  }
  if (!(node_latency_ns >= 0) || !std::isfinite(node_latency_ns)) {
    throw ConfigError("swarmx.node_latency_ns must be at least 0, got " + str(node_latency_ns));
  }
}

// One address's reduction in progress. The callers that wait on `done` hold it by shared_ptr:
// the entry leaves m_pending as soon as the sum is taken, so a next round at the same address
// starts afresh while they are still waking.
struct SwarmX::Pending {
  Pending(unsigned len, int systems) : length(len), contrib(systems), arrived(systems, false) {}
  unsigned length;                          // bytes, every contribution's
  std::vector<std::vector<float>> contrib;  // per system
  std::vector<bool> arrived;
  int count = 0;
  bool streamed = true;           // every contribution came with the Streamed extension
  sc_core::sc_time last_arrival;  // latest caller time + annotated delay
  sc_core::sc_event done;         // notified once the sum has been written to MemoryX
  sc_core::sc_time release;       // when every contributor resumes
  ::tlm::tlm_response_status status = ::tlm::TLM_INCOMPLETE_RESPONSE;
};

int SwarmX::tree_depth(int systems, int fanout) {
  SwarmXConfig c;
  c.systems = systems;
  c.fanout = fanout;
  c.validate();
  int depth = 1;
  for (long long leaves = fanout; leaves < systems; leaves *= fanout) ++depth;
  return depth;
}

int SwarmX::tree_nodes(int systems, int fanout) {
  const int depth = tree_depth(systems, fanout);
  int width = systems, total = 0;
  for (int k = 1; k <= depth; ++k) {
    width = (width + fanout - 1) / fanout;
    total += width;
  }
  return total;
}

SwarmX::SwarmX(sc_core::sc_module_name name, const SwarmXConfig& cfg)
    : sc_module(name),
      from_memory("from_memory"),
      to_systems("to_systems"),
      from_systems("from_systems"),
      to_memory("to_memory"),
      m_cfg(validated(cfg)),
      m_depth(tree_depth(cfg.systems, cfg.fanout)),
      m_nodes(tree_nodes(cfg.systems, cfg.fanout)) {
  from_memory.register_b_transport(this, &SwarmX::broadcast);
  from_systems.register_b_transport(this, &SwarmX::contribute);
}

double SwarmX::tree_ns(const SwarmXConfig& cfg, uint64_t bytes) {
  return tree_depth(cfg.systems, cfg.fanout) * cfg.node_latency_ns + static_cast<double>(bytes) * 8.0 / cfg.link_gbps;
}

sc_core::sc_time SwarmX::tree_time(uint64_t bytes) const { return sc_core::sc_time(tree_ns(m_cfg, bytes), sc_core::SC_NS); }

void SwarmX::start_of_simulation() {
  const unsigned n = static_cast<unsigned>(m_cfg.systems);
  if (to_systems.size() != n || from_systems.size() != n) {
    SC_REPORT_ERROR(kMsgType, (std::string(name()) + ": swarmx.systems is " + str(n) + " but to_systems is bound " +
                               str(to_systems.size()) + " times and from_systems " + str(from_systems.size()))
                                  .c_str());
  }
}

void SwarmX::reject(::tlm::tlm_generic_payload& p, ::tlm::tlm_response_status status, const std::string& why) {
  p.set_response_status(status);
  ++m_stats.errors;
  SC_REPORT_WARNING(kMsgType, (std::string(name()) + ": " + why).c_str());
}

void SwarmX::mark_busy(const sc_core::sc_time& start, const sc_core::sc_time& length) {
  const sc_core::sc_time end = start + length;
  if (start >= m_busy_until) {
    m_stats.busy += length;
  } else if (end > m_busy_until) {
    m_stats.busy += end - m_busy_until;
  }
  if (end > m_busy_until) m_busy_until = end;
}

void SwarmX::broadcast(::tlm::tlm_generic_payload& p, sc_core::sc_time& delay) {
  ++m_stats.transactions;
  if (p.get_command() != ::tlm::TLM_WRITE_COMMAND) {
    reject(p, ::tlm::TLM_COMMAND_ERROR_RESPONSE, "from_memory serves WRITEs only (weights to broadcast)");
    return;
  }
  const sc_core::sc_time tt = tree_time(p.get_data_length());
  const sc_core::sc_time start = sc_core::sc_time_stamp() + delay;
  const sc_core::sc_time at_systems = start + tt;
  mark_busy(start, tt);
  m_stats.bytes_broadcast += p.get_data_length();

  // The copies leave in parallel; a system that waits inside its b_transport moves the kernel
  // time on, so each one's completion is taken as an absolute time.
  sc_core::sc_time latest = at_systems;
  ::tlm::tlm_response_status status = ::tlm::TLM_OK_RESPONSE;
  for (unsigned i = 0; i < to_systems.size(); ++i) {
    ::tlm::tlm_generic_payload copy;
    copy.set_command(p.get_command());
    copy.set_address(p.get_address());
    copy.set_data_ptr(p.get_data_ptr());
    copy.set_data_length(p.get_data_length());
    copy.set_streaming_width(p.get_streaming_width());
    copy.set_byte_enable_ptr(p.get_byte_enable_ptr());
    copy.set_byte_enable_length(p.get_byte_enable_length());
    copy.set_dmi_allowed(false);
    copy.set_response_status(::tlm::TLM_INCOMPLETE_RESPONSE);
    const sc_core::sc_time now = sc_core::sc_time_stamp();
    sc_core::sc_time d = at_systems > now ? at_systems - now : sc_core::SC_ZERO_TIME;
    to_systems[i]->b_transport(copy, d);
    const sc_core::sc_time done = sc_core::sc_time_stamp() + d;
    if (done > latest) latest = done;
    if (copy.is_response_error() && status == ::tlm::TLM_OK_RESPONSE) {
      status = copy.get_response_status();
      ++m_stats.errors;
      SC_REPORT_WARNING(kMsgType, (std::string(name()) + ": system " + str(i) + " answered " +
                                   copy.get_response_string() + " to the broadcast at " + hex(p.get_address()))
                                      .c_str());
    }
  }
  const sc_core::sc_time now = sc_core::sc_time_stamp();
  delay = latest > now ? latest - now : sc_core::SC_ZERO_TIME;
  p.set_response_status(status);
}

void SwarmX::contribute(int id, ::tlm::tlm_generic_payload& p, sc_core::sc_time& delay) {
  ++m_stats.transactions;
  const std::string who = "system " + str(id);
  const uint64_t addr = p.get_address();
  const unsigned len = p.get_data_length();
  if (p.get_command() != ::tlm::TLM_WRITE_COMMAND) {
    reject(p, ::tlm::TLM_COMMAND_ERROR_RESPONSE, who + ": from_systems serves WRITEs only (gradients to sum)");
    return;
  }
  if (p.get_byte_enable_ptr() != nullptr) {
    reject(p, ::tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, who + ": gradients cannot have byte enables");
    return;
  }
  if (p.get_streaming_width() < len) {
    reject(p, ::tlm::TLM_BURST_ERROR_RESPONSE, who + ": gradients cannot be streamed to one address");
    return;
  }
  if (len == 0 || len % sizeof(float) != 0) {
    reject(p, ::tlm::TLM_GENERIC_ERROR_RESPONSE,
           who + ": a gradient is whole fp32 values, got " + str(len) + " bytes at " + hex(addr));
    return;
  }
  std::shared_ptr<Pending>& slot = m_pending[addr];
  if (!slot) {
    slot = std::make_shared<Pending>(len, m_cfg.systems);
  } else if (slot->length != len) {
    reject(p, ::tlm::TLM_GENERIC_ERROR_RESPONSE,
           who + ": gradient at " + hex(addr) + " is " + str(len) + " bytes, the others' " + str(slot->length));
    return;
  } else if (slot->arrived[id]) {
    reject(p, ::tlm::TLM_GENERIC_ERROR_RESPONSE,
           who + ": second gradient at " + hex(addr) + " before the sum of the first has left");
    return;
  }
  const std::shared_ptr<Pending> pending = slot;
  pending->contrib[id].resize(len / sizeof(float));
  std::memcpy(pending->contrib[id].data(), p.get_data_ptr(), len);
  pending->arrived[id] = true;
  pending->streamed = pending->streamed && streamed(p);
  const sc_core::sc_time arrival = sc_core::sc_time_stamp() + delay;
  if (pending->count == 0 || arrival > pending->last_arrival) pending->last_arrival = arrival;

  if (++pending->count < m_cfg.systems) {
    sc_core::wait(pending->done);
  } else {
    m_pending.erase(addr);
    reduce(*pending, p);
    pending->done.notify();  // immediate: every other contributor is waiting on it
  }
  const sc_core::sc_time now = sc_core::sc_time_stamp();
  delay = pending->release > now ? pending->release - now : sc_core::SC_ZERO_TIME;
  p.set_response_status(pending->status);
}

void SwarmX::tree_sum(const std::vector<const float*>& parts, size_t count, int fanout, float* out) {
  const int n = static_cast<int>(parts.size());
  const int depth = tree_depth(n, fanout);
  std::vector<float> scratch(static_cast<size_t>(n));
  for (size_t e = 0; e < count; ++e) {
    for (int i = 0; i < n; ++i) scratch[static_cast<size_t>(i)] = parts[static_cast<size_t>(i)][e];
    // Level by level, in place: node j's children are j*f .. j*f+f-1 of the level below, and
    // j*f >= j, so no child is overwritten before it is read.
    int width = n;
    for (int level = 0; level < depth; ++level) {
      const int parents = (width + fanout - 1) / fanout;
      for (int j = 0; j < parents; ++j) {
        float acc = scratch[static_cast<size_t>(j * fanout)];
        for (int c = 1; c < fanout && j * fanout + c < width; ++c) acc += scratch[static_cast<size_t>(j * fanout + c)];
        scratch[static_cast<size_t>(j)] = acc;
      }
      width = parents;
    }
    out[e] = scratch[0];
  }
}

void SwarmX::reduce(Pending& pending, ::tlm::tlm_generic_payload& last) {
  const int f = m_cfg.fanout;
  const size_t count = pending.length / sizeof(float);
  std::vector<float> sum(count);
  std::vector<const float*> parts;
  for (int i = 0; i < m_cfg.systems; ++i) parts.push_back(pending.contrib[i].data());
  tree_sum(parts, count, f, sum.data());

  // Streamed contributions' bytes crossed the links as they came (tlm/streamed.h): their sum
  // leaves the root a tree's latency after the last one's last byte, and streams into MemoryX.
  const sc_core::sc_time tt = tree_time(pending.streamed ? 0 : pending.length);
  mark_busy(pending.last_arrival, tt);
  ::tlm::tlm_generic_payload w;
  w.set_command(::tlm::TLM_WRITE_COMMAND);
  w.set_address(last.get_address());
  w.set_data_ptr(reinterpret_cast<unsigned char*>(sum.data()));
  w.set_data_length(pending.length);
  w.set_streaming_width(pending.length);
  w.set_byte_enable_ptr(nullptr);
  w.set_dmi_allowed(false);
  w.set_response_status(::tlm::TLM_INCOMPLETE_RESPONSE);
  if (pending.streamed) w.set_extension(new Streamed);  // freed with w
  const sc_core::sc_time leaves_root = pending.last_arrival + tt;
  sc_core::sc_time d = leaves_root - sc_core::sc_time_stamp();  // last_arrival >= now: it includes ours
  to_memory->b_transport(w, d);
  pending.release = sc_core::sc_time_stamp() + d;
  pending.status = w.get_response_status();
  if (w.is_response_error()) {
    ++m_stats.errors;
    SC_REPORT_WARNING(kMsgType, (std::string(name()) + ": MemoryX answered " + w.get_response_string() +
                                 " to the sum at " + hex(last.get_address()))
                                    .c_str());
  }
  ++m_stats.reductions;
  m_stats.bytes_reduced += pending.length;
}

}  // namespace wafersim::tlm
