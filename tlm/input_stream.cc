#include "tlm/input_stream.h"

#include <cstring>
#include <vector>

#include "hw/config.h"
#include "tlm/model_util.h"

namespace wafersim::tlm {

void InputStreamConfig::validate() const {
  auto bad = [](const std::string& why) { throw ConfigError("input stream: " + why); };
  if (workers < 1) bad("workers must be >= 1 (got " + std::to_string(workers) + ")");
  if (index < 0 || index >= workers) bad("index must be in 0.." + std::to_string(workers - 1) + " (got " + std::to_string(index) + ")");
  if (shard < 1 || batch < shard) bad("need 1 <= shard <= batch (got shard " + std::to_string(shard) + ", batch " + std::to_string(batch) + ")");
  if (system < 0 || static_cast<long long>(system + 1) * shard > batch) bad("system " + std::to_string(system) + " has no shard in the batch");
  if (!(gbps > 0)) bad("gbps must be > 0");
}

InputStream::InputStream(sc_core::sc_module_name name, const Dataset& data, InputWorker& order, const InputStreamConfig& cfg,
                         const sc_core::sc_event& start, const long long& step)
    : sc_module(name), socket("socket"), m_data(data), m_order(order), m_cfg(cfg), m_start(start), m_step(step) {
  m_cfg.validate();
  SC_HAS_PROCESS(InputStream);
  SC_THREAD(run);
}

void InputStream::run() {
  const size_t n = m_data.features;
  m_buf.assign(n + 1, 0.0f);
  const sc_core::sc_time per_sample(static_cast<double>(m_buf.size()) * 32.0 / m_cfg.gbps, sc_core::SC_NS);
  for (;;) {
    sc_core::wait(m_start);
    sc_core::sc_time d = sc_core::SC_ZERO_TIME;
    const long long first = m_step * m_cfg.batch + static_cast<long long>(m_cfg.system) * m_cfg.shard;
    for (int s = m_cfg.index; s < m_cfg.shard; s += m_cfg.workers) {
      const size_t idx = m_order.sample_at(first + s);
      const float* x = m_data.sample(idx);
      for (size_t k = 0; k < n; ++k) m_buf[k] = m_order.normalize().apply(x[k], k);
      const int32_t label = m_data.labels[idx];
      std::memcpy(&m_buf.back(), &label, 4);
      d += per_sample;
      ::tlm::tlm_generic_payload t;
      detail::set_plain(t, ::tlm::TLM_WRITE_COMMAND, static_cast<uint64_t>(s), m_buf.data(), m_buf.size() * 4);
      socket->b_transport(t, d);
      if (t.is_response_error() && m_error.empty()) {
        m_error = std::string(name()) + ": the port refused sample " + std::to_string(s) + " (" + t.get_response_string() + ")";
      }
      ++m_sent;
    }
  }
}

}  // namespace wafersim::tlm
