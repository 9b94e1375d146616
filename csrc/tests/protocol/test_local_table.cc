#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "protocol/local_table.h"

namespace tensorverbs {
namespace {

TensorValue value_of(std::uint64_t tag) {
  auto bytes = std::make_shared<std::uint64_t>(tag);
  return TensorValue{TensorMeta{9, {}, false, 8}, reinterpret_cast<const std::uint8_t*>(bytes.get()), bytes};
}

std::uint64_t tag_of(const TensorValue& value) {
  return *reinterpret_cast<const std::uint64_t*>(value.data);
}

struct Got {
  std::optional<Status> status;
  std::optional<std::uint64_t> tag;
  LocalTable::Callback callback() {
    return [this](Status s, TensorValue v) {
      status = s;
      if (s.ok()) tag = tag_of(v);
    };
  }
};

const RendezvousKey kKey{0, 1, "w"};

TEST(LocalTable, MatchesSendsAndRecvsInEitherOrderFirstInFirstOut) {
  LocalTable table;
  ASSERT_TRUE(table.send(1, kKey, value_of(10)).ok());
  ASSERT_TRUE(table.send(1, kKey, value_of(11)).ok());
  Got a, b, c;
  EXPECT_EQ(table.recv(1, kKey, a.callback()).id, 0u);
  EXPECT_EQ(table.recv(1, kKey, b.callback()).id, 0u);
  EXPECT_EQ(*a.tag, 10u);
  EXPECT_EQ(*b.tag, 11u);
  const LocalTable::Waiter waiting = table.recv(1, kKey, c.callback());
  EXPECT_NE(waiting.id, 0u);
  EXPECT_FALSE(c.status);
  EXPECT_EQ(table.pending(), std::make_pair(std::size_t{0}, std::size_t{1}));
  ASSERT_TRUE(table.send(1, kKey, value_of(12)).ok());
  EXPECT_EQ(*c.tag, 12u);
  EXPECT_EQ(table.steps(), 0u);  // nothing left: no state kept
}

TEST(LocalTable, KeepsStepsAndKeysApart) {
  LocalTable table;
  ASSERT_TRUE(table.send(1, kKey, value_of(1)).ok());
  ASSERT_TRUE(table.send(2, kKey, value_of(2)).ok());
  ASSERT_TRUE(table.send(1, RendezvousKey{0, 2, "w"}, value_of(3)).ok());
  Got step2, other;
  table.recv(2, kKey, step2.callback());
  table.recv(1, RendezvousKey{0, 2, "w"}, other.callback());
  EXPECT_EQ(*step2.tag, 2u);
  EXPECT_EQ(*other.tag, 3u);
  EXPECT_EQ(table.steps(), 1u);
}

TEST(LocalTable, RequeuedValuesComeFirst) {
  LocalTable table;
  ASSERT_TRUE(table.send(1, kKey, value_of(2)).ok());
  table.requeue(1, kKey, value_of(1));
  Got first;
  table.recv(1, kKey, first.callback());
  EXPECT_EQ(*first.tag, 1u);
}

TEST(LocalTable, WithdrawnRecvsGetNothing) {
  LocalTable table;
  Got got;
  const LocalTable::Waiter waiter = table.recv(1, kKey, got.callback());
  EXPECT_TRUE(table.withdraw(waiter));
  EXPECT_FALSE(table.withdraw(waiter));
  ASSERT_TRUE(table.send(1, kKey, value_of(5)).ok());
  EXPECT_FALSE(got.status);
  EXPECT_EQ(table.pending(), std::make_pair(std::size_t{1}, std::size_t{0}));
}

TEST(LocalTable, AbortFailsWaitersAndRefusesLaterTraffic) {
  LocalTable table;
  Got waiting, later;
  table.recv(3, kKey, waiting.callback());
  ASSERT_TRUE(table.send(3, RendezvousKey{0, 1, "other"}, value_of(1)).ok());
  table.abort_step(3, Status(Code::kAborted, "step 3 was aborted"));
  EXPECT_EQ(waiting.status->code(), Code::kAborted);
  EXPECT_EQ(table.send(3, kKey, value_of(2)).code(), Code::kAborted);
  table.recv(3, kKey, later.callback());
  EXPECT_EQ(later.status->message(), "step 3 was aborted");
  EXPECT_EQ(table.pending(), std::make_pair(std::size_t{0}, std::size_t{0}));
  EXPECT_EQ(table.steps(), 1u);  // the abort is remembered until cleanup
  table.cleanup_step(3);
  EXPECT_EQ(table.steps(), 0u);
  EXPECT_TRUE(table.send(3, kKey, value_of(4)).ok());
}

TEST(LocalTable, CleanupFailsWaiters) {
  LocalTable table;
  Got waiting;
  table.recv(4, kKey, waiting.callback());
  table.cleanup_step(4);
  EXPECT_EQ(waiting.status->code(), Code::kAborted);
  EXPECT_EQ(waiting.status->message(), "step 4 was cleaned up");
}

TEST(LocalTable, ManyThreadsLoseNothing) {
  LocalTable table;
  constexpr int kThreads = 4, kEach = 2000;
  std::vector<std::thread> threads;
  std::atomic<std::uint64_t> sum{0}, count{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::int64_t step = i % 7;
        if (t % 2) {
          ASSERT_TRUE(table.send(step, kKey, value_of(static_cast<std::uint64_t>(i))).ok());
        } else {
          table.recv(step, kKey, [&](Status s, TensorValue v) {
            ASSERT_TRUE(s.ok());
            sum += tag_of(v);
            ++count;
          });
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(count.load(), std::uint64_t{kThreads / 2 * kEach});
  EXPECT_EQ(sum.load(), std::uint64_t{kThreads / 2} * (kEach - 1) * kEach / 2);
  EXPECT_EQ(table.steps(), 0u);
}

TEST(LocalTable, NotesTheRecvsOfAWatchedNameThatWaitWhetherTheyCameBeforeOrAfter) {
  LocalTable table;
  Got before, after, other_name, other_step, matched;
  table.recv(3, RendezvousKey{0, 4, "w"}, before.callback());  // waits before the watch
  table.watch(3, "w");
  table.recv(3, RendezvousKey{0, 5, "w"}, after.callback());
  table.recv(3, RendezvousKey{0, 5, "v"}, other_name.callback());
  table.recv(4, RendezvousKey{0, 5, "w"}, other_step.callback());
  ASSERT_TRUE(table.send(3, RendezvousKey{0, 6, "w"}, value_of(1)).ok());
  table.recv(3, RendezvousKey{0, 6, "w"}, matched.callback());  // a send waited: not noted
  EXPECT_EQ(*matched.tag, 1u);
  const std::optional<StepKey> first = table.unmatched().next(0);
  const std::optional<StepKey> second = table.unmatched().next(0);
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->key.dst, 4);
  EXPECT_EQ(second->key.dst, 5);
  EXPECT_EQ(second->step, 3);
  EXPECT_EQ(second->key.name, "w");
  EXPECT_FALSE(table.unmatched().next(0));
  table.unwatch(3, "w");
  table.recv(3, RendezvousKey{0, 7, "w"}, after.callback());
  EXPECT_FALSE(table.unmatched().next(0));
}

TEST(LocalTable, UnmatchedRecvsWakeTheirFollowerWhenEnded) {
  LocalTable table;
  std::optional<StepKey> got = StepKey{};
  std::thread follower([&] { got = table.unmatched().next(-1); });
  table.unmatched().end();
  follower.join();
  EXPECT_FALSE(got);
  table.watch(1, "w");
  Got waiting;
  table.recv(1, kKey, waiting.callback());
  EXPECT_FALSE(table.unmatched().next(0));  // (nothing queued once ended)
}

}  // namespace
}  // namespace tensorverbs
