#include "tlm/ws_trainer.h"

#include "hw/number_format.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include <tlm_utils/multi_passthrough_target_socket.h>
#include <tlm_utils/simple_target_socket.h>
#include <tlm_utils/tlm_quantumkeeper.h>
#include <cstring>
#include <stdexcept>

#include "hw/config.h"
#include "tlm/model_util.h"
#include "tlm/swarmx.h"
#include "tlm/streamed.h"

namespace wafersim::tlm {

using compiler::WsPlan;

namespace {

// Bits [a, b) of a 64-bit channel mask (a < 64, b <= 64).
uint64_t bit_range(size_t a, size_t b) {
  return (b >= 64 ? ~uint64_t{0} : (uint64_t{1} << b) - 1) & ~((uint64_t{1} << a) - 1);
}

}  // namespace

WsSystem::WsSystem(const HwConfig& hw, const compiler::WsCompiled& c, int index, const WsHostLinks& links)
    : m_c(c), m_index(index), m_links(links) {
  m_fabric = std::make_unique<Fabric>(hw);
  m_fabric->allow_express();  // weight streaming reads no per-router counters and no traces
  m_loaded = load_program(*m_fabric, c.program);
  const WsPlan& p = c.plan;
  // The streams' channels: one per feature row (the grid: per band), then the root row's.
  const int streams = p.grid ? p.bands() : p.rows;
  const int nch = streams + 1;
  for (int i = 0; i < nch; ++i) {
    const int ch = i < streams ? (p.grid ? p.band_channel[static_cast<size_t>(i)] : p.row_channel[static_cast<size_t>(i)]) : p.root_channel;
    const bool east = i < streams && p.grid && p.band_east[static_cast<size_t>(i)];
    m_west.push_back(m_fabric->channel(east ? kEast : kWest, ch));
    if (!m_west.back()) {
      throw ConfigError(std::string("weight streaming: the fabric has no ") + (east ? "East" : "West") + " I/O channel " + std::to_string(ch));
    }
    m_west.back()->set_auto_drain(false);
  }
  m_pending.resize(static_cast<size_t>(nch));
  m_masks = links.channel_masks && nch <= 64;
  if (m_masks) {
    for (int i = 0; i < nch; ++i) {
      m_west[static_cast<size_t>(i)]->notify_takes(&m_took, uint64_t{1} << i);
      m_west[static_cast<size_t>(i)]->notify_delivers(&m_delivered, uint64_t{1} << i);
    }
  }
  m_until.assign(static_cast<size_t>(nch), p.streamed_passes());
  m_until.back() = p.layers;
  for (int b = 0; p.grid && b < streams; ++b) {
    int until = 0;
    for (int ps = 0; ps < p.streamed_passes(); ++ps) {
      const int l = ps < p.layers ? ps : 2 * p.layers - 1 - ps;
      if (p.channel_len(p.in(l), p.band_first[static_cast<size_t>(b)]) > 0) until = ps + 1;
    }
    m_until[static_cast<size_t>(b)] = until;
  }
  m_full_at.assign(static_cast<size_t>(nch), UINT64_MAX);
  m_full_kind.assign(static_cast<size_t>(nch), kWeight);
  m_got.resize(static_cast<size_t>(nch));
  m_expect.assign(static_cast<size_t>(nch), 0);
  for (int l = 0; l < p.layers; ++l) {
    for (int a = 0; a < p.rows; ++a) {
      m_expect[static_cast<size_t>(p.grid ? p.band_of(a) : a)] += static_cast<size_t>(p.outs[static_cast<size_t>(l)]) * p.wlen(l, a);
    }
    m_expect.back() += static_cast<size_t>(p.root_params(l));
  }
  m_expect.back() += 1;  // the loss sum
  // The marks, in the order the results come: per channel a layer's dW slices (or db), the last
  // layer first.
  const int L = p.layers;
  m_mark.assign(static_cast<size_t>(nch), std::vector<size_t>(static_cast<size_t>(L), 0));
  for (int k = 0; k < L; ++k) {
    const int l = L - 1 - k;
    for (size_t ch = 0; ch < static_cast<size_t>(nch); ++ch) m_mark[ch][static_cast<size_t>(k)] = k ? m_mark[ch][static_cast<size_t>(k) - 1] : 0;
    for (int a = 0; a < p.rows; ++a) {
      m_mark[static_cast<size_t>(p.grid ? p.band_of(a) : a)][static_cast<size_t>(k)] += static_cast<size_t>(p.outs[static_cast<size_t>(l)]) * p.wlen(l, a);
    }
    m_mark.back()[static_cast<size_t>(k)] += static_cast<size_t>(p.root_params(l)) + (k == 0 ? 1 : 0);
  }
}

void WsSystem::pass_marks(size_t ch, uint64_t cycle) {
  const int L = m_c.plan.layers;
  int& k = m_next_mark[ch];
  while (k < L && m_got[ch].size() >= m_mark[ch][static_cast<size_t>(k)]) {
    if (--m_marks_left[static_cast<size_t>(k)] == 0) {
      m_ready_at[static_cast<size_t>(k)] = cycle;
      m_ready = k + 1;  // a channel's marks only grow, so the layers back are whole in order
    }
    ++k;
  }
}

void WsSystem::start_step() {
  const WsPlan& p = m_c.plan;
  const int L = p.layers;
  const auto in = static_cast<uint8_t>(m_c.colors.in);
  for (auto& g : m_got) g.clear();
  m_missing = 0;
  for (size_t e : m_expect) m_missing += e;
  m_next_mark.assign(m_got.size(), 0);
  m_marks_left.assign(static_cast<size_t>(L), static_cast<int>(m_got.size()));
  m_ready_at.assign(static_cast<size_t>(L), 0);
  m_ready = 0;
  for (size_t ch = 0; ch < m_got.size(); ++ch) pass_marks(ch, m_now);  // channels with nothing of a layer
  m_time = WsTime();
  m_pass_time.assign(static_cast<size_t>(2 * L), WsTime());
  m_pass_from.assign(static_cast<size_t>(2 * L), UINT64_MAX);
  m_pass_left.assign(static_cast<size_t>(2 * L), 0);
  for (int l = 0; l < L; ++l) {
    const uint64_t n = static_cast<uint64_t>(p.wcols[static_cast<size_t>(l)]) * p.outs[static_cast<size_t>(l)];
    m_pass_left[static_cast<size_t>(l)] = n + static_cast<uint64_t>(p.root_params(l));
    m_pass_left[static_cast<size_t>(2 * L - 1 - l)] = p.streams(2 * L - 1 - l) ? n : 0;
  }
  m_entered = 0;
  count_entered();
  m_x.assign(static_cast<size_t>(p.shard), {});
  m_label.assign(static_cast<size_t>(p.shard), 0);
  m_sample_from.assign(static_cast<size_t>(p.shard), UINT64_MAX);
  // The order of the input stream: per row, column by column, sample by sample, feature by
  // feature; then the labels on the root row. Payloads are filled in as samples arrive. In the
  // grid a band's channel carries its rows' streams one after another, on the relays' color.
  const auto gin = static_cast<uint8_t>(m_c.colors.gin);
  for (int a = 0; a < p.rows; ++a) {
    auto& q = m_pending[static_cast<size_t>(p.grid ? p.band_of(a) : a)];
    for (int c = 0; c < p.cols; ++c) {
      for (int s = p.col_start(c); s < p.col_start(c) + p.col_m(c); ++s) {
        for (int k = p.off[0][static_cast<size_t>(a)]; k < p.off[0][static_cast<size_t>(a) + 1]; ++k) {
          q.push_back({static_cast<uint32_t>(k), static_cast<uint32_t>(s), p.grid ? gin : in, kInput});
        }
      }
    }
  }
  auto& r = m_pending.back();
  for (int s = 0; s < p.shard; ++s) r.push_back({~0u, static_cast<uint32_t>(s), in, kInput});
  m_rr = 0;
  m_wbudget = m_ibudget = m_gbudget = 0;
  m_queued = 0;
  m_late = late_mask();
  m_full_at.assign(m_west.size(), UINT64_MAX);
  m_full_kind.assign(m_west.size(), kWeight);
  m_full_w = m_full_i = 0;
  m_took.store(0, std::memory_order_relaxed);
  m_nonempty = 0;
  mark_pending();
}

void WsSystem::sample_arrived(int s, const float* x, int label, uint64_t from) {
  m_x[static_cast<size_t>(s)].assign(x, x + m_c.plan.width[0]);
  m_label[static_cast<size_t>(s)] = label;
  m_sample_from[static_cast<size_t>(s)] = from;
}

void WsSystem::queue_pass(int ps, const float* W, const float* b, uint64_t from) {
  const WsPlan& p = m_c.plan;
  const int L = p.layers;
  if (ps < 0 || !p.streams(ps)) {
    throw std::logic_error("weight streaming: pass " + std::to_string(ps) + " streams no weights (" +
                           std::to_string(p.streamed_passes()) + " passes do)");
  }
  const int l = ps < L ? ps : 2 * L - 1 - ps;
  const auto wc = static_cast<uint8_t>(m_c.colors.w), in = static_cast<uint8_t>(m_c.colors.in);
  const int ni = p.wcols[static_cast<size_t>(l)], no = p.outs[static_cast<size_t>(l)];
  if (p.grid) {
    // Per band, output by output, its rows' slices in row order (the relays split them).
    const auto gin = static_cast<uint8_t>(m_c.colors.gin);
    for (int b = 0; b < p.bands(); ++b) {
      auto& q = m_pending[static_cast<size_t>(b)];
      for (int o = 0; o < no; ++o) {
        const auto& off = p.off[static_cast<size_t>(p.in(l))];
        for (int k = off[static_cast<size_t>(p.band_first[static_cast<size_t>(b)])]; k < off[static_cast<size_t>(p.band_first[static_cast<size_t>(b) + 1])]; ++k) {
          q.push_back({f32_bits(W[static_cast<size_t>(o) * ni + k]), static_cast<uint32_t>(ps), gin, kWeight});
        }
      }
    }
  }
  for (int a = 0; a < p.rows && !p.grid; ++a) {
    auto& q = m_pending[static_cast<size_t>(a)];
    for (int o = 0; o < no; ++o) {
      for (int k = p.woff(l, a); k < p.woff(l, a) + p.wlen(l, a); ++k) {
        q.push_back({f32_bits(W[static_cast<size_t>(o) * ni + k]), static_cast<uint32_t>(ps), wc, kWeight});
      }
    }
  }
  if (b) {
    // Per output its bias (with a LayerNorm also its gamma and beta, after the bias).
    const bool ln = p.has_ln(l);
    for (int o = 0; o < no; ++o) {
      m_pending.back().push_back({f32_bits(b[o]), static_cast<uint32_t>(ps), in, kWeight});
      if (ln) {
        m_pending.back().push_back({f32_bits(b[no + o]), static_cast<uint32_t>(ps), in, kWeight});
        m_pending.back().push_back({f32_bits(b[2 * no + o]), static_cast<uint32_t>(ps), in, kWeight});
      }
    }
  }
  mark_pending();
  m_pass_from[static_cast<size_t>(ps)] = from;
  m_queued = std::max(m_queued, ps + 1);
  m_late = late_mask();
}

// The passes wholly in the wafer, in order: m_entered, moved on when a pass's last word goes in.
void WsSystem::count_entered() {
  while (m_entered < static_cast<int>(m_pass_left.size()) && m_pass_left[static_cast<size_t>(m_entered)] == 0) ++m_entered;
}

void WsSystem::step_fabric() {
  const uint64_t now = m_fabric->cycle();
  m_fabric->step();
  if (m_on_step) m_on_step(now);
}

uint64_t WsSystem::settle() {
  constexpr uint64_t kSettle = 256;
  uint64_t k = 0;
  while (m_fabric->in_flight() != 0) {
    step_fabric();
    if (++k > 1000000) throw std::runtime_error("weight streaming: a wafer does not settle after a minibatch");
  }
  for (uint64_t i = 0; i < kSettle; ++i) step_fabric();
  m_now += k + kSettle;
  m_time.compute += k + kSettle;
  if (!m_pass_time.empty()) m_pass_time.back().compute += k + kSettle;
  return k + kSettle;
}

// The channels with items pending join m_nonempty (after items were queued).
void WsSystem::mark_pending() {
  for (size_t i = 0; m_masks && i < m_pending.size(); ++i) {
    if (!m_pending[i].empty()) m_nonempty |= uint64_t{1} << i;
  }
}

// Channel i has items pending and no valid full stamp: offer them while the budget and the
// channel take them.
void WsSystem::offer(size_t i, bool* wstall, bool* istall) {
  auto& q = m_pending[i];
  bool host_late = false;
  Kind late_kind = kWeight;
  while (!q.empty()) {
    const Item& it = q.front();
    if (it.kind == kWeight ? (m_now < m_pass_from[static_cast<size_t>(it.pass)] || m_wbudget < 1)
                           : (m_now < m_sample_from[static_cast<size_t>(it.pass)] || m_ibudget < 1)) {
      host_late = true;
      late_kind = static_cast<Kind>(it.kind);
      break;
    }
    if (m_west[i]->inject_full()) {  // the wafer backs up: try again next cycle
      ++m_refused;
      m_full_at[i] = m_west[i]->injected();
      m_full_kind[i] = static_cast<Kind>(it.kind);
      if (m_masks) (it.kind == kWeight ? m_full_w : m_full_i) |= uint64_t{1} << i;
      break;
    }
    Wavelet w{it.payload, static_cast<uint8_t>(it.color), false};
    if (it.kind == kInput) {
      w.payload = w.payload == ~0u ? static_cast<uint32_t>(m_label[static_cast<size_t>(it.pass)])
                                   : f32_bits(m_x[static_cast<size_t>(it.pass)][w.payload]);
    }
    m_west[i]->try_inject(w);  // cannot be refused now
    if (it.kind == kWeight) {
      m_wbudget -= 1;
      if (--m_pass_left[static_cast<size_t>(it.pass)] == 0) count_entered();
    } else {
      m_ibudget -= 1;
    }
    q.pop_front();
  }
  if (q.empty() && m_masks) m_nonempty &= ~(uint64_t{1} << i);
  // Nothing queued but passes still to come for this channel (the root's only in forward).
  if (q.empty() && m_queued < m_until[i]) host_late = true;
  if (host_late && m_west[i]->inject_queue_size() == 0) *(late_kind == kWeight ? wstall : istall) = true;
}

bool WsSystem::cycle() {
  const bool was_done = done();
  const size_t n = m_west.size();
  const int passes = static_cast<int>(m_pass_left.size());
  const int streamed = m_c.plan.streamed_passes();
  m_wbudget = std::min(m_wbudget + m_links.weights_per_cycle, m_links.weights_per_cycle + 1.0);
  m_ibudget = std::min(m_ibudget + m_links.inputs_per_cycle, m_links.inputs_per_cycle + 1.0);
  m_gbudget = std::min(m_gbudget + m_links.grads_per_cycle, m_links.grads_per_cycle + 1.0);
  bool wstall = false, istall = false;
  if (m_masks) {
    // Stamps the fabric has made stale; empty channels matter only while passes are to come.
    const uint64_t took = m_took.load(std::memory_order_relaxed) ? m_took.exchange(0, std::memory_order_relaxed) : 0;
    m_full_w &= ~took;
    m_full_i &= ~took;
    if (m_queued < streamed) {
      uint64_t empty = m_late & ~m_nonempty;
      for (; empty; empty &= empty - 1) {
        if (!m_west[static_cast<size_t>(__builtin_ctzll(empty))]->has_inject_work()) {
          wstall = true;  // the host is late with weights
          break;
        }
      }
    }
    // Round-robin from m_rr: the channels that can move in order, and between them the refusals
    // of the full ones, counted while their kind's budget allows (only moves spend it).
    const uint64_t active = m_nonempty & ~(m_full_w | m_full_i);
    auto refusals = [&](size_t a, size_t b) {
      if (a >= b) return;
      const uint64_t r = bit_range(a, b);
      if (m_wbudget >= 1) m_refused += static_cast<uint64_t>(__builtin_popcountll(m_full_w & r));
      if (m_ibudget >= 1) m_refused += static_cast<uint64_t>(__builtin_popcountll(m_full_i & r));
    };
    if (!active) {
      refusals(0, n);  // the common cycle: every channel empty or still full, nothing to offer
    } else {
      for (const auto& [a, b] : {std::pair<size_t, size_t>{m_rr, n}, std::pair<size_t, size_t>{0, m_rr}}) {
        size_t cur = a;
        for (uint64_t m = active & bit_range(a, b); m; m &= m - 1) {
          const auto i = static_cast<size_t>(__builtin_ctzll(m));
          refusals(cur, i);
          offer(i, &wstall, &istall);
          cur = i + 1;
        }
        refusals(cur, b);
      }
    }
  } else {
    for (size_t j = 0, i = m_rr; j < n; ++j, i = i + 1 == n ? 0 : i + 1) {
      if (m_pending[i].empty()) {  // the common case, kept cheap: nothing queued for this channel now
        // Passes still to come for this channel (the root's only in forward) and nothing left in
        // its inject queue: the host is late with weights.
        if (m_queued < m_until[i] && !m_west[i]->has_inject_work()) wstall = true;
        continue;
      }
      if (m_full_at[i] == m_west[i]->injected()) {  // still full, the same item first (see m_full_at)
        if ((m_full_kind[i] == kWeight ? m_wbudget : m_ibudget) >= 1) ++m_refused;
        continue;
      }
      offer(i, &wstall, &istall);
    }
  }
  m_rr = m_rr + 1 == n ? 0 : m_rr + 1;
  step_fabric();
  bool gstall = false;
  // Takes what the channels hold, round-robin from m_rr, while the budget lasts; one that still
  // holds something is a gradient stall if the budget ran out.
  auto receive_from = [&](size_t i) {
    Wavelet w;
    while (m_gbudget >= 1 && m_west[i]->try_receive(&w)) {
      m_got[i].push_back(w.payload);
      m_gbudget -= 1;
      if (m_got[i].size() <= m_expect[i]) --m_missing;
      if (m_next_mark[i] < m_c.plan.layers && m_got[i].size() >= m_mark[i][static_cast<size_t>(m_next_mark[i])]) pass_marks(i, m_now + 1);
    }
    if (m_west[i]->receive_queue_size() == 0) return false;
    if (m_gbudget < 1) gstall = true;
    return true;
  };
  if (m_masks) {
    // Only the channels the fabric delivered to, or that still held something.
    uint64_t recv = m_recv;
    if (m_delivered.load(std::memory_order_relaxed)) recv |= m_delivered.exchange(0, std::memory_order_relaxed);
    m_recv = 0;
    if (recv) {
      for (const auto& [a, b] : {std::pair<size_t, size_t>{m_rr, n}, std::pair<size_t, size_t>{0, m_rr}}) {
        for (uint64_t m = recv & bit_range(a, b); m; m &= m - 1) {
          const auto i = static_cast<size_t>(__builtin_ctzll(m));
          if (receive_from(i)) m_recv |= uint64_t{1} << i;
        }
      }
    }
  } else {
    // The channels hold nothing to take: none did after the last pass, and nothing came since.
    const uint64_t delivered = m_fabric->channel_deliveries();
    const bool receive = m_recv_pending || delivered != m_recv_seen;
    m_recv_seen = delivered;
    m_recv_pending = false;
    for (size_t j = 0, i = m_rr; receive && j < n; ++j, i = i + 1 == n ? 0 : i + 1) {
      if (m_west[i]->has_receive_work() && receive_from(i)) m_recv_pending = true;
    }
  }
  ++m_now;
  if (!was_done) {
    const int pe = std::min(passes_entered(), passes - 1);
    WsTime& pt = m_pass_time[static_cast<size_t>(pe)];
    if (istall) ++m_time.input_stall, ++pt.input_stall;
    else if (wstall) ++m_time.weight_stream, ++pt.weight_stream;
    else if (gstall) ++m_time.grad_reduce, ++pt.grad_reduce;
    else ++m_time.compute, ++pt.compute;
  }
  return done();
}

bool WsSystem::done() const { return m_missing == 0; }

uint64_t WsSystem::late_mask() const {
  uint64_t m = 0;
  for (size_t i = 0; i < m_until.size() && i < 64; ++i) {
    if (m_queued < m_until[i]) m |= uint64_t{1} << i;
  }
  return m;
}

void WsSystem::results(std::vector<std::vector<float>>* dw, std::vector<std::vector<float>>* db, float* loss_sum) const {
  const int L = m_c.plan.layers;
  dw->assign(static_cast<size_t>(L), {});
  db->assign(static_cast<size_t>(L), {});
  for (int l = 0; l < L; ++l) layer_results(l, &(*dw)[static_cast<size_t>(l)], &(*db)[static_cast<size_t>(l)], loss_sum);
}

void WsSystem::layer_results(int l, std::vector<float>* dw, std::vector<float>* db, float* loss_sum) const {
  const WsPlan& p = m_c.plan;
  const int L = p.layers, k = L - 1 - l;
  const int ni = p.wcols[static_cast<size_t>(l)], no = p.outs[static_cast<size_t>(l)];
  dw->assign(static_cast<size_t>(ni) * no, 0.0f);
  // Per channel, per output: the rows' dW slices (the grid: of the band's rows in the order its
  // relays gather them), from the channel's mark of the layer before.
  const int streams = p.grid ? p.bands() : p.rows;
  for (int ch = 0; ch < streams; ++ch) {
    const auto& got = m_got[static_cast<size_t>(ch)];
    size_t i = k ? m_mark[static_cast<size_t>(ch)][static_cast<size_t>(k) - 1] : 0;
    const std::vector<int> rows = p.grid ? p.egress_order(ch) : std::vector<int>{ch};
    for (int o = 0; o < no; ++o) {
      for (int a : rows) {
        for (int f = p.woff(l, a); f < p.woff(l, a) + p.wlen(l, a); ++f) {
          (*dw)[static_cast<size_t>(o) * ni + f] = f32_from_bits(got[i++]);
        }
      }
    }
  }
  const auto& root = m_got.back();
  size_t i = k ? m_mark.back()[static_cast<size_t>(k) - 1] : 0;
  if (k == 0) *loss_sum = f32_from_bits(root[i++]);
  db->clear();
  for (int o = 0; o < p.root_params(l); ++o) db->push_back(f32_from_bits(root[i++]));  // db (then d gamma, d beta)
}

WsTrainer::Port::Port(sc_core::sc_module_name n, WsTrainer* o, WsSystem* s)
    : sc_module(n), weights_in("weights_in"), inputs_in("inputs_in"), grads_out("grads_out"), owner(o), sys(s) {
  weights_in.register_b_transport(this, &Port::b_transport);
  inputs_in.register_b_transport(this, &Port::input);
}

void WsTrainer::Port::input(int, ::tlm::tlm_generic_payload& t, sc_core::sc_time& delay) {
  const WsPlan& p = owner->m_c.plan;
  const int s = static_cast<int>(t.get_address());
  if (t.get_command() != ::tlm::TLM_WRITE_COMMAND || s < 0 || s >= p.shard ||
      t.get_data_length() != 4 * (static_cast<unsigned>(p.width[0]) + 1)) {
    t.set_response_status(::tlm::TLM_ADDRESS_ERROR_RESPONSE);
    return;
  }
  const float* x = reinterpret_cast<const float*>(t.get_data_ptr());
  int32_t label;
  std::memcpy(&label, x + p.width[0], 4);
  const sc_core::sc_time at = sc_core::sc_time_stamp() + delay + sc_core::sc_time(owner->m_links.bridge_latency_ns, sc_core::SC_NS);
  sys->sample_arrived(s, x, label, owner->cycle_of(at));
  t.set_response_status(::tlm::TLM_OK_RESPONSE);
}

void WsTrainer::Port::b_transport(::tlm::tlm_generic_payload& t, sc_core::sc_time& delay) {
  const WsPlan& p = owner->m_c.plan;
  const int L = p.layers, ps = static_cast<int>(t.get_address());
  if (t.get_command() != ::tlm::TLM_WRITE_COMMAND || ps < 0 || ps >= p.streamed_passes()) {
    t.set_response_status(::tlm::TLM_ADDRESS_ERROR_RESPONSE);
    return;
  }
  const int l = ps < L ? ps : 2 * L - 1 - ps;
  const size_t nw = static_cast<size_t>(p.wcols[static_cast<size_t>(l)]) * p.outs[static_cast<size_t>(l)];
  const size_t nb = ps < L ? static_cast<size_t>(p.root_params(l)) : 0;
  if (t.get_data_length() != 4 * (nw + nb)) {
    t.set_response_status(::tlm::TLM_BURST_ERROR_RESPONSE);
    return;
  }
  const float* w = reinterpret_cast<const float*>(t.get_data_ptr());
  // The payload has fully arrived at sc_time_stamp() + delay (SwarmX's tree time includes the
  // bytes over its links); its first words arrive earlier by the transfer time at the host
  // links' rate, which cycle() then enforces word by word.
  const double words = static_cast<double>(nw + nb);
  const sc_core::sc_time end = sc_core::sc_time_stamp() + delay + sc_core::sc_time(owner->m_links.bridge_latency_ns, sc_core::SC_NS);
  const uint64_t end_cycle = owner->cycle_of(end);
  const uint64_t span = static_cast<uint64_t>(words / owner->m_links.weights_per_cycle);
  sys->queue_pass(ps, w, nb ? w + nw : nullptr, end_cycle > span ? end_cycle - span : 0);
  t.set_response_status(::tlm::TLM_OK_RESPONSE);
}

WsTrainer::WsTrainer(sc_core::sc_module_name name, const HwConfig& hw, const compiler::KernelGraph& g,
                     const compiler::WsCompiled& c, const Dataset& data, const Normalize& norm, uint64_t seed,
                     long long first_step, MemoryX& memx, const WsHostLinks& links)
    : sc_module(name), to_swarmx("to_swarmx"), m_c(c), m_data(data), m_memx(memx), m_links(links),
      m_period(sc_core::sc_time(1e3 / hw.fabric.clock_mhz, sc_core::SC_NS)), m_step(first_step) {
  const WsPlan& p = c.plan;
  if (static_cast<int>(data.features) != p.width.front()) {
    throw ConfigError("the dataset has " + std::to_string(data.features) + " features per sample, the model's input " +
                      std::to_string(p.width.front()));
  }
  if (data.classes > p.width.back()) {
    throw ConfigError("the dataset has labels up to " + std::to_string(data.classes - 1) + ", the model only " +
                      std::to_string(p.width.back()) + " classes");
  }
  if (data.count == 0) throw ConfigError("the dataset is empty");
  m_order = std::make_unique<InputWorker>(data, InputRoute{}, norm, seed);
  for (size_t l = 0; l < g.layers.size(); ++l) {
    const auto& d = g.layers[l];
    const std::string wn = d.weight.empty() ? d.name + ".weight" : d.weight;
    const std::string bn = d.bias.empty() ? d.name + ".bias" : d.bias;
    m_wid.push_back(memx.find_tensor(wn) >= 0 ? memx.find_tensor(wn) : memx.add_tensor(wn, d.w));
    // A LayerNorm's gamma and beta travel with the bias: one tensor, b then gamma then beta.
    std::vector<float> root = d.b;
    if (d.ln.on) {
      root.insert(root.end(), d.ln.g.begin(), d.ln.g.end());
      root.insert(root.end(), d.ln.b.begin(), d.ln.b.end());
    }
    m_bid.push_back(memx.find_tensor(bn) >= 0 ? memx.find_tensor(bn) : memx.add_tensor(bn, root));
  }
  for (const auto& d : g.layers) m_pass_names.push_back(d.name + " forward");
  for (auto it = g.layers.rbegin(); it != g.layers.rend(); ++it) m_pass_names.push_back(it->name + " backward");
  // The reduced loss travels as a one-value gradient at an address of its own.
  m_loss_id = memx.find_tensor("wafersim.loss_sum") >= 0 ? memx.find_tensor("wafersim.loss_sum")
                                                         : memx.add_tensor("wafersim.loss_sum", {0.0f});
  for (int i = 0; i < p.systems; ++i) {
    m_sys.push_back(std::make_unique<WsSystem>(hw, c, i, links));
    m_ports.push_back(std::make_unique<Port>(("system" + std::to_string(i)).c_str(), this, m_sys.back().get()));
  }
  // The compile report's estimate without the host's delays (those of this run's links could
  // only raise it): a minibatch 20 times over it, and a million cycles, is stuck.
  m_limit = static_cast<uint64_t>(20 * compiler::ws_estimate(g, p, compiler::WsHostPace{}).cycles_per_batch) + 1000000;
  for (auto& s : m_sys) s->settle();  // the cores' init tasks
  SC_HAS_PROCESS(WsTrainer);
  SC_THREAD(chief);
  if (links.threads > 1 && p.systems > 1) {
    m_pool = std::make_unique<WorkerPool>(std::min(links.threads, p.systems));
    for (int i = 0; i < p.systems; ++i) m_stretch_done.push_back(std::make_unique<sc_core::sc_event>());
    SC_THREAD(dispatcher);
  }
  for (int i = 0; i < p.systems; ++i) {
    sc_core::sc_spawn_options o;
    sc_core::sc_spawn(sc_bind(&WsTrainer::runner, this, i), ("runner" + std::to_string(i)).c_str(), &o);
  }
}

WsTrainer::~WsTrainer() = default;

// In integer time units: exact however late in the run (a double's quotient is not).
uint64_t WsTrainer::cycle_of(const sc_core::sc_time& t) const {
  const uint64_t per = m_period.value();
  return (t.value() + per - 1) / per;
}

std::vector<float> WsTrainer::read_tensor(int id, sc_core::sc_time& delay) {
  std::vector<float> v(m_memx.size(id));
  ::tlm::tlm_generic_payload t;
  detail::set_plain(t, ::tlm::TLM_READ_COMMAND, m_memx.base(id), v.data(), v.size() * 4);
  m_memx.b_transport(t, delay);
  if (t.is_response_error()) throw std::runtime_error("MemoryX READ failed: " + m_memx.last_error());
  return v;
}

std::vector<std::vector<float>> WsTrainer::weights() const {
  std::vector<std::vector<float>> v;
  for (int id : m_wid) v.push_back(m_memx.weights(id));
  return v;
}

std::vector<std::vector<float>> WsTrainer::biases() const {
  std::vector<std::vector<float>> v;
  for (int id : m_bid) v.push_back(m_memx.weights(id));
  return v;
}

WsStepResult WsTrainer::step() {
  m_requested = true;
  m_finished = false;
  sc_core::sc_start();
  if (!m_error.empty()) throw std::runtime_error(m_error);
  if (!m_finished) throw std::runtime_error("weight streaming: the simulation stopped before the minibatch finished");
  return m_result;
}

// The chief worker. Per minibatch: the inputs, then per pass a MemoryX READ of its layer and
// its broadcast (back to back with prefetch, each READ overlapping the previous broadcast;
// otherwise each once the previous pass has entered every wafer), then it waits for the
// runners' gradients to be summed into MemoryX and runs the optimizer.
void WsTrainer::chief() {
  using Clock = std::chrono::steady_clock;
  const WsPlan& p = m_c.plan;
  const int L = p.layers, N = static_cast<int>(m_sys.size());
  for (;;) {
    while (!m_requested) {
      sc_core::sc_pause();
      sc_core::wait(sc_core::SC_ZERO_TIME);
    }
    m_requested = false;
    try {
      // A minibatch starts on a clock edge, the first at or after the previous one's end (its
      // gradient reduce ends between edges). Its arrivals and its reduction then fall at the same
      // times relative to the wafer's cycles in every step, so a step's cycles do not depend on
      // the fraction of a period the steps before it left over, which changed from step to step
      // (and a resumed run starts at time 0).
      const uint64_t first = cycle_of(sc_core::sc_time_stamp());
      const sc_core::sc_time edge = sc_core::sc_time::from_value(m_period.value() * first);
      if (edge > sc_core::sc_time_stamp()) sc_core::wait(edge - sc_core::sc_time_stamp());
      const sc_core::sc_time t0 = sc_core::sc_time_stamp();
      // MemoryX and the way to the wafers (SwarmX's links, the bridge) each move one pass's words
      // at a time, at their rates, while their latencies overlap (requests are pipelined): pass
      // p+1's READ starts once pass p's words have left MemoryX, its broadcast once its words are
      // read and pass p's have gone onto the links (absolute times at which each is free again;
      // loosely timed, the chief issues each transaction with the delay that makes it start then).
      sc_core::sc_time mem_free = t0, link_free = t0;
      auto offset = [](const sc_core::sc_time& at) {
        const sc_core::sc_time now = sc_core::sc_time_stamp();
        return at > now ? at - now : sc_core::SC_ZERO_TIME;
      };
      // The input workers stream each system's shard once m_start fires.
      for (auto& sys : m_sys) {
        sys->set_now(cycle_of(t0));
        sys->start_step();
      }
      m_done = 0;
      m_start.notify(sc_core::SC_ZERO_TIME);
      for (int ps = 0; ps < p.streamed_passes(); ++ps) {
        const int l = ps < L ? ps : 2 * L - 1 - ps;
        if (!m_links.prefetch && ps > 0) {
          // Request the next pass only when every wafer has taken the whole previous one.
          for (;;) {
            bool all = true;
            for (auto& s : m_sys) all = all && s->passes_entered() >= ps;
            if (all) break;
            sc_core::wait(m_pass_in);
          }
        }
        // This pass's weights (and, forward, biases) from MemoryX, then the broadcast.
        auto c0 = Clock::now();
        const sc_core::sc_time read_at = std::max(mem_free, sc_core::sc_time_stamp());
        sc_core::sc_time d = offset(read_at);
        std::vector<float> data = read_tensor(m_wid[static_cast<size_t>(l)], d);
        sc_core::sc_time ready = sc_core::sc_time_stamp() + d;
        const double mem_ns_per_word = 32.0 / m_memx.config().bandwidth_gbps;
        if (ps < L) {  // the biases' READ follows the weights' words
          sc_core::sc_time db = offset(read_at + sc_core::sc_time(mem_ns_per_word * static_cast<double>(data.size()), sc_core::SC_NS));
          const std::vector<float> bias = read_tensor(m_bid[static_cast<size_t>(l)], db);
          data.insert(data.end(), bias.begin(), bias.end());
          ready = std::max(ready, sc_core::sc_time_stamp() + db);
        }
        mem_free = read_at + sc_core::sc_time(mem_ns_per_word * static_cast<double>(data.size()), sc_core::SC_NS);
        m_model_secs += std::chrono::duration<double>(Clock::now() - c0).count();
        const sc_core::sc_time send_at = std::max(ready, link_free);
        d = offset(send_at);
        ::tlm::tlm_generic_payload t;
        detail::set_plain(t, ::tlm::TLM_WRITE_COMMAND, static_cast<uint64_t>(ps), data.data(), data.size() * 4);
        to_swarmx->b_transport(t, d);
        if (t.is_response_error()) throw std::runtime_error("SwarmX broadcast of pass " + std::to_string(ps) + " failed");
        link_free = send_at + m_period * (static_cast<double>(data.size()) / m_links.weights_per_cycle);
      }
      while (m_done < N) sc_core::wait(m_all_done);
      for (const auto& w : m_workers) {
        if (m_error.empty() && !w->error().empty()) m_error = w->error();
      }
      if (!m_error.empty()) throw std::runtime_error(m_error);
      const auto c0 = Clock::now();
      const float total = m_memx.gradient(m_loss_id)[0];
      m_memx.step();
      m_model_secs += std::chrono::duration<double>(Clock::now() - c0).count();
      WsStepResult r;
      r.step = ++m_step;
      r.mean_loss = static_cast<double>(total) / p.batch;
      r.cycles = cycle_of(sc_core::sc_time_stamp()) - cycle_of(t0);
      r.time = m_sys[0]->step_time();
      r.pass_time = m_sys[0]->pass_time();
      m_cycles += r.cycles;
      m_result = r;
      m_finished = true;
    } catch (const std::exception& e) {
      m_error = e.what();
    }
  }
}

void WsTrainer::trace(sc_core::sc_trace_file* tf, const Region& region) {
  for (size_t i = 0; i < m_sys.size(); ++i) {
    m_probes.push_back(std::make_unique<FabricProbes>(("wafer_" + std::to_string(i)).c_str(), region));
    FabricProbes* probes = m_probes.back().get();
    WsSystem& s = *m_sys[i];
    probes->trace(tf, s.fabric());
    s.set_on_step([this, probes, &s](uint64_t now) {
      probes->sample(s.fabric(), now);
      sc_core::wait(m_period);
    });
  }
}

namespace {

// A quantum keeper that also tells how many clock periods are left to its next sync point.
struct Keeper : tlm_utils::tlm_quantumkeeper {
  // The number of inc(period) after which need_sync() holds (at least 1).
  uint64_t periods_to_sync(const sc_core::sc_time& period) const {
    const sc_core::sc_time at = sc_core::sc_time_stamp() + m_local_time;
    if (at >= m_next_sync_point) return 1;
    const uint64_t rem = (m_next_sync_point - at).value(), per = period.value();
    return std::max<uint64_t>(1, (rem + per - 1) / per);
  }
};

}  // namespace

// System 0's progress line, when a pass is in and the minibatch has run long enough (looked at
// every 65,536 cycles: the callers test that first).
void WsTrainer::report_progress(const WsSystem& s, uint64_t start) {
  if (!m_progress) return;
  // The passes whose weights are in (layer 0's backward pass streams none: it counts as in as
  // soon as the pass before it is, and is not named).
  const int in = std::min(s.passes_entered(), m_c.plan.streamed_passes());
  if (in <= m_reported) return;
  const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - m_step0).count();
  if (host >= m_progress_secs) {
    m_progress("  minibatch " + std::to_string(m_step + 1) + ": " + m_pass_names[static_cast<size_t>(in - 1)] +
               " weights in by cycle " + std::to_string(s.now() - start) + " (pass " + std::to_string(in) + " of " +
               std::to_string(m_c.plan.streamed_passes()) + " with weights), host " +
               std::to_string(static_cast<long long>(host)) + " s\n");
  }
  m_reported = in;
}

