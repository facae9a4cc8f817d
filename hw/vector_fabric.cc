#include "hw/vector_fabric.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <new>
#include <cstring>
#include <typeinfo>


#include "hw/fabric.h"
#include "hw/pe_agent.h"
#include "hw/router.h"
#include "hw/traffic_agent.h"
#include "hw/vector_fabric_ops.h"
#include "hw/worker_pool.h"

namespace wafersim {

// A traffic endpoint it can run itself: every flow at rate 1, at most two flows, counts that fit
// 32 bits, receive queues of depth 1-7 made in ascending color order (so that TrafficAgent's
// round robin over queue indexes is one over colors).
bool VectorFabric::runs_itself(const TrafficAgent& a, int colors) {
  if (!a.m_unit_rates || a.m_flows.size() > 2 || a.m_opts.queue_depth < 1 || a.m_opts.queue_depth > 7) return false;
  if (colors > 32) return false;
  for (const auto& fl : a.m_flows) {
    if (fl.spec.count > 0xffffffffull || fl.spec.rate <= 0) return false;
  }
  for (size_t i = 1; i < a.m_queue_color.size(); ++i) {
    if (a.m_queue_color[i] <= a.m_queue_color[i - 1]) return false;
  }
  return true;
}

const char* VectorFabric::host_lacks() {
  __builtin_cpu_init();
  for (const char* const* isa = step_isa(); *isa; ++isa) {
    const std::string n = *isa;
    // (__builtin_cpu_supports takes only literals: the names step_isa() can list.)
#define WAFERSIM_ISA(name) \
  if (n == name && !__builtin_cpu_supports(name)) return *isa;
    WAFERSIM_ISA("popcnt") WAFERSIM_ISA("avx2") WAFERSIM_ISA("bmi") WAFERSIM_ISA("bmi2") WAFERSIM_ISA("fma")
    WAFERSIM_ISA("avx512f") WAFERSIM_ISA("avx512cd") WAFERSIM_ISA("avx512vl") WAFERSIM_ISA("avx512bw")
    WAFERSIM_ISA("avx512dq") WAFERSIM_ISA("avx512vbmi") WAFERSIM_ISA("avx512vpopcntdq") WAFERSIM_ISA("avx512bitalg")
    WAFERSIM_ISA("avx512ifma") WAFERSIM_ISA("avx512vnni")
#undef WAFERSIM_ISA
  }
  return nullptr;
}

std::string VectorFabric::supported(const Fabric& f) {
  const HwConfig& c = f.config();
  // Built for another processor (or run under a tool that hides some of this one's
  // instructions, as valgrind does with AVX-512): the routers' own visits serve instead.
  if (const char* isa = host_lacks()) return std::string("this processor lacks ") + isa + ", which the engine was built for";
  if (c.router.hop_latency != 1) return "router.hop_latency is not 1";
  if (c.router.ramp_latency > 2) return "router.ramp_latency is above 2";
  if (c.router.buffer_depth > 7) return "router.buffer_depth is above 7";
  for (int y = 0; y < f.height(); ++y) {
    for (int x = 0; x < f.width(); ++x) {
      const Router* r = f.router(x, y);
      if (!r) continue;
      const std::string at = Fabric::pe_name(x, y);
      if (const PeAgent* a = r->agent(); a && a->skips_evaluations()) return at + ": its agent skips evaluations";
      for (uint32_t m = r->routed_colors(); m; m &= m - 1) {
        const ColorRoute& route = *r->route(__builtin_ctz(m));
        if (route.npos != 1) return at + ": a route with switch positions";
        const uint8_t rx = route.pos[0].rx;
        if (!rx || (rx & (rx - 1))) return at + ": a route that merges input ports";
        for (int p : {kEast, kWest}) {
          if (((rx | route.pos[0].tx) & port_bit(p)) && !f.contains(x + port_dx(p), y)) return at + ": an edge channel";
        }
      }
    }
  }
  return "";
}

VectorFabric::VectorFabric(Fabric& f)
    : m_cfg(f.config()), m_width(f.width()), m_height(f.height()), m_depth(m_cfg.router.buffer_depth),
      m_colors(m_cfg.router.colors), m_ramp_latency(m_cfg.router.ramp_latency) {
  if (const std::string why = supported(f); !why.empty()) throw ConfigError("vector fabric: " + why);
  if (f.cycle() != 0) throw ConfigError("vector fabric: the fabric has already been stepped");
  m_row = (static_cast<size_t>(m_width) + kLanes - 1) / kLanes * kLanes;
  m_guard = m_row + kLanes;
  m_stride = m_guard * 2 + m_row * static_cast<size_t>(m_height);
  {
    constexpr size_t kHuge = size_t{2} << 20;
    const size_t bytes = (m_stride * kArrays * sizeof(uint32_t) + kHuge - 1) / kHuge * kHuge;
    void* p = std::aligned_alloc(kHuge, bytes);
    if (!p) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p, bytes, MADV_HUGEPAGE);  // a hint: without huge pages it works as well, slower
#endif
    std::memset(p, 0, bytes);
    m_mem = std::unique_ptr<uint32_t[], FreeHuge>(static_cast<uint32_t*>(p), FreeHuge{bytes});
  }
  m_pay.assign(m_stride * static_cast<size_t>(m_colors) * static_cast<size_t>(m_depth), 0);
  m_agent.assign(m_stride, nullptr);
  m_endpoint.assign(m_stride, nullptr);
  m_drain_below.assign(m_stride, 0);
  m_stall_below.assign(m_stride, 0);
  m_seed.assign(m_stride, 0);
  m_qpay.assign(m_stride * static_cast<size_t>(m_colors) * 8, 0);

