#include "tlm/ws_trainer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>

#include "hw/config.h"
#include "tlm/swarmx.h"

namespace wafersim::tlm {

using compiler::WsPlan;

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

WsSystem::WsSystem(const HwConfig& hw, const compiler::WsCompiled& c, int index, const WsHostLinks& links)
    : m_c(c), m_index(index), m_links(links) {
  m_fabric = std::make_unique<Fabric>(hw);
  m_loaded = load_program(*m_fabric, c.program);
  const WsPlan& p = c.plan;
  const int nch = p.rows + 1;
  for (int i = 0; i < nch; ++i) {
    const int ch = i < p.rows ? p.row_channel[static_cast<size_t>(i)] : p.root_channel;
    m_west.push_back(m_fabric->channel(kWest, ch));
    if (!m_west.back()) throw ConfigError("weight streaming: the fabric has no West I/O channel " + std::to_string(ch));
    m_west.back()->set_auto_drain(false);
  }
  m_pending.resize(static_cast<size_t>(nch));
  m_got.resize(static_cast<size_t>(nch));
  m_expect.assign(static_cast<size_t>(nch), 0);
  for (int l = 0; l < p.layers; ++l) {
    for (int a = 0; a < p.rows; ++a) m_expect[static_cast<size_t>(a)] += static_cast<size_t>(p.width[static_cast<size_t>(l) + 1]) * p.len(l, a);
    m_expect.back() += static_cast<size_t>(p.width[static_cast<size_t>(l) + 1]);
  }
  m_expect.back() += 1;  // the loss sum
}

void WsSystem::queue_step(const std::vector<const float*>& xs, const std::vector<int>& labels,
                          const std::vector<std::vector<float>>& w, const std::vector<std::vector<float>>& b) {
  const WsPlan& p = m_c.plan;
  const auto& col = m_c.colors;
  const int L = p.layers, m = p.m;
  const auto in = static_cast<uint8_t>(col.in), wc = static_cast<uint8_t>(col.w);
  for (auto& g : m_got) g.clear();
  m_pass_left.assign(static_cast<size_t>(2 * L), 0);
  m_time = WsTime();
  m_pass_time.assign(static_cast<size_t>(2 * L), WsTime());
  for (int a = 0; a < p.rows; ++a) {
    auto& q = m_pending[static_cast<size_t>(a)];
    for (int c = 0; c < p.cols; ++c) {
      for (int k = p.off[0][static_cast<size_t>(a)]; k < p.off[0][static_cast<size_t>(a) + 1]; ++k) {
        for (int s = 0; s < m; ++s) q.push_back({Wavelet{bits(xs[static_cast<size_t>(c * m + s)][k]), in, false}, kInput, -1});
      }
    }
    auto pass = [&](int l, int ps) {
      const int ni = p.width[static_cast<size_t>(l)], no = p.width[static_cast<size_t>(l) + 1];
      const auto& W = w[static_cast<size_t>(l)];
      for (int o = 0; o < no; ++o) {
        for (int k = p.off[static_cast<size_t>(l)][static_cast<size_t>(a)]; k < p.off[static_cast<size_t>(l)][static_cast<size_t>(a) + 1]; ++k) {
          q.push_back({Wavelet{bits(W[static_cast<size_t>(o) * ni + k]), wc, false}, kWeight, ps});
          ++m_pass_left[static_cast<size_t>(ps)];
        }
      }
    };
    for (int l = 0; l < L; ++l) pass(l, l);
    for (int l = L - 1; l >= 0; --l) pass(l, 2 * L - 1 - l);
  }
  auto& r = m_pending.back();
  for (int s = 0; s < p.shard; ++s) r.push_back({Wavelet{static_cast<uint32_t>(labels[static_cast<size_t>(s)]), in, false}, kInput, -1});
  for (int l = 0; l < L; ++l) {
    for (float v : b[static_cast<size_t>(l)]) {
      r.push_back({Wavelet{bits(v), in, false}, kWeight, l});
      ++m_pass_left[static_cast<size_t>(l)];
    }
  }
  // MemoryX starts streaming the first pass now (with prefetch, every pass back to back).
  m_rr = 0;
  m_wbudget = m_ibudget = m_gbudget = 0;
  m_released = m_links.prefetch ? 2 * L : 1;
  m_avail_at = m_now + m_links.latency;
}

void WsSystem::release_pass(int pass) {
  if (m_links.prefetch || pass + 1 != m_released || m_released >= static_cast<int>(m_pass_left.size())) return;
  // Without prefetch the next pass is requested once this one has entered the wafer.
  ++m_released;
  m_avail_at = m_now + m_links.latency;
}

bool WsSystem::cycle() {
  const bool was_done = done();
  const size_t n = m_west.size();
  m_wbudget = std::min(m_wbudget + m_links.weights_per_cycle, m_links.weights_per_cycle + 1.0);
  m_ibudget = std::min(m_ibudget + m_links.inputs_per_cycle, m_links.inputs_per_cycle + 1.0);
  m_gbudget = std::min(m_gbudget + m_links.grads_per_cycle, m_links.grads_per_cycle + 1.0);
  bool wstall = false, istall = false;
  for (size_t j = 0; j < n; ++j) {
    const size_t i = (m_rr + j) % n;
    auto& q = m_pending[i];
    bool host_late = false;
    Kind late_kind = kInput;
    while (!q.empty()) {
      const Item& it = q.front();
      if (it.kind == kWeight ? (it.pass >= m_released || m_now < m_avail_at || m_wbudget < 1) : m_ibudget < 1) {
        host_late = true;
        late_kind = it.kind;
        break;
      }
      if (!m_west[i]->try_inject(it.w)) {
        ++m_refused;
        break;
      }
      if (it.kind == kWeight) {
        m_wbudget -= 1;
        if (--m_pass_left[static_cast<size_t>(it.pass)] == 0) release_pass(it.pass);
      } else {
        m_ibudget -= 1;
      }
      q.pop_front();
    }
    if (host_late && m_west[i]->inject_queue_size() == 0) (late_kind == kWeight ? wstall : istall) = true;
  }
  m_rr = (m_rr + 1) % n;
  m_fabric->step();
  bool gstall = false;
  for (size_t j = 0; j < n; ++j) {
    const size_t i = (m_rr + j) % n;
    Wavelet w;
    while (m_gbudget >= 1 && m_west[i]->try_receive(&w)) {
      m_got[i].push_back(w.payload);
      m_gbudget -= 1;
    }
    if (m_west[i]->receive_queue_size() > 0 && m_gbudget < 1) gstall = true;
  }
  ++m_now;
  if (!was_done) {
    size_t pass = m_pass_left.size() - 1;
    for (size_t k = 0; k < m_pass_left.size(); ++k) {
      if (m_pass_left[k]) {
        pass = k;
        break;
      }
    }
    WsTime& pt = m_pass_time[pass];
    if (istall) ++m_time.input_stall, ++pt.input_stall;
    else if (wstall) ++m_time.weight_stream, ++pt.weight_stream;
    else if (gstall) ++m_time.grad_reduce, ++pt.grad_reduce;
    else ++m_time.compute, ++pt.compute;
  }
  return done();
}

bool WsSystem::done() const {
  for (size_t i = 0; i < m_got.size(); ++i) {
    if (m_got[i].size() < m_expect[i]) return false;
  }
  return true;
}

void WsSystem::results(std::vector<std::vector<float>>* dw, std::vector<std::vector<float>>* db, float* loss_sum) const {
  const WsPlan& p = m_c.plan;
  const int L = p.layers;
  dw->assign(static_cast<size_t>(L), {});
  db->assign(static_cast<size_t>(L), {});
  for (int l = 0; l < L; ++l) {
    (*dw)[static_cast<size_t>(l)].assign(static_cast<size_t>(p.width[static_cast<size_t>(l)]) * p.width[static_cast<size_t>(l) + 1], 0.0f);
  }
  for (int a = 0; a < p.rows; ++a) {
    size_t i = 0;
    const auto& got = m_got[static_cast<size_t>(a)];
    for (int l = L - 1; l >= 0; --l) {
      const int ni = p.width[static_cast<size_t>(l)], no = p.width[static_cast<size_t>(l) + 1];
      for (int o = 0; o < no; ++o) {
        for (int k = p.off[static_cast<size_t>(l)][static_cast<size_t>(a)]; k < p.off[static_cast<size_t>(l)][static_cast<size_t>(a) + 1]; ++k) {
          (*dw)[static_cast<size_t>(l)][static_cast<size_t>(o) * ni + k] = from_bits(got[i++]);
        }
      }
    }
  }
  const auto& root = m_got.back();
  size_t i = 0;
  *loss_sum = from_bits(root[i++]);
  for (int l = L - 1; l >= 0; --l) {
    auto& v = (*db)[static_cast<size_t>(l)];
    for (int o = 0; o < p.width[static_cast<size_t>(l) + 1]; ++o) v.push_back(from_bits(root[i++]));
  }
}

WsTrainer::WsTrainer(const HwConfig& hw, const compiler::KernelGraph& g, const compiler::WsCompiled& c,
                     const Dataset& data, const Normalize& norm, uint64_t seed, long long first_step, MemoryX& memx,
                     int swarmx_fanout, const WsHostLinks& links)
    : m_c(c), m_data(data), m_memx(memx), m_step(first_step), m_fanout(swarmx_fanout) {
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
    m_bid.push_back(memx.find_tensor(bn) >= 0 ? memx.find_tensor(bn) : memx.add_tensor(bn, d.b));
  }
  for (int i = 0; i < p.systems; ++i) m_sys.push_back(std::make_unique<WsSystem>(hw, c, i, links));
  m_limit = static_cast<uint64_t>(20 * p.cycles_per_batch()) + 1000000;
  settle();  // the cores' init tasks
}

