// The timed wake list: every entry comes out after the cycle before the one it names, once,
// whether it sits in the calendar or beyond it in the heap.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

#include "hw/timed_wakes.h"

namespace wafersim {
namespace {

TEST(TimedWakes, EveryEntryComesOutInItsCycleOnce) {
  TimedWakes w;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> delay(2, 3000);  // near and far beyond the calendar
  std::map<uint32_t, uint64_t> due;                         // id -> cycle it names
  uint32_t next_id = 0;
  size_t out = 0;
  const uint64_t cycles = 20000;
  for (uint64_t now = 0; now < cycles; ++now) {
    // During cycle `now`: a few routers go to sleep (several may name the same cycle).
    const int n = static_cast<int>(rng() % 4);
    for (int i = 0; i < n && now + 3000 < cycles; ++i) {
      const uint64_t at = i == 3 ? now + 2 : now + delay(rng);
      due[next_id] = at;
      w.push(now, at, next_id++);
    }
    if (now % 97 == 0 && now + 1024 < cycles) {  // the calendar's edges: exactly at and past reach
      due[next_id] = now + 1024;
      w.push(now, now + 1024, next_id++);
      due[next_id] = now + 1025;
      w.push(now, now + 1025, next_id++);
    }
    w.take(now, [&](uint32_t id, uint64_t c) {
      ASSERT_EQ(c, now + 1);
      auto it = due.find(id);
      ASSERT_NE(it, due.end()) << "router " << id << " came out twice or was never put in";
      EXPECT_EQ(it->second, c) << "router " << id;
      due.erase(it);
      ++out;
    });
    EXPECT_EQ(w.empty(), due.empty()) << "after cycle " << now;
  }
  EXPECT_TRUE(due.empty()) << due.size() << " entries never came out";
  EXPECT_GT(out, 10000u);
}

}  // namespace
}  // namespace wafersim