  m_fwd64.assign(m_stride * kNumPorts, 0);
  m_stall64.assign(m_stride * kNumPorts, 0);
  m_color_fwd.assign(static_cast<size_t>(m_colors), 0);
  m_color_stall.assign(static_cast<size_t>(m_colors), 0);
  std::vector<bool> busy(m_stride / kLanes + 1, false);
  for (int y = 0; y < m_height; ++y) {
    for (int x = 0; x < m_width; ++x) {
      const Router* r = f.router(x, y);
      if (!r) continue;
      const size_t l = lane(x, y);
      m_agent[l] = f.agent(x, y);
      if (m_agent[l]) arr(kAgentFull)[l] = m_agent[l]->full_colors();
      auto* ta = dynamic_cast<TrafficAgent*>(m_agent[l]);
      if (ta && typeid(*ta) == typeid(TrafficAgent) && runs_itself(*ta, m_colors)) {
        m_endpoint[l] = ta;
        arr(kRecv)[l] = ta->m_receive_colors;
        arr(kNever)[l] = ta->m_opts.never_drain;
        arr(kQDepth)[l] = static_cast<uint32_t>(ta->m_opts.queue_depth);
        arr(kRrq)[l] = 0;
        arr(kFlowN)[l] = static_cast<uint32_t>(ta->m_flows.size());
        for (size_t i = 0; i < ta->m_flows.size(); ++i) {
          const auto& fl = ta->m_flows[i];
          arr(kFc + static_cast<int>(i))[l] = static_cast<uint32_t>(fl.spec.color);
          arr(kFcount + static_cast<int>(i))[l] = static_cast<uint32_t>(fl.spec.count);
          arr(kCtrlEvery + static_cast<int>(i))[l] = fl.spec.ctrl_every;
        }
        arr(kUnfinished)[l] = static_cast<uint32_t>(ta->m_unfinished_flows);
        // hash_uniform(...) < p  <=>  (h >> 11) < ceil(p * 2^53): the draw is (h >> 11) / 2^53.
        auto below = [](double p) {
          if (p >= 1.0) return ~uint64_t{0};
          if (p <= 0.0) return uint64_t{0};
          return static_cast<uint64_t>(std::ceil(p * 9007199254740992.0));
        };
        m_drain_below[l] = below(ta->m_opts.drain_prob);
        m_stall_below[l] = ta->m_opts.stall_prob > 0 ? below(ta->m_opts.stall_prob) : 0;
        m_seed[l] = ta->m_opts.seed;
        arr(kPe)[l] = ta->m_pe;
        if (ta->m_opts.record) m_record = true;
      }
      for (uint32_t m = r->routed_colors(); m; m &= m - 1) {
        const int c = __builtin_ctz(m);
        const SwitchPos& pos = r->route(c)->pos[0];
        for (int p = 0; p < kNumPorts; ++p) {
          if (pos.rx & port_bit(p)) arr(kRx + p)[l] |= 1u << c;
          if (pos.tx & port_bit(p)) {
            arr(kTx + p)[l] |= 1u << c;
            if (p < kNumLinkPorts) {
              for (int i = 0; i < 3; ++i) {
                if ((m_depth >> i) & 1) arr(kK + 3 * p + i)[l] |= 1u << c;
              }
            }
          }
        }
      }
      busy[(l - m_guard) / kLanes] = true;
      ++m_routers;
    }
  }
  for (size_t k = 0; k < busy.size(); ++k) {
    if (!busy[k]) continue;
    const size_t b = m_guard + k * kLanes;
    m_blocks.push_back(b);
    uint32_t agents = 0, endpoints = 0, drains = 0, stalls = 0;
    for (int l = 0; l < kLanes; ++l) {
      const size_t i = b + static_cast<size_t>(l);
      if (m_endpoint[i]) {
        endpoints |= 1u << l;
        if (m_drain_below[i] != ~uint64_t{0}) drains |= 1u << l;
        if (m_stall_below[i]) stalls |= 1u << l;
      } else if (m_agent[i]) {
        agents |= 1u << l;
      }
    }
    m_block_agents.push_back(agents);
    m_block_endpoints.push_back(endpoints);
    m_block_drains.push_back(drains);
    m_block_stalls.push_back(stalls);
    uint8_t multicast = 0;
    for (int l = 0; l < kLanes; ++l) {
      const size_t i = b + static_cast<size_t>(l);
      uint32_t seen = 0, twice = 0;
      for (int p = 0; p < kNumPorts; ++p) {
        twice |= seen & arr(kTx + p)[i];
        seen |= arr(kTx + p)[i];
      }
      if (twice) multicast = 1;
    }
    m_block_multicast.push_back(multicast);
  }
  // Control bits need slots only where a control wavelet can appear: an agent called through
  // PeAgent may send one, an endpoint run here if a flow says so.
  bool may_ctrl = false;
  for (size_t i = 0; i < m_agent.size() && !may_ctrl; ++i) {
    if (m_agent[i] && !m_endpoint[i]) may_ctrl = true;
    if (const TrafficAgent* a = m_endpoint[i]) {
      for (const auto& fl : a->m_flows) may_ctrl |= fl.spec.ctrl_every != 0;
    }
  }
  if (may_ctrl) {
    m_ctrl.assign(m_pay.size(), 0);
    m_qctrl.assign(m_qpay.size(), 0);
  }
  const auto threads = static_cast<size_t>(std::max(1, m_cfg.sim.threads));
  m_moved.assign(threads, Flag{});
  for (size_t t = 0; t <= threads; ++t) m_share.push_back(m_blocks.size() * t / threads);
}