// After a cycle: the runner must act before the next one (the minibatch is done; without
// prefetch, a pass is wholly in; the minibatch ran past its bound).
bool WsTrainer::stretch_ends(const WsSystem& s, int entered, uint64_t start) const {
  return s.done() || (!m_links.prefetch && s.passes_entered() > entered) || s.now() - start > m_limit;
}

// On a pool thread: the cycles the runner would step before it next acts (stretch_ends) or
// synchronises (st.max). Touches only this system's wafer and stream buffers.
void WsTrainer::run_stretch(Stretch& st) {
  WsSystem& s = *m_sys[static_cast<size_t>(st.system)];
  try {
    while (st.stepped < st.max) {
      s.cycle();
      ++st.stepped;
      if (st.system == 0 && (s.now() & 0xffff) == 0) report_progress(s, st.start);
      if (stretch_ends(s, st.entered, st.start)) break;
    }
  } catch (...) {
    st.error = std::current_exception();
  }
}

void WsTrainer::dispatcher() {
  for (;;) {
    sc_core::wait(m_posted_ev);  // one delta cycle after the first post: every runner of that delta has posted
    std::vector<Stretch*> jobs;
    jobs.swap(m_posted);
    const auto c0 = std::chrono::steady_clock::now();
    const size_t T = static_cast<size_t>(m_pool->size());
    m_pool->run([&](int t) {
      for (size_t j = static_cast<size_t>(t); j < jobs.size(); j += T) run_stretch(*jobs[j]);
    });
    m_wafer_secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
    for (Stretch* st : jobs) m_stretch_done[static_cast<size_t>(st->system)]->notify(sc_core::SC_ZERO_TIME);
  }
}

