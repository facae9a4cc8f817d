// The vertical per-bit counter behind the per-color stall statistics: the same counts as one
// plain counter per bit, through carries past the planes add() always updates and through flushes.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <random>

#include "hw/bit_counters.h"

namespace wafersim {
namespace {

TEST(BitCounters32, CountsEachBitLikeAPlainCounter) {
  BitCounters32 c;
  std::array<uint64_t, 32> plain{};
  std::mt19937 rng(11);
  // More adds than the planes hold between flushes (2^16 - 1), with sparse masks (long runs of
  // one bit: carries deep into the planes) and dense ones, and some add_n in between.
  for (int i = 0; i < 200000; ++i) {
    uint32_t mask;
    switch (rng() % 4) {
      case 0: mask = 1u << (rng() % 3); break;  // a few bits, each counted very often
      case 1: mask = static_cast<uint32_t>(rng()); break;
      case 2: mask = 0; break;
      default: mask = static_cast<uint32_t>(rng()) & static_cast<uint32_t>(rng()); break;
    }
    if (i % 1000 == 999) {
      const uint64_t n = rng() % 5000;
      c.add_n(mask, n);
      for (int b = 0; b < 32; ++b) plain[static_cast<size_t>(b)] += ((mask >> b) & 1u) * n;
    } else {
      c.add(mask);
      for (int b = 0; b < 32; ++b) plain[static_cast<size_t>(b)] += (mask >> b) & 1u;
    }
    if (i % 20011 == 0) {
      for (int b = 0; b < 32; ++b) ASSERT_EQ(c.total(b), plain[static_cast<size_t>(b)]) << "bit " << b << " after " << i;
    }
  }
  for (int b = 0; b < 32; ++b) EXPECT_EQ(c.total(b), plain[static_cast<size_t>(b)]) << "bit " << b;
  c.clear();
  for (int b = 0; b < 32; ++b) EXPECT_EQ(c.total(b), 0u);
}

}  // namespace
}  // namespace wafersim