void VectorFabric::log_arrival(TrafficAgent* a, uint64_t now, const Wavelet& w) {
  a->m_log.push_back(TrafficAgent::Arrival{now, w});
}

void VectorFabric::FreeHuge::operator()(uint32_t* p) const {
  (void)bytes;
  std::free(p);
}

void VectorFabric::step(WorkerPool* pool) {
  auto share = [this](int t) {
    bool& moved = m_moved[static_cast<size_t>(t)].value;
    moved = false;
    for (size_t i = m_share[static_cast<size_t>(t)]; i < m_share[static_cast<size_t>(t) + 1]; ++i) {
      step_block(i, &moved);
    }
  };
  if (pool && pool->size() > 1 && static_cast<size_t>(pool->size()) + 1 == m_share.size()) {
    pool->run(share);
  } else {
    for (size_t t = 0; t + 1 < m_share.size(); ++t) share(static_cast<int>(t));
  }
  ++m_now;
  if (m_now - m_flushed_at >= kFlushEvery) flush_counters();
}

void VectorFabric::flush_counters() {
  for (size_t b : m_blocks) {
    for (int l = 0; l < kLanes; ++l) {
      const size_t i = b + static_cast<size_t>(l);
      uint64_t* totals[4] = {&m_injected, &m_delivered, &m_sends, &m_pops};
      for (int w = 0; w < 4; ++w) {
        *totals[w] += arr(kCount + w)[i];
        arr(kCount + w)[i] = 0;
      }
      for (int p = 0; p < kNumPorts; ++p) {
        m_fwd64[i * kNumPorts + static_cast<size_t>(p)] += arr(kFwd + p)[i] & 0xffffu;
        m_stall64[i * kNumPorts + static_cast<size_t>(p)] += arr(kFwd + p)[i] >> 16;
        arr(kFwd + p)[i] = 0;
      }
      for (int k = 0; k < 16; ++k) {
        uint32_t& f = arr(kVFwd + k)[i];
        uint32_t& s = arr(kVStall + k)[i];
        for (uint32_t m = f; m; m &= m - 1) m_color_fwd[static_cast<size_t>(__builtin_ctz(m))] += uint64_t{1} << k;
        for (uint32_t m = s; m; m &= m - 1) m_color_stall[static_cast<size_t>(__builtin_ctz(m))] += uint64_t{1} << k;
        f = 0;
        s = 0;
      }
    }
  }
  m_flushed_at = m_now;
}

