// RegisteredPool on the soft provider's protection domain: alignment, growth up to the
// limit, oversized allocations, freeing and coalescing, frees from many threads, and
// close() while allocations live.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "protocol/registered_pool.h"
#include "soft_context.h"

namespace tensorverbs {
namespace {

constexpr std::size_t kBlock = 1 << 20;

std::shared_ptr<verbs::ProtectionDomain> soft_pd() { return open_soft_context().pd; }

std::shared_ptr<RegisteredPool> make_pool(std::size_t limit) {
  return std::make_shared<RegisteredPool>(soft_pd(), kBlock, limit);
}

PoolBuffer must(Result<PoolBuffer> buffer) {
  EXPECT_TRUE(buffer.ok()) << buffer.status().message();
  return buffer.ok() ? buffer.take() : nullptr;
}

TEST(RegisteredPool, AllocationsAreAlignedDisjointAndInsideTheirRegion) {
  auto pool = make_pool(4 * kBlock);
  std::vector<PoolBuffer> buffers;
  for (std::size_t n : {0u, 1u, 63u, 64u, 65u, 4096u, 100000u}) {
    PoolBuffer b = must(pool->allocate(n));
    ASSERT_TRUE(b);
    EXPECT_EQ(b->size(), n);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b->data()) % RegisteredPool::kAlign, 0u);
    EXPECT_TRUE(b->region().contains(b->data(), n));
    EXPECT_EQ(pool->region_of(b->data(), n), &b->region());
    std::memset(b->data(), static_cast<int>(buffers.size() + 1), n);
    buffers.push_back(std::move(b));
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) {  // nobody overwrote anybody
    for (std::size_t k = 0; k < buffers[i]->size(); ++k) {
      ASSERT_EQ(buffers[i]->data()[k], static_cast<std::uint8_t>(i + 1));
    }
  }
  EXPECT_EQ(pool->stats().registrations, 1u);  // all carved out of one block
  int outside = 0;
  EXPECT_EQ(pool->region_of(&outside, sizeof outside), nullptr);
}

TEST(RegisteredPool, GrowsBlockByBlockUpToItsLimitThenRefuses) {
  auto pool = make_pool(3 * kBlock);
  std::vector<PoolBuffer> held;
  for (int i = 0; i < 3; ++i) held.push_back(must(pool->allocate(kBlock)));
  EXPECT_EQ(pool->stats().registered_bytes, 3 * kBlock);
  EXPECT_EQ(pool->stats().registrations, 3u);
  Result<PoolBuffer> over = pool->allocate(1);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), Code::kResourceExhausted);
  EXPECT_NE(over.status().message().find("pool limit"), std::string::npos);
  held.pop_back();  // freed memory is reused without a new registration
  EXPECT_TRUE(must(pool->allocate(kBlock / 2)));
  EXPECT_EQ(pool->stats().registrations, 3u);
}

TEST(RegisteredPool, StartsWithASmallBlockAndDoublesUpToTheBlockSize) {
  auto pool = std::make_shared<RegisteredPool>(soft_pd(), 8 * kBlock, 64 * kBlock, kBlock);
  std::vector<PoolBuffer> held;
  held.push_back(must(pool->allocate(64 << 10)));  // a small tensor: a small block
  EXPECT_EQ(pool->stats().registered_bytes, kBlock);
  std::size_t registered = kBlock;
  for (std::size_t block : {2 * kBlock, 4 * kBlock, 8 * kBlock, 8 * kBlock}) {
    held.push_back(must(pool->allocate(kBlock)));  // fits no block so far: the next one
    registered += block;
    EXPECT_EQ(pool->stats().registered_bytes, registered);
    held.push_back(must(pool->allocate(block - kBlock)));  // fills it
    EXPECT_EQ(pool->stats().registered_bytes, registered);
  }
  held.push_back(must(pool->allocate(20 * kBlock)));  // larger than a block: its own size
  EXPECT_EQ(pool->stats().registered_bytes, registered + 20 * kBlock);
}

TEST(RegisteredPool, AnOversizedAllocationGetsABlockOfItsOwn) {
  auto pool = make_pool(8 * kBlock);
  PoolBuffer big = must(pool->allocate(3 * kBlock + 1));
  ASSERT_TRUE(big);
  EXPECT_TRUE(big->region().contains(big->data(), big->size()));
  EXPECT_GE(pool->stats().registered_bytes, 3 * kBlock + 1);
  Result<PoolBuffer> huge = pool->allocate(SIZE_MAX - 8);  // no wrap-around to a small size
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().code(), Code::kResourceExhausted);
}

TEST(RegisteredPool, FreedNeighboursCoalesceIntoOneRange) {
  auto pool = make_pool(kBlock);
  const std::size_t third = kBlock / 4;
  PoolBuffer a = must(pool->allocate(third)), b = must(pool->allocate(third)),
             c = must(pool->allocate(third));
  std::uint8_t* start = a->data();
  a.reset();
  c.reset();
  b.reset();  // merges with both neighbours
  EXPECT_EQ(pool->stats().in_use_bytes, 0u);
  PoolBuffer whole = must(pool->allocate(kBlock));  // only fits if all came back as one
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->data(), start);
}

TEST(RegisteredPool, AllocationsAndFreesFromManyThreadsBalance) {
  auto pool = make_pool(16 * kBlock);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::vector<PoolBuffer> mine;
      for (int i = 0; i < 500; ++i) {
        Result<PoolBuffer> b = pool->allocate(static_cast<std::size_t>(64 * (1 + (i + t) % 50)));
        if (!b.ok()) {
          ++failures;
          continue;
        }
        std::memset(b.value()->data(), t, b.value()->size());
        mine.push_back(b.take());
        if (mine.size() > 16) mine.erase(mine.begin());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(pool->stats().in_use_bytes, 0u);
}

TEST(RegisteredPool, CloseRefusesNewAllocationsAndKeepsLiveOnesRegistered) {
  auto pool = make_pool(4 * kBlock);
  PoolBuffer live = must(pool->allocate(kBlock));
  PoolBuffer idle = must(pool->allocate(kBlock));
  idle.reset();
  pool->close();
  Result<PoolBuffer> after = pool->allocate(64);
  ASSERT_FALSE(after.ok());
  EXPECT_EQ(after.status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(pool->stats().registered_bytes, kBlock);  // the idle block went at once
  EXPECT_EQ(pool->region_of(live->data(), live->size()), &live->region());
  std::memset(live->data(), 7, live->size());  // still mapped and registered
  live.reset();
  EXPECT_EQ(pool->stats().registered_bytes, 0u);
}

}  // namespace
}  // namespace tensorverbs
