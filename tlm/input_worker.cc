#include "tlm/input_worker.h"

#include <algorithm>
#include <cstring>

#include "hw/fabric.h"

namespace wafersim::tlm {

InputWorker::InputWorker(const Dataset& data, const InputRoute& route, const Normalize& norm, uint64_t seed)
    : m_data(data), m_route(route), m_norm(norm), m_seed(seed) {
  std::vector<const InputRoute*> all{&route};
  for (const InputRoute& c : route.copies) all.push_back(&c);
  int channels = 0;
  for (const InputRoute* r : all) {
    channels = std::max(channels, r->label_channel + 1);
    for (const auto& s : r->slices) channels = std::max(channels, s.channel + 1);
    m_used.push_back(static_cast<size_t>(r->label_channel));
    for (const auto& s : r->slices) m_used.push_back(static_cast<size_t>(s.channel));
  }
  m_pending.resize(static_cast<size_t>(channels));
  std::sort(m_used.begin(), m_used.end());
  m_used.erase(std::unique(m_used.begin(), m_used.end()), m_used.end());
}

size_t InputWorker::sample_at(long long pos) {
  const long long n = static_cast<long long>(m_data.count);
  const long long epoch = pos / n;
  if (epoch != m_epoch) {
    m_order = shuffled_order(m_data.count, m_seed, static_cast<uint64_t>(epoch));
    m_epoch = epoch;
  }
  return m_order[static_cast<size_t>(pos % n)];
}

void InputWorker::enqueue(long long first, long long count) {
  for (long long p = first; p < first + count; ++p) {
    const size_t i = sample_at(p);
    const float* x = m_data.sample(i);
    const long long copy = p % std::max(1, m_route.batch) % static_cast<long long>(m_route.copies.size() + 1);
    const InputRoute& route = copy == 0 ? m_route : m_route.copies[static_cast<size_t>(copy) - 1];
    // The label first: it then never waits behind this sample's own features.
    m_pending[static_cast<size_t>(route.label_channel)].push_back(
        Wavelet{static_cast<uint32_t>(m_data.labels[i]), static_cast<uint8_t>(route.label_color), false});
    // Slices sharing a channel are interleaved element by element, so that every input row
    // progresses at once instead of one row's slow consumer holding up the channel.
    int longest = 0;
    for (const auto& s : route.slices) longest = std::max(longest, s.len);
    for (int k = 0; k < longest; ++k) {
      for (const auto& s : route.slices) {
        if (k >= s.len) continue;
        const float v = m_norm.apply(x[s.off + k], static_cast<size_t>(s.off + k));
        uint32_t bits;
        std::memcpy(&bits, &v, 4);
        m_pending[static_cast<size_t>(s.channel)].push_back(Wavelet{bits, static_cast<uint8_t>(s.color), false});
      }
    }
  }
}

uint64_t InputWorker::pump(Fabric& fabric) {
  uint64_t n = 0;
  for (const size_t c : m_used) {  // the others never hold anything
    auto& q = m_pending[c];
    if (q.empty()) continue;
    EdgeChannel* ch = fabric.channel(kWest, static_cast<int>(c));
    while (!q.empty() && ch->try_inject(q.front())) {
      q.pop_front();
      ++n;
    }
    if (!q.empty()) ++m_refused;
  }
  return n;
}

bool InputWorker::idle() const {
  for (const size_t c : m_used) {
    if (!m_pending[c].empty()) return false;
  }
  return true;
}

}  // namespace wafersim::tlm
