#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>

#include "core/recycling_map.h"

namespace tensorverbs {
namespace {

// The value of `key` in `map`, or `missing` if it has none.
template <class Map, class Value>
Value value_or(Map& map, std::uint32_t key, Value missing) {
  auto* value = map.find(key);
  return value == nullptr ? missing : *value;
}

TEST(RecyclingMap, InsertsFindsAndErasesLikeAMap) {
  RecyclingMap<std::uint32_t, std::string> map(2);
  EXPECT_TRUE(map.empty());
  EXPECT_TRUE(map.insert(1, "one"));
  EXPECT_FALSE(map.insert(1, "uno"));  // (a key is added once)
  EXPECT_TRUE(map.insert(2, "two"));
  EXPECT_EQ(value_or(map, 1, std::string("none")), "one");
  EXPECT_EQ(map.find(3), nullptr);
  EXPECT_TRUE(map.contains(2));
  EXPECT_EQ(map.size(), 2u);
  EXPECT_TRUE(map.erase(1));
  EXPECT_FALSE(map.erase(1));
  EXPECT_EQ(map.find(1), nullptr);
  EXPECT_EQ(map.size(), 1u);
}

TEST(RecyclingMap, AnErasedValueIsDestroyedAtOnceAndItsNodeServesTheNextKey) {
  RecyclingMap<std::uint32_t, std::shared_ptr<int>> map;
  auto value = std::make_shared<int>(7);
  std::weak_ptr<int> watched = value;
  map.insert(10, std::move(value));
  map.erase(10);
  EXPECT_TRUE(watched.expired()) << "a kept node still held its value";
  for (std::uint32_t key = 0; key < 1000; ++key) {  // one node, recycled
    ASSERT_TRUE(map.insert(key, std::make_shared<int>(static_cast<int>(key))));
    const std::shared_ptr<int> got = value_or(map, key, std::make_shared<int>(-1));
    ASSERT_EQ(*got, static_cast<int>(key));
    ASSERT_TRUE(map.erase(key));
  }
  EXPECT_TRUE(map.empty());
}

TEST(RecyclingMap, MapsSharingSparesServeEachOthersNextKeysUpToTheLimit) {
  using Map = RecyclingMap<std::uint32_t, std::string>;
  Map::Spares shared{{}, 2};
  Map first(8), second(8);
  for (std::uint32_t key = 0; key < 3; ++key) first.insert(key, "a long value, on the heap " + std::to_string(key));
  first.erase(0);
  EXPECT_TRUE(shared.nodes.empty());  // (not shared yet: its own)
  first.share(&shared);               // its own spare goes to the shared ones
  EXPECT_EQ(shared.nodes.size(), 1u);
  first.erase(1);
  first.erase(2);
  EXPECT_EQ(shared.nodes.size(), 2u);  // at most two: the third node was freed
  second.share(&shared);
  ASSERT_TRUE(second.insert(7, "seven"));  // on a node the first map left
  EXPECT_EQ(shared.nodes.size(), 1u);
  EXPECT_EQ(*second.find(7), "seven");
  EXPECT_EQ(first.find(1), nullptr);
}

// A batch in flight larger than the spares it was made with: the nodes of its entries all
// serve the next batch (they were freed, and allocated again, beyond the first 256).
TEST(RecyclingMap, AMapKeepsTheNodesOfAsManyEntriesAsItHeldAtOnceUpToItsBound) {
  RecyclingMap<std::uint32_t, std::string> map(4, 1000);
  for (int batch = 0; batch < 2; ++batch) {
    for (std::uint32_t key = 0; key < 600; ++key) ASSERT_TRUE(map.insert(key, "v"));
    map.clear();
    EXPECT_EQ(map.spare(), 600u) << "batch " << batch;
  }
  for (std::uint32_t key = 0; key < 1500; ++key) ASSERT_TRUE(map.insert(key, "v"));
  map.clear();
  EXPECT_EQ(map.spare(), 1000u);  // no more than its bound
}

TEST(RecyclingMap, TakeAllMovesEveryEntryOut) {
  RecyclingMap<std::uint32_t, int> map;
  for (std::uint32_t key = 0; key < 5; ++key) map.insert(key, static_cast<int>(key) * 2);
  map.erase(4);
  const auto all = map.take_all();
  EXPECT_EQ(all.size(), 4u);
  EXPECT_EQ(all.at(3), 6);
  EXPECT_TRUE(map.empty());
  EXPECT_TRUE(map.insert(3, 1));  // (usable after)
  EXPECT_EQ(value_or(map, 3, -1), 1);
}

TEST(RecyclingMap, IndexingSetsOrAddsAndIterationSeesEveryEntry) {
  RecyclingMap<std::uint32_t, int> map;
  map[1] = 10;
  map[1] = 11;
  map[2] = 20;
  map.erase(2);
  map[3] = 30;  // (on the node that 2 had)
  int sum = 0;
  for (const auto& [key, value] : map) sum += static_cast<int>(key) * value;
  EXPECT_EQ(sum, 1 * 11 + 3 * 30);
  map.clear();
  EXPECT_TRUE(map.empty());
}

}  // namespace
}  // namespace tensorverbs