// Runs every wafer until nothing is in flight and then kSettle cycles more (the cores' last
// bookkeeping: counters, the next minibatch's first reads), so that each minibatch starts from
// the same state and a resumed run repeats the uninterrupted one's cycle counts.
uint64_t WsTrainer::settle() {
  constexpr uint64_t kSettle = 256;
  uint64_t n = 0;
  for (auto& s : m_sys) {
    uint64_t k = 0;
    while (s->fabric().in_flight() != 0) {
      s->fabric().step();
      if (++k > 1000000) throw std::runtime_error("weight streaming: a wafer does not settle after a minibatch");
    }
    for (uint64_t i = 0; i < kSettle; ++i) s->fabric().step();
    n = std::max(n, k + kSettle);
  }
  return n;
}

std::vector<float> WsTrainer::read_tensor(int id) {
  std::vector<float> v(m_memx.size(id));
  ::tlm::tlm_generic_payload t;
  t.set_command(::tlm::TLM_READ_COMMAND);
  t.set_address(m_memx.base(id));
  t.set_data_ptr(reinterpret_cast<unsigned char*>(v.data()));
  t.set_data_length(static_cast<unsigned>(v.size() * 4));
  t.set_streaming_width(static_cast<unsigned>(v.size() * 4));
  t.set_byte_enable_ptr(nullptr);
  t.set_response_status(::tlm::TLM_INCOMPLETE_RESPONSE);
  sc_core::sc_time d = sc_core::SC_ZERO_TIME;
  m_memx.b_transport(t, d);
  if (t.is_response_error()) throw std::runtime_error("MemoryX READ failed: " + m_memx.last_error());
  return v;
}