uint64_t VectorFabric::injected() {
  if (m_flushed_at != m_now) flush_counters();
  return m_injected;
}
uint64_t VectorFabric::delivered() {
  if (m_flushed_at != m_now) flush_counters();
  return m_delivered;
}
uint64_t VectorFabric::multicast_copies() {
  if (m_flushed_at != m_now) flush_counters();
  return m_sends - m_pops;
}
uint64_t VectorFabric::forwarded(int x, int y, int port) {
  if (m_flushed_at != m_now) flush_counters();
  return m_fwd64[lane(x, y) * kNumPorts + static_cast<size_t>(port)];
}
uint64_t VectorFabric::stall(int x, int y, int port) {
  if (m_flushed_at != m_now) flush_counters();
  return m_stall64[lane(x, y) * kNumPorts + static_cast<size_t>(port)];
}
uint64_t VectorFabric::in_flight() const {
  uint64_t n = 0;
  const int parity = static_cast<int>((m_now + 1) & 1);  // what the last cycle sent
  for (size_t b : m_blocks) {
    for (int l = 0; l < kLanes; ++l) {
      const size_t i = b + static_cast<size_t>(l);
      n += static_cast<uint64_t>(__builtin_popcount(arr(kC)[i]) + 2 * __builtin_popcount(arr(kC + 1)[i]) +
                                 4 * __builtin_popcount(arr(kC + 2)[i]));
    }
  }
  for (int p = 0; p < kNumLinkPorts; ++p) {
    const uint32_t* col = arr(mail_index(parity, kMailCol, p));
    for (size_t i = 0; i < m_stride; ++i) n += col[i] ? 1 : 0;
  }
  return n;
}

uint64_t VectorFabric::active() const {
  if (moved() || in_flight()) return m_routers;  // (moved() first: in_flight() walks the fabric)
  for (size_t i = 0; i < m_agent.size(); ++i) {
    if (m_endpoint[i] ? arr(kUnfinished)[i] || arr(kBuffered)[i] : m_agent[i] && m_agent[i]->has_work()) return m_routers;
  }
  return 0;
}

uint32_t VectorFabric::occupancy(int x, int y) const {
  const size_t i = lane(x, y);
  return static_cast<uint32_t>(__builtin_popcount(arr(kC)[i]) + 2 * __builtin_popcount(arr(kC + 1)[i]) +
                               4 * __builtin_popcount(arr(kC + 2)[i]));
}

uint32_t VectorFabric::buffered(int x, int y, int color) const {
  const size_t i = lane(x, y);
  uint32_t n = 0;
  for (int k = 0; k < 3; ++k) n |= ((arr(kC + k)[i] >> color) & 1u) << k;
  return n;
}

int VectorFabric::input_port(int x, int y, int color) const {
  for (int p = 0; p < kNumPorts; ++p) {
    if ((arr(kRx + p)[lane(x, y)] >> color) & 1) return p;
  }
  return -1;
}

void VectorFabric::reset_stats() {
  flush_counters();
  std::fill(m_fwd64.begin(), m_fwd64.end(), 0);
  std::fill(m_stall64.begin(), m_stall64.end(), 0);
  std::fill(m_color_fwd.begin(), m_color_fwd.end(), 0);
  std::fill(m_color_stall.begin(), m_color_stall.end(), 0);
  for (size_t b : m_blocks) {
    V cnt[3];
    for (int i = 0; i < 3; ++i) cnt[i] = ld(arr(kC + i) + b);
    for (int k = 1; k <= 7; ++k) st(arr(kReach + k - 1) + b, k <= m_depth ? ge3(cnt, k) : V{});
    st(arr(kPeakOcc) + b, popcount(cnt[0]) + 2 * popcount(cnt[1]) + 4 * popcount(cnt[2]));
  }
}

uint32_t VectorFabric::peak_occupancy(int x, int y) const { return arr(kPeakOcc)[lane(x, y)]; }
uint32_t VectorFabric::peak_of_color(int x, int y, int color) const {
  uint32_t peak = 0;
  for (int k = 1; k <= m_depth; ++k) {
    if ((arr(kReach + k - 1)[lane(x, y)] >> color) & 1) peak = static_cast<uint32_t>(k);
  }
  return peak;
}
uint64_t VectorFabric::color_forwarded(int color) {
  if (m_flushed_at != m_now) flush_counters();
  return m_color_fwd[static_cast<size_t>(color)];
}
uint64_t VectorFabric::color_stall(int color) {
  if (m_flushed_at != m_now) flush_counters();
  return m_color_stall[static_cast<size_t>(color)];
}

void VectorFabric::sync_endpoints() {
  for (size_t i = 0; i < m_endpoint.size(); ++i) {
    TrafficAgent* a = m_endpoint[i];
    if (!a) continue;
    a->m_sent = arr(kSentTotal)[i];
    a->m_consumed = arr(kConsumed)[i];
    a->m_buffered = arr(kBuffered)[i];
    a->m_full = arr(kAgentFull)[i];
    a->m_unfinished_flows = static_cast<int>(arr(kUnfinished)[i]);
    a->m_rr_flow = arr(kRrFlow)[i];
    for (size_t f = 0; f < a->m_flows.size(); ++f) {
      a->m_flows[f].sent = arr(kFsent + static_cast<int>(f))[i];
      a->m_flows[f].seq = arr(kSeq + static_cast<int>(f))[i];
    }
  }
}

}  // namespace wafersim
