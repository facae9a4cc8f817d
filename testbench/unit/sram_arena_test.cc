// The SRAM arena (hw/sram_arena.h): blocks read as zeros when handed out, also when a freed
// block is handed out again, and blocks never overlap.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "hw/sram_arena.h"

namespace wafersim::test {
namespace {

TEST(SramArena, BlocksAreZeroedAlsoWhenReusedAndNeverOverlap) {
  const size_t n = 48 * 1024;
  std::vector<uint8_t*> blocks;
  for (int i = 0; i < 8; ++i) {
    uint8_t* p = sram_alloc(n);
    ASSERT_NE(p, nullptr);
    for (size_t k = 0; k < n; k += 997) ASSERT_EQ(p[k], 0) << "block " << i << " byte " << k;
    std::memset(p, 0xa5, n);
    blocks.push_back(p);
  }
  for (size_t i = 0; i < blocks.size(); ++i) {
    for (size_t j = i + 1; j < blocks.size(); ++j) {
      EXPECT_TRUE(blocks[i] + n <= blocks[j] || blocks[j] + n <= blocks[i]) << i << " and " << j;
    }
    EXPECT_EQ(blocks[i][n - 1], 0xa5);  // nobody else wrote into it
  }
  uint8_t* freed = blocks.back();
  blocks.pop_back();
  sram_free(freed, n);
  uint8_t* again = sram_alloc(n);
  EXPECT_EQ(again, freed);  // the freed block comes back first
  for (size_t k = 0; k < n; ++k) ASSERT_EQ(again[k], 0) << k;
  blocks.push_back(again);
  for (uint8_t* p : blocks) sram_free(p, n);
}

}  // namespace
}  // namespace wafersim::test