void WsTrainer::write_grad(int id, const std::vector<float>& g) {
  std::vector<float> copy = g;
  ::tlm::tlm_generic_payload t;
  t.set_command(::tlm::TLM_WRITE_COMMAND);
  t.set_address(m_memx.base(id));
  t.set_data_ptr(reinterpret_cast<unsigned char*>(copy.data()));
  t.set_data_length(static_cast<unsigned>(copy.size() * 4));
  t.set_streaming_width(static_cast<unsigned>(copy.size() * 4));
  t.set_byte_enable_ptr(nullptr);
  t.set_response_status(::tlm::TLM_INCOMPLETE_RESPONSE);
  sc_core::sc_time d = sc_core::SC_ZERO_TIME;
  m_memx.b_transport(t, d);
  if (t.is_response_error()) throw std::runtime_error("MemoryX WRITE failed: " + m_memx.last_error());
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
  const WsPlan& p = m_c.plan;
  const int L = p.layers;
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  std::vector<std::vector<float>> w, b;
  for (int l = 0; l < L; ++l) {
    w.push_back(read_tensor(m_wid[static_cast<size_t>(l)]));
    b.push_back(read_tensor(m_bid[static_cast<size_t>(l)]));
  }
  m_model_secs += std::chrono::duration<double>(Clock::now() - t0).count();
  // Each system's shard of the minibatch, normalised.
  std::vector<std::vector<std::vector<float>>> xs(m_sys.size());
  for (size_t i = 0; i < m_sys.size(); ++i) {
    std::vector<const float*> ptrs;
    std::vector<int> labels;
    for (int s = 0; s < p.shard; ++s) {
      const size_t idx = m_order->sample_at(m_step * p.batch + static_cast<long long>(i) * p.shard + s);
      std::vector<float> x(m_data.sample(idx), m_data.sample(idx) + m_data.features);
      for (float& v : x) v = m_order->normalize().apply(v);
      xs[i].push_back(std::move(x));
      labels.push_back(m_data.labels[idx]);
    }
    for (const auto& x : xs[i]) ptrs.push_back(x.data());
    m_sys[i]->queue_step(ptrs, labels, w, b);
  }
  const uint64_t start = m_cycles;
  for (;;) {
    bool all = true;
    for (auto& s : m_sys) all = s->cycle() && all;
    ++m_cycles;
    if (all) break;
    if (m_cycles - start > m_limit) {
      throw std::runtime_error("weight-streaming minibatch " + std::to_string(m_step + 1) + " did not finish within " +
                               std::to_string(m_limit) + " cycles: the wafer is stuck");
    }
  }
  m_cycles += settle();  // the cores' last bookkeeping after the last output
  t0 = Clock::now();
  // Sum over systems in SwarmX's order, into MemoryX, then its optimizer step.
  const size_t N = m_sys.size();
  std::vector<std::vector<std::vector<float>>> dw(N), db(N);
  std::vector<float> loss(N);
  for (size_t i = 0; i < N; ++i) m_sys[i]->results(&dw[i], &db[i], &loss[i]);
  auto reduce = [&](auto get, size_t n) {
    std::vector<const float*> parts;
    for (size_t i = 0; i < N; ++i) parts.push_back(get(i));
    std::vector<float> out(n);
    SwarmX::tree_sum(parts, n, m_fanout, out.data());
    return out;
  };
  for (int l = 0; l < L; ++l) {
    const size_t ul = static_cast<size_t>(l);
    write_grad(m_wid[ul], reduce([&](size_t i) { return dw[i][ul].data(); }, dw[0][ul].size()));
    write_grad(m_bid[ul], reduce([&](size_t i) { return db[i][ul].data(); }, db[0][ul].size()));
  }
  const float total = reduce([&](size_t i) { return &loss[i]; }, 1)[0];
  m_memx.step();
  m_model_secs += std::chrono::duration<double>(Clock::now() - t0).count();
  WsStepResult r;
  r.step = ++m_step;
  r.mean_loss = static_cast<double>(total) / p.batch;
  r.cycles = m_cycles - start;
  r.time = m_sys[0]->step_time();
  r.pass_time = m_sys[0]->pass_time();
  return r;
}

}  // namespace wafersim::tlm
