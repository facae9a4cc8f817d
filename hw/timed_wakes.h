// Routers asleep until a given cycle (ThreadCtx::timed), by their place in the wake sets
// (Router::wake_index): one bucket per cycle for the next kSlots cycles, and a heap for wake-ups
// further out. Each entry comes out in the cycle it names, once; the order within a cycle does
// not matter (they set wake bits).
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

namespace wafersim {

//   TimedWakes w;
//   w.push(now, now + 40, k);                  // during cycle `now`
//   w.take(now, [](uint32_t k, uint64_t c) {});  // after cycle `now`: the entries of now + 1
class TimedWakes {
 public:
  // During cycle `now`: router `id` (its wake index) wakes at cycle `at` (> now + 1).
  void push(uint64_t now, uint64_t at, uint32_t id) {
    ++m_count;
    if (at - now <= kSlots) {
      m_slot[at % kSlots].push_back(id);  // the buckets hold cycles now + 1 .. now + kSlots
    } else {
      m_far.push({at, id});
    }
  }
  // After cycle `now`: f(id, now + 1) for every entry of cycle now + 1. Then the wake-ups that
  // came within reach move from the heap to the bucket just emptied.
  template <typename F>
  void take(uint64_t now, F&& f) {
    const uint64_t c = now + 1;
    std::vector<uint32_t>& b = m_slot[c % kSlots];
    if (!b.empty()) {
      for (const uint32_t id : b) f(id, c);
      m_count -= b.size();
      b.clear();
    }
    while (!m_far.empty() && m_far.top().first <= c + kSlots) {
      m_slot[m_far.top().first % kSlots].push_back(m_far.top().second);
      m_far.pop();
    }
  }
  bool empty() const { return m_count == 0; }

 private:
  static constexpr uint64_t kSlots = 1024;
  std::array<std::vector<uint32_t>, kSlots> m_slot;
  std::priority_queue<std::pair<uint64_t, uint32_t>, std::vector<std::pair<uint64_t, uint32_t>>,
                      std::greater<std::pair<uint64_t, uint32_t>>> m_far;
  size_t m_count = 0;
};

}  // namespace wafersim
