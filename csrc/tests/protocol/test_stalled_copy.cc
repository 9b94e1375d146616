// A large shared-memory copy delays only its own channel: while the sender's copy of a big
// tensor is stalled (its source pages are missing, served by a userfaultfd only when the
// test says so), the sender's other channels move tensors, with more requests arriving on
// the copying channel meanwhile.
#include <gtest/gtest.h>

#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "rendezvous_pair.h"
#include "tests/missing_pages.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;
using testing_memory::MissingPages;

constexpr std::int32_t kOther = 2;

class StalledCopyPair : public RendezvousPair {
 protected:
  void SetUp() override {
    extra_tasks_ = 1;
    RendezvousPair::SetUp();
    if (HasFatalFailure()) return;
    auto opened = open_task(kOther,
                            {"/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0",
                             "/job:other/replica:0/task:0"},
                            GetParam());
    ASSERT_TRUE(opened.ok()) << opened.status().message();
    other_ = opened.take();
    ASSERT_TRUE(connect_tasks(*other_, 9, *ps_, 7));
  }
  void TearDown() override {
    if (other_) other_->stop();
    RendezvousPair::TearDown();
  }
  std::unique_ptr<RdmaRendezvous> other_;
};

TEST_P(StalledCopyPair, OtherChannelsMoveTensorsWhileALargeCopyIsStalled) {
  constexpr std::size_t kBig = 6 << 20;  // (in a pool block, not a landing of its own)
  MissingPages pages(kBig);
  if (!pages.unavailable().empty()) GTEST_SKIP() << pages.unavailable();
  std::vector<std::uint8_t> content(kBig);
  for (std::size_t i = 0; i < kBig; ++i) content[i] = static_cast<std::uint8_t>(i * 7 + i / 4096);
  const TensorValue big{TensorMeta{kFloat, {static_cast<std::int64_t>(kBig / 4)}, false, kBig},
                        pages.data(), nullptr};

  // the first writes into a block of the worker's pool have the sender map it (they go
  // through the stream meanwhile): later ones take the shared-memory path
  for (int i = 0; i < 3; ++i) {
    const TensorValue warm = floats(kBig / 4, static_cast<float>(i));
    ASSERT_TRUE(ps_->send(0, kWorker, "warm" + std::to_string(i), warm).ok());
    RecvResult got = recv(0, "warm" + std::to_string(i));
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    ASSERT_TRUE(same(got.value, warm));
  }
  auto big_recv = std::make_shared<Waiting>();
  worker_->recv(1, kPs, "big", 120, big_recv);
  auto sending = std::async(std::launch::async, [&] { return ps_->send(1, kWorker, "big", big); });
  ASSERT_TRUE(pages.wait_touched()) << "the big tensor's copy never started: "
                                     << (sending.wait_for(std::chrono::seconds(0)) == std::future_status::ready
                                             ? sending.get().message()
                                             : "still sending")
                                     << " / " << ps_->describe_channels();

  // the copying channel gets more requests meanwhile (its queue pair has work to see to)
  const TensorValue small = floats(1 << 10, 5.0f);
  auto after_recv = std::make_shared<Waiting>();
  worker_->recv(1, kPs, "after", 120, after_recv);
  // another channel of the sender: its tensors move while the copy is stalled
  auto other_recv = std::make_shared<Waiting>();
  other_->recv(1, kPs, "small", 120, other_recv);
  auto other_send = std::async(std::launch::async, [&] {
    Status a = ps_->send(1, kOther, "small", small);
    return a.ok() ? ps_->send(1, kWorker, "after", small) : a;
  });
  RecvResult got{Status(Code::kDeadlineExceeded, "test timeout"), {}};
  {
    // (not the helper's 60 s: the copy must be let go for the test to end either way)
    auto future = std::async(std::launch::async, [&] { return other_recv->get(); });
    if (future.wait_for(std::chrono::seconds(20)) == std::future_status::ready) {
      got = future.get();
    } else {
      ADD_FAILURE() << "the other channel's recv did not end within 20 s of the stalled copy";
    }
    ASSERT_TRUE(pages.fill(content)) << std::strerror(errno);
    if (future.valid()) got = future.get();
  }
  EXPECT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_TRUE(same(got.value, small));

  ASSERT_TRUE(sending.get().ok());
  ASSERT_TRUE(other_send.get().ok());
  RecvResult got_big = big_recv->get();
  ASSERT_TRUE(got_big.status.ok()) << got_big.status.message();
  ASSERT_EQ(got_big.value.size(), kBig);
  EXPECT_EQ(std::memcmp(got_big.value.data, content.data(), kBig), 0);
  RecvResult got_after = after_recv->get();
  ASSERT_TRUE(got_after.status.ok()) << got_after.status.message();
  EXPECT_TRUE(same(got_after.value, small));
}

// Write mode on one host: the sender copies into the receiver's shared memory.
INSTANTIATE_TEST_SUITE_P(Modes, StalledCopyPair, ::testing::Values(Options{}), mode_name);

}  // namespace
}  // namespace tensorverbs
