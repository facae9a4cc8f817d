// Counts, for each of 32 bits, how often it was set in a stream of masks, at a few
// instructions per mask whatever its population (a vertical carry-save counter).
#pragma once

#include <cstdint>

namespace wafersim {

//   BitCounters32 c;
//   c.add(0b101);       // bits 0 and 2 counted once
//   c.total(2) == 1
class BitCounters32 {
 public:
  void add(uint32_t mask) {
    // The first planes without a test: a carry chain's length depends on the counts, and a loop
    // that stops where it ends is a mispredicted branch in about every other add.
    auto plane = [&](int k) {
      const uint32_t carry = m_plane[k] & mask;
      m_plane[k] ^= mask;
      mask = carry;
    };
    for (int k = 0; k < kEager; ++k) plane(k);
    int next = kEager;  // a while: clang's loop analysis would not see the lambda change mask
    while (mask) plane(next++);
    if (++m_adds == kFlushEvery) flush();
  }
  void add_n(uint32_t mask, uint64_t n) {  // add(mask), n times
    for (; mask; mask &= mask - 1) m_flushed[__builtin_ctz(mask)] += n;
  }
  uint64_t total(int bit) const {
    uint64_t v = m_flushed[bit];
    for (int k = 0; k < kPlanes; ++k) v += static_cast<uint64_t>((m_plane[k] >> bit) & 1u) << k;
    return v;
  }
  void clear() { *this = BitCounters32{}; }

 private:
  static constexpr int kPlanes = 16;  // holds counts below 2^16 until the next flush
  static constexpr int kEager = 4;    // planes add() always updates (a carry goes further 1 time in 16)
  static constexpr uint32_t kFlushEvery = (1u << kPlanes) - 1;
  void flush() {
    for (int b = 0; b < 32; ++b) m_flushed[b] = total(b);
    for (auto& p : m_plane) p = 0;
    m_adds = 0;
  }
  uint32_t m_plane[kPlanes] = {};
  uint32_t m_adds = 0;
  uint64_t m_flushed[32] = {};
};

}  // namespace wafersim
