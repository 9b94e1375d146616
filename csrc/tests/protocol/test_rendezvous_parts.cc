// The parts RdmaRendezvous coordinates, each alone: the meta-data cache, the store of late
// tensors with the tracking of recvs that takes from it, and the quarantine of landings.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "protocol/landing_quarantine.h"
#include "protocol/late_tensors.h"
#include "protocol/meta_data_cache.h"
#include "protocol/recv_tracker.h"

namespace tensorverbs {
namespace {

TensorValue value_of(std::uint64_t tag) {
  auto bytes = std::make_shared<std::uint64_t>(tag);
  return TensorValue{TensorMeta{9, {}, false, 8}, reinterpret_cast<const std::uint8_t*>(bytes.get()), bytes};
}

std::uint64_t tag_of(const TensorValue& value) { return *reinterpret_cast<const std::uint64_t*>(value.data); }

const StepKey kKey{1, RendezvousKey{0, 1, "w"}};
const StepKey kOtherStep{2, RendezvousKey{0, 1, "w"}};

// A recv that takes a handed-over tensor while `waiting`, and remembers how it ended.
class FakeRecv final : public PendingRecv {
 public:
  explicit FakeRecv(StepKey key) : key_(std::move(key)) {}
  const StepKey& key() const override { return key_; }
  void give_up(const Status& why) override { ended = why; }
  std::string what() const override { return "fake recv"; }
  std::string progress() const override { return {}; }
  bool hand_over(TensorValue& value) override {
    if (!waiting) return false;
    got = tag_of(value);
    waiting = false;
    return true;
  }

  bool waiting = true;
  std::optional<std::uint64_t> got;
  std::optional<Status> ended;

 private:
  StepKey key_;
};

TEST(MetaDataCache, KeepsTheLastMetaByPeerAndName) {
  MetaDataCache cache;
  EXPECT_FALSE(cache.find(1, "w"));
  cache.update(1, "w", TensorMeta{1, {2}, false, 8});
  cache.update(1, "w", TensorMeta{1, {4}, false, 16});
  ASSERT_TRUE(cache.find(1, "w"));
  EXPECT_EQ(cache.find(1, "w")->nbytes, 16u);
  EXPECT_FALSE(cache.find(2, "w"));
  EXPECT_FALSE(cache.find(1, "b"));
}

TEST(LateTensors, OldestFirstByKeyAndStepAndDroppedByStep) {
  LateTensors late;
  late.keep(kKey, value_of(1));
  late.keep(kKey, value_of(2));
  late.keep(kOtherStep, value_of(3));
  EXPECT_EQ(tag_of(*late.take(kKey)), 1u);
  late.drop_step(1);
  EXPECT_FALSE(late.take(kKey));
  EXPECT_EQ(tag_of(*late.take(kOtherStep)), 3u);
  EXPECT_FALSE(late.take(kOtherStep));
}

TEST(RecvTracker, HandsALateTensorToTheOldestWaitingRecvElseKeepsIt) {
  RecvTracker tracker;
  auto first = std::make_shared<FakeRecv>(kKey);
  auto second = std::make_shared<FakeRecv>(kKey);
  EXPECT_FALSE(tracker.track(first));
  EXPECT_FALSE(tracker.track(second));
  first->waiting = false;  // answered meanwhile: the next one takes it
  tracker.hand_over(kKey, value_of(7));
  EXPECT_EQ(second->got, 7u);
  tracker.forget(first.get());
  tracker.forget(second.get());
  tracker.hand_over(kKey, value_of(8));  // nobody waits: kept for the next recv
  auto third = std::make_shared<FakeRecv>(kKey);
  auto late = tracker.track(third);
  ASSERT_TRUE(late);
  EXPECT_EQ(tag_of(*late), 8u);
}

TEST(RecvTracker, AbortGivesUpTheStepsRecvsAndStopGivesUpEveryRecv) {
  RecvTracker tracker;
  auto aborted = std::make_shared<FakeRecv>(kKey);
  auto stopped = std::make_shared<FakeRecv>(kOtherStep);
  ASSERT_FALSE(tracker.track(aborted));
  ASSERT_FALSE(tracker.track(stopped));
  tracker.abort_step(1, Status(Code::kAborted, "step 1 aborted"));
  ASSERT_TRUE(aborted->ended);
  EXPECT_EQ(aborted->ended->code(), Code::kAborted);
  EXPECT_FALSE(stopped->ended);
  tracker.stop();
  ASSERT_TRUE(stopped->ended);
  EXPECT_EQ(stopped->ended->code(), Code::kCancelled);
  auto after = std::make_shared<FakeRecv>(kKey);  // given up as it comes
  EXPECT_FALSE(tracker.track(after));
  ASSERT_TRUE(after->ended);
  EXPECT_EQ(after->ended->code(), Code::kCancelled);
}

TEST(LandingQuarantine, KeepsWhatIsNotQuiescedOrThrows) {
  LandingQuarantine quarantine;
  bool quiet = false;
  quarantine.add([&quiet] { return quiet; });
  quarantine.add([]() -> bool { throw std::runtime_error("broken"); });
  EXPECT_TRUE(quarantine.check());
  quiet = true;
  EXPECT_TRUE(quarantine.check());  // the one that throws stays
}

}  // namespace
}  // namespace tensorverbs