// A system's wafer, temporally decoupled: one clock period of local time per cycle, in sync
// with the kernel at least once per quantum. After the last result it settles, then WRITEs its
// gradients and loss into SwarmX (which blocks until every system's contribution is in and the
// sum is in MemoryX); the time that takes is the minibatch's gradient-reduce tail. With a pool
// (WsHostLinks::threads), the cycles between two synchronisations run there as a stretch, beside
// the other systems' (dispatcher), and the runner then acts as it would have after them.
void WsTrainer::runner(int i) {
  using Clock = std::chrono::steady_clock;
  const WsPlan& p = m_c.plan;
  const int L = p.layers, N = static_cast<int>(m_sys.size());
  WsSystem& s = *m_sys[static_cast<size_t>(i)];
  Keeper qk;
  for (;;) {
    sc_core::wait(m_start);
    sc_core::wait(sc_core::SC_ZERO_TIME);  // the input workers announce their samples first
    try {
      qk.reset();
      const uint64_t start = s.now();
      int entered = 0;
      const bool traced = !m_probes.empty();  // then each cycle waits its period (m_on_step)
      const bool side_by_side = m_pool && !traced;
      auto w0 = Clock::now();
      // Stepped here cycle by cycle, untraced, nothing else moves the kernel's time between two
      // syncs, so need_sync() holds after exactly periods_to_sync() cycles: count them down.
      uint64_t to_sync = qk.periods_to_sync(m_period);
      auto sync = [&] {  // the wafer's own host time stops while the kernel runs the others
        if (!side_by_side) m_wafer_secs += std::chrono::duration<double>(Clock::now() - w0).count();
        qk.sync();
        to_sync = qk.periods_to_sync(m_period);
        w0 = Clock::now();
      };
      if (i == 0) {
        m_step0 = Clock::now();
        m_reported = 0;
      }
      // Each layer's gradients go into SwarmX as soon as they are whole, while the wafer runs the
      // passes after it (a CS-2's gradients stream out, and SwarmX sums them at line rate): a
      // process per WRITE, at the time of the cycle the layer's last value left the wafer, which
      // the WRITE's Streamed extension says (tlm/streamed.h). The minibatch ends when the last
      // one's sum is in MemoryX; what that takes after the wafer is done is its gradient-reduce
      // tail. Cycle c is at t0 + (c - start) periods, at or after the kernel's time here.
      const sc_core::sc_time t0 = sc_core::sc_time_stamp();
      struct Open {  // WRITEs in flight (shared: a failed minibatch leaves before they end)
        int n = 0;
        sc_core::sc_event closed;
      };
      const auto open = std::make_shared<Open>();
      int sent = 0;
      auto contribute = [&](int id, std::shared_ptr<std::vector<float>> g, sc_core::sc_time d) {
        ++open->n;
        sc_core::sc_spawn([this, i, id, g, d, open]() mutable {
          ::tlm::tlm_generic_payload t;
          detail::set_plain(t, ::tlm::TLM_WRITE_COMMAND, m_memx.base(id), g->data(), g->size() * 4);
          t.set_extension(new Streamed);  // freed with t
          m_ports[static_cast<size_t>(i)]->grads_out->b_transport(t, d);
          if (t.is_response_error() && m_error.empty()) m_error = "SwarmX reduce failed on system " + std::to_string(i);
          sc_core::wait(d);
          if (--open->n == 0) open->closed.notify(sc_core::SC_ZERO_TIME);
        });
      };
      auto send_ready = [&] {
        for (; sent < s.layers_ready(); ++sent) {
          const int l = L - 1 - sent;
          auto dw = std::make_shared<std::vector<float>>(), db = std::make_shared<std::vector<float>>();
          auto loss = std::make_shared<std::vector<float>>(1, 0.0f);
          s.layer_results(l, dw.get(), db.get(), loss->data());
          const sc_core::sc_time at = t0 + m_period * static_cast<double>(s.ready_at(sent) - start);
          const sc_core::sc_time d = at > sc_core::sc_time_stamp() ? at - sc_core::sc_time_stamp() : sc_core::SC_ZERO_TIME;
          contribute(m_wid[static_cast<size_t>(l)], dw, d);
          contribute(m_bid[static_cast<size_t>(l)], db, d);
          if (sent == 0) contribute(m_loss_id, loss, d);  // the roots send the loss sum first
        }
      };
      while (!s.done()) {
        if (side_by_side) {
          Stretch st;
          st.system = i;
          st.max = qk.periods_to_sync(m_period);
          st.start = start;
          st.entered = entered;
          m_posted.push_back(&st);
          m_posted_ev.notify(sc_core::SC_ZERO_TIME);
          sc_core::wait(*m_stretch_done[static_cast<size_t>(i)]);
          if (st.error) std::rethrow_exception(st.error);
          qk.inc(sc_core::sc_time::from_value(m_period.value() * st.stepped));
        } else {
          s.cycle();
          if (!traced) qk.inc(m_period);
          if (i == 0 && (s.now() & 0xffff) == 0) report_progress(s, start);
        }
        if (s.layers_ready() > sent) send_ready();
        const bool due = side_by_side || traced ? qk.need_sync() : --to_sync == 0;
        if (!m_links.prefetch && s.passes_entered() > entered) {
          entered = s.passes_entered();
          sync();
          m_pass_in.notify(sc_core::SC_ZERO_TIME);
        } else if (due) {
          sync();
        }
        if (s.now() - start > m_limit) {
          throw std::runtime_error("weight-streaming minibatch " + std::to_string(m_step + 1) + " did not finish within " +
                                   std::to_string(m_limit) + " cycles on system " + std::to_string(i) +
                                   " (20 times the compile estimate, plus 1000000): either the wafer is stuck, or the host "
                                   "side (input.*, memoryx.*, swarmx.*, edge_bridge.* rates and latencies) is set too slow "
                                   "for a minibatch to finish in that bound");
        }
      }
      const uint64_t settled = s.settle();
      if (!traced) qk.inc(m_period * static_cast<double>(settled));
      sync();
      send_ready();  // the first layer's, whole once the wafer is done
      const sc_core::sc_time t_red = sc_core::sc_time_stamp();
      while (open->n > 0) sc_core::wait(open->closed);
      const uint64_t red = cycle_of(sc_core::sc_time_stamp()) - cycle_of(t_red);
      s.add_grad_reduce(red);
      s.set_now(s.now() + red);
    } catch (const std::exception& e) {
      if (m_error.empty()) m_error = e.what();
    }
    if (++m_done == N) m_all_done.notify(sc_core::SC_ZERO_TIME);
  }
}

}  // namespace wafersim::tlm
