#include <gtest/gtest.h>

#include <cstdint>
#include <deque>
#include <set>
#include <vector>

#include "core/block_cache.h"

namespace tensorverbs {
namespace {

TEST(BlockCache, AFreedBlockServesTheNextAllocationOfItsSize) {
  BlockCacheAllocator<std::uint64_t> allocator;
  std::uint64_t* first = allocator.allocate(64);
  allocator.deallocate(first, 64);
  std::uint64_t* other_size = allocator.allocate(32);
  EXPECT_NE(other_size, first);
  std::uint64_t* again = allocator.allocate(64);
  EXPECT_EQ(again, first);
  allocator.deallocate(again, 64);
  allocator.deallocate(other_size, 32);
}

TEST(BlockCache, KeepsAtMostSoManyBlocksOfASize) {
  BlockCacheAllocator<std::uint64_t> allocator;
  std::vector<std::uint64_t*> blocks;
  for (std::size_t i = 0; i < BlockCache::kKept + 4; ++i) blocks.push_back(allocator.allocate(16));
  const std::set<std::uint64_t*> freed(blocks.begin(), blocks.end());
  for (std::uint64_t* block : blocks) allocator.deallocate(block, 16);
  std::vector<std::uint64_t*> again;
  for (std::size_t i = 0; i < BlockCache::kKept; ++i) {
    again.push_back(allocator.allocate(16));
    EXPECT_EQ(freed.count(again.back()), 1u) << i;  // each of these a kept one
  }
  for (std::uint64_t* block : again) allocator.deallocate(block, 16);
}

TEST(BlockCache, KeepsAsManyBlocksOfASizeAsItWasMadeFor) {
  constexpr std::size_t kMost = 3 * BlockCache::kKept;
  BlockCacheAllocator<std::uint64_t> allocator(kMost);
  std::vector<std::uint64_t*> blocks;
  for (std::size_t i = 0; i < kMost + 4; ++i) blocks.push_back(allocator.allocate(16));
  for (std::uint64_t* block : blocks) allocator.deallocate(block, 16);
  EXPECT_EQ(allocator.cache()->kept(16 * sizeof(std::uint64_t)), kMost);  // (the 4 beyond freed)
  for (std::size_t i = 0; i < kMost; ++i) blocks[i] = allocator.allocate(16);
  EXPECT_EQ(allocator.cache()->kept(16 * sizeof(std::uint64_t)), 0u);  // every one served again
  for (std::size_t i = 0; i < kMost; ++i) allocator.deallocate(blocks[i], 16);
}

TEST(BlockCache, CopiesAndRebindsShareTheCache) {
  BlockCacheAllocator<std::uint64_t> allocator;
  BlockCacheAllocator<std::uint32_t> rebound(allocator);
  BlockCacheAllocator<std::uint64_t> copy(allocator);
  EXPECT_TRUE(rebound == allocator);
  EXPECT_TRUE(copy == allocator);
  EXPECT_TRUE(BlockCacheAllocator<std::uint64_t>() != allocator);
  std::uint64_t* block = allocator.allocate(4);
  copy.deallocate(block, 4);
  EXPECT_EQ(static_cast<void*>(rebound.allocate(8)), static_cast<void*>(block));  // 32 bytes either way
  rebound.deallocate(reinterpret_cast<std::uint32_t*>(block), 8);
}

// (that it allocates nothing in steady state is measured by tools/hot_path_counts.py)
TEST(BlockCache, ADequeUsedAsAQueueKeepsItsOrder) {
  std::deque<std::uint64_t, BlockCacheAllocator<std::uint64_t>> queue;
  std::uint64_t next = 0, expected = 0;
  for (int round = 0; round < 2000; ++round) {  // a window of 300 elements sliding by 150
    while (queue.size() < 300) queue.push_back(next++);
    for (int i = 0; i < 150; ++i) {
      ASSERT_EQ(queue.front(), expected++);
      queue.pop_front();
    }
  }
  EXPECT_EQ(queue.size(), 150u);
  EXPECT_EQ(queue.back(), next - 1);
}

}  // namespace
}  // namespace tensorverbs
