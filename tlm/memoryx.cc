#include "tlm/memoryx.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "compiler/optim.h"
#include "hw/config.h"
#include "tlm/model_util.h"
#include "tlm/streamed.h"

namespace wafersim::tlm {

// An optimizer of the registry: how many fp32 state words it keeps per parameter, how to
// allocate them, and one step over one tensor.
struct MemoryXOptimizer {
  const char* name;
  int state_vectors;
  void (*init)(TensorState& s, size_t n);
  void (*update)(const MemoryXConfig& cfg, TensorState& s, const std::vector<float>& g);
};

namespace {

// x rounded to fp32 on its own. Needed only where a product feeds a plain add (SGD's momentum
// term): -ffp-contract=fast or GNU mode on an FMA machine would otherwise fuse the two across
// statements, and pragmas do not stop that (clang's "fast" ignores them). The project builds in
// ISO mode, where GCC does not fuse at all; this keeps the result the same under any flags.
float rounded(float x) {
  volatile float r = x;
  return r;
}

// torch.optim.SGD (dampening 0, no nesterov, no weight decay) as PyTorch 1.13's CPU kernels
// round it, fp32 throughout; lr and momentum are the fp32 config values (PyTorch, too, converts
// its Python scalars to fp32 before they meet a tensor):
//   first step (t = 0):  v = g                          buf = torch.clone(grad)
//   later steps:         v = fl(fl(momentum * v) + g)   buf.mul_(momentum).add_(grad)
//   every step:          w = fma(-lr, v, w)             param.add_(buf, alpha=-lr), one rounding
// (momentum 0 keeps v = g, as PyTorch keeps no buffer then.)
void sgd_init(TensorState& s, size_t n) { s.momentum_buffer.assign(n, 0.0f); }

void sgd_update(const MemoryXConfig& c, TensorState& s, const std::vector<float>& g) {
  const float momentum = c.momentum, neg_lr = -c.lr;
  const bool fresh = s.step == 0 || momentum == 0.0f;
  std::vector<float>& v = s.momentum_buffer;
  std::vector<float>& w = s.weights;
  for (size_t i = 0; i < w.size(); ++i) {
    if (fresh) {
      v[i] = g[i];
    } else {
      v[i] = rounded(momentum * v[i]) + g[i];
    }
    w[i] = std::fma(neg_lr, v[i], w[i]);
  }
  ++s.step;
}

// torch.optim.Adam (no weight decay, no amsgrad) as PyTorch 1.13 rounds it: compiler/optim.h
// (the graph compiler's host reference shares it).
void adam_init(TensorState& s, size_t n) {
  s.exp_avg.assign(n, 0.0f);
  s.exp_avg_sq.assign(n, 0.0f);
}

void adam_update(const MemoryXConfig& c, TensorState& s, const std::vector<float>& g) {
  const compiler::AdamScalars a = compiler::adam_scalars(c.lr, c.beta1, c.beta2, c.eps, s.step + 1);
  compiler::adam_step(a, s.weights.data(), s.exp_avg.data(), s.exp_avg_sq.data(), g.data(), s.weights.size());
  ++s.step;
}

const MemoryXOptimizer kOptimizers[] = {
    {"sgd", 1, sgd_init, sgd_update},
    {"adam", 2, adam_init, adam_update},
};

const MemoryXOptimizer* find_optimizer(const std::string& name) {
  for (const auto& o : kOptimizers) {
    if (name == o.name) return &o;
  }
  return nullptr;
}

template <typename T>
[[noreturn]] void bad(const char* key, const char* rule, T value) {
  std::ostringstream os;
  os << "memoryx." << key << " must be " << rule << ", got " << value;
  throw ConfigError(os.str());
}

using detail::hex;

}  // namespace

void MemoryXConfig::validate() const {
  if (!(capacity_gb > 0) || !std::isfinite(capacity_gb)) bad("capacity_gb", "a finite number > 0", capacity_gb);
  if (!(bandwidth_gbps > 0) || !std::isfinite(bandwidth_gbps)) {
    bad("bandwidth_gbps", "a finite number > 0", bandwidth_gbps);
  }
  if (!(latency_ns >= 0) || !std::isfinite(latency_ns)) bad("latency_ns", "a finite number >= 0", latency_ns);
  if (!find_optimizer(optimizer)) {
    std::string names;
    for (const auto& o : kOptimizers) names += std::string(names.empty() ? "" : " or ") + o.name;
    throw ConfigError("memoryx.optimizer: optimizer '" + optimizer + "' is unknown (" + names + ")");
  }
  if (!(lr > 0) || !std::isfinite(lr)) bad("lr", "a finite number > 0", lr);
  if (!(momentum >= 0 && momentum < 1)) bad("momentum", "in [0, 1)", momentum);
  if (!(beta1 >= 0 && beta1 < 1)) bad("beta1", "in [0, 1)", beta1);
  if (!(beta2 >= 0 && beta2 < 1)) bad("beta2", "in [0, 1)", beta2);
  if (!(eps > 0) || !std::isfinite(eps)) bad("eps", "a finite number > 0", eps);
}

MemoryX::MemoryX(sc_core::sc_module_name name, const MemoryXConfig& cfg)
    : sc_module(name), socket("socket"), m_cfg(cfg) {
  m_cfg.validate();
  m_opt = find_optimizer(m_cfg.optimizer);
  const double bytes = std::round(m_cfg.capacity_gb * 1e9);
  m_capacity = bytes >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(bytes);
  socket.register_b_transport(this, &MemoryX::b_transport);
}

int MemoryX::add_tensor(const std::string& name, std::vector<float> init) {
  if (init.empty()) throw ConfigError("MemoryX: tensor '" + name + "' is empty");
  if (find_tensor(name) >= 0) throw ConfigError("MemoryX: tensor '" + name + "' is already registered");
  const uint64_t n = init.size();
  const uint64_t need = n * 4 * (1 + static_cast<uint64_t>(m_opt->state_vectors));
  if (need > m_capacity - m_used) {
    std::ostringstream os;
    os << "model too large for MemoryX: tensor '" << name << "' (" << n << " parameters) needs " << need
       << " bytes (fp32 weights and " << m_opt->state_vectors << " " << m_opt->name
       << " state word(s) per parameter), " << m_capacity - m_used << " of " << m_capacity << " bytes left";
    throw ConfigError(os.str());
  }
  Tensor t;
  t.name = name;
  t.base = m_end;
  t.s.weights = std::move(init);
  m_opt->init(t.s, n);
  t.grad.assign(n, 0.0f);
  m_tensors.push_back(std::move(t));
  m_used += need;
  m_end += n * 4;
  return static_cast<int>(m_tensors.size()) - 1;
}

int MemoryX::find_tensor(const std::string& name) const {
  for (size_t i = 0; i < m_tensors.size(); ++i) {
    if (m_tensors[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const MemoryX::Tensor& MemoryX::tensor(int id) const {
  if (id < 0 || id >= tensor_count()) {
    throw std::out_of_range(std::string(name()) + ": no tensor with id " + std::to_string(id));
  }
  return m_tensors[static_cast<size_t>(id)];
}

uint64_t MemoryX::base(int id) const { return tensor(id).base; }
size_t MemoryX::size(int id) const { return tensor(id).s.weights.size(); }
const std::vector<float>& MemoryX::weights(int id) const { return tensor(id).s.weights; }
const std::vector<float>& MemoryX::gradient(int id) const { return tensor(id).grad; }
TensorState MemoryX::state(int id) const { return tensor(id).s; }

void MemoryX::set_state(int id, TensorState s) {
  const Tensor& cur = tensor(id);
  const size_t n = cur.s.weights.size();
  TensorState shape;
  m_opt->init(shape, n);
  auto check = [&](const char* what, size_t got, size_t want) {
    if (got == want) return;
    std::ostringstream os;
    os << name() << ": set_state of tensor '" << cur.name << "': " << what << " has " << got << " elements, "
       << m_opt->name << " needs " << want;
    throw ConfigError(os.str());
  };
  check("weights", s.weights.size(), n);
  check("momentum_buffer", s.momentum_buffer.size(), shape.momentum_buffer.size());
  check("exp_avg", s.exp_avg.size(), shape.exp_avg.size());
  check("exp_avg_sq", s.exp_avg_sq.size(), shape.exp_avg_sq.size());
  Tensor& t = m_tensors[static_cast<size_t>(id)];
  t.s = std::move(s);
  std::fill(t.grad.begin(), t.grad.end(), 0.0f);
}

void MemoryX::step() {
  for (Tensor& t : m_tensors) {
    m_opt->update(m_cfg, t.s, t.grad);
    std::fill(t.grad.begin(), t.grad.end(), 0.0f);
    m_stats.elements_updated += t.grad.size();
  }
  ++m_stats.optimizer_steps;
}

double MemoryX::transfer_ns(const MemoryXConfig& cfg, uint64_t bytes) {
  return cfg.latency_ns + static_cast<double>(bytes) * 8.0 / cfg.bandwidth_gbps;
}

sc_core::sc_time MemoryX::transfer_delay(uint64_t bytes) const {
  return sc_core::sc_time(transfer_ns(m_cfg, bytes), sc_core::SC_NS);
}

// The response a transaction gets; on success *id is its tensor. Checks in the order of the
// header's table: command, byte enables, length, address, data pointer.
::tlm::tlm_response_status MemoryX::check(const ::tlm::tlm_generic_payload& trans, int* id) {
  auto fail = [&](::tlm::tlm_response_status st, const std::string& why) {
    m_last_error = std::string(name()) + ": " + why;
    return st;
  };
  const auto cmd = trans.get_command();
  if (cmd != ::tlm::TLM_READ_COMMAND && cmd != ::tlm::TLM_WRITE_COMMAND) {
    return fail(::tlm::TLM_COMMAND_ERROR_RESPONSE, "only READ and WRITE are supported");
  }
  if (trans.get_byte_enable_ptr()) return fail(::tlm::TLM_BYTE_ENABLE_ERROR_RESPONSE, "byte enables are not supported");
  const uint64_t addr = trans.get_address(), len = trans.get_data_length();
  if (len == 0 || len % 4 != 0) {
    return fail(::tlm::TLM_BURST_ERROR_RESPONSE,
                "length " + std::to_string(len) + " is not a whole number of fp32 words (a positive multiple of 4)");
  }
  if (trans.get_streaming_width() < len) {
    return fail(::tlm::TLM_BURST_ERROR_RESPONSE, "streaming width " + std::to_string(trans.get_streaming_width()) +
                                                     " < length " + std::to_string(len) + ": no streaming");
  }
  if (addr % 4 != 0) return fail(::tlm::TLM_ADDRESS_ERROR_RESPONSE, "address " + hex(addr) + " is not word aligned");
  if (addr >= m_end || len > m_end - addr) {
    return fail(::tlm::TLM_ADDRESS_ERROR_RESPONSE, "range [" + hex(addr) + ", +" + std::to_string(len) +
                                                       ") is beyond the last tensor (end " + hex(m_end) + ")");
  }
  const auto it = std::upper_bound(m_tensors.begin(), m_tensors.end(), addr,
                                   [](uint64_t a, const Tensor& t) { return a < t.base; });
  const Tensor& t = *(it - 1);
  if (addr + len > t.base + 4 * t.s.weights.size()) {
    return fail(::tlm::TLM_ADDRESS_ERROR_RESPONSE, "range [" + hex(addr) + ", +" + std::to_string(len) +
                                                       ") runs from tensor '" + t.name + "' into '" + it->name + "'");
  }
  if (!trans.get_data_ptr()) return fail(::tlm::TLM_GENERIC_ERROR_RESPONSE, "no data pointer");
  *id = static_cast<int>(it - 1 - m_tensors.begin());
  return ::tlm::TLM_OK_RESPONSE;
}

void MemoryX::b_transport(::tlm::tlm_generic_payload& trans, sc_core::sc_time& delay) {
  int id = -1;
  const ::tlm::tlm_response_status st = check(trans, &id);
  if (st != ::tlm::TLM_OK_RESPONSE) {
    trans.set_response_status(st);
    delay += transfer_delay(0);
    ++m_stats.errors;
    return;
  }
  Tensor& t = m_tensors[static_cast<size_t>(id)];
  const uint64_t len = trans.get_data_length();
  const size_t first = static_cast<size_t>((trans.get_address() - t.base) / 4), n = static_cast<size_t>(len / 4);
  unsigned char* p = trans.get_data_ptr();
  if (trans.is_read()) {
    std::memcpy(p, t.s.weights.data() + first, n * 4);
    m_stats.bytes_read += len;
  } else {
    for (size_t i = 0; i < n; ++i) {
      float g;
      std::memcpy(&g, p + 4 * i, 4);
      t.grad[first + i] += g;
    }
    m_stats.bytes_written += len;
  }
  ++m_stats.transactions;
  trans.set_response_status(::tlm::TLM_OK_RESPONSE);
  delay += transfer_delay(streamed(trans) ? 0 : len);  // a streamed WRITE's bytes came in at line rate
}

nlohmann::json MemoryX::stats_json() const {
  return nlohmann::json{{"bytes_read", m_stats.bytes_read},
                        {"bytes_written", m_stats.bytes_written},
                        {"transactions", m_stats.transactions},
                        {"errors", m_stats.errors},
                        {"optimizer_steps", m_stats.optimizer_steps},
                        {"elements_updated", m_stats.elements_updated},
                        {"tensors", m_tensors.size()},
                        {"bytes_used", m_used},
                        {"capacity_bytes", m_capacity}};
}

}  // namespace wafersim::tlm
