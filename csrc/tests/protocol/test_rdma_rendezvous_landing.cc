// Where a received tensor lands: the caller's destination (out=), the pool, and copies of
// borrowed bytes kept for a later recv.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "protocol/rdma_rendezvous.h"
#include "protocol/send_completion.h"
#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

class LandingPair : public RendezvousPair {};

TEST_P(LandingPair, ATasksOwnTensorIsInTheDestinationBeforeItsSendIsDone) {
  // the sender may reuse its bytes once its send is done: they were copied by then
  TensorValue sent = floats(1000, 0.5f);
  const TensorValue want = sent;  // (the sender's bytes)
  auto ledger = std::make_shared<SendLedger>();
  sent.ticket = ledger->open("'own'");
  std::shared_ptr<SendCompletion> completion = sent.ticket->completion();
  const RecvDestination destination = zeros(1000, {1000});
  ASSERT_TRUE(worker_->send(4, kWorker, "own", std::move(sent)).ok());
  auto waiting = std::make_shared<Waiting>();
  worker_->recv(4, kWorker, "own", 60, waiting, destination);
  RecvResult got = waiting->get();
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  ASSERT_TRUE(completion->wait(60));
  EXPECT_EQ(got.value.data, destination.data);
  EXPECT_TRUE(got.value.borrowed);
  EXPECT_TRUE(same(got.value, want));
}

TEST_P(LandingPair, ATensorThatFitsLandsInTheDestination) {
  // inline, through the pool below kRegisterFrom, registered from it on (over TCP)
  for (std::size_t count :
       {std::size_t{100}, std::size_t{5000}, kRegisterFrom / 4, std::size_t{3} << 20}) {
    const auto shape = std::vector<std::int64_t>{static_cast<std::int64_t>(count)};
    const RecvDestination destination = zeros(count, shape);
    const TensorValue sent = floats(count, 0.5f);
    const std::uint64_t registrations = landing_registrations(*worker_);
    ASSERT_TRUE(ps_->send(9, kWorker, "into", sent).ok());
    RecvResult got = recv(9, "into", 60, destination);
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(same(got.value, sent)) << count;
    // on one host the soft provider writes the pool's shared memory directly: no registration
    const bool pool_only = GetParam().provider == "soft" && GetParam().same_host != "no";
    const bool registered = count * 4 >= kRegisterFrom && !pool_only;
    const bool lands = count * 4 <= kMaxTailBytes || registered;  // else the caller copies
    EXPECT_EQ(got.value.data == destination.data, lands) << count;
    EXPECT_EQ(got.value.borrowed, lands) << count;
    EXPECT_EQ(landing_registrations(*worker_) - registrations, registered ? 1u : 0u) << count;
  }
}

TEST_P(LandingPair, ATensorThatFitsADestinationInThePoolLandsThereAtAnySize) {
  // memory of the pool (Python's server.allocate): the peer reaches it as it is, so the
  // tensor lands there without a registration and without the caller's copy, in every mode
  for (std::size_t count : {std::size_t{5000}, std::size_t{3} << 20}) {
    auto buffer = worker_->allocate(count * 4);
    ASSERT_TRUE(buffer.ok()) << buffer.status().message();
    PoolBuffer memory = buffer.take();
    std::memset(memory->data(), 0, count * 4);
    const RecvDestination destination{kFloat, {static_cast<std::int64_t>(count)}, memory->data(),
                                      count * 4, memory};
    const TensorValue sent = floats(count, 3.0f);
    const std::uint64_t registrations = landing_registrations(*worker_);
    ASSERT_TRUE(ps_->send(13, kWorker, "pooled", sent).ok());
    RecvResult got = recv(13, "pooled", 60, destination);
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(same(got.value, sent)) << count;
    EXPECT_EQ(got.value.data, destination.data) << count;
    EXPECT_TRUE(got.value.borrowed) << count;
    EXPECT_EQ(landing_registrations(*worker_), registrations) << count;
  }
}

TEST_P(LandingPair, AnotherTensorLandsInThePoolAndLeavesTheDestinationAlone) {
  for (std::size_t count : {std::size_t{100}, std::size_t{3} << 20}) {
    // as expected first (the meta-data is cached), then a longer one of the same name
    const auto shape = std::vector<std::int64_t>{static_cast<std::int64_t>(count)};
    ASSERT_TRUE(ps_->send(10, kWorker, "other", floats(count, 1.0f)).ok());
    ASSERT_TRUE(recv(10, "other", 60, zeros(count, shape)).status.ok());
    const RecvDestination destination = zeros(count, shape);
    const TensorValue sent = floats(count + 1, 2.0f);
    ASSERT_TRUE(ps_->send(11, kWorker, "other", sent).ok());
    RecvResult got = recv(11, "other", 60, destination);
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(same(got.value, sent)) << count;
    EXPECT_NE(got.value.data, destination.data);
    EXPECT_FALSE(got.value.borrowed);
    EXPECT_TRUE(all_zero(destination)) << count;
  }
}

TEST_P(LandingPair, ATensorKeptForTheNextRecvIsACopyOfABorrowedOne) {
  const RecvDestination destination = zeros(100, {100});
  const TensorValue sent = floats(100, 4.0f);
  keep_and_reuse(12, "again", received_borrowed(12, "again", sent, destination), destination);
  RecvResult next = recv(12, "again");
  ASSERT_TRUE(next.status.ok()) << next.status.message();
  EXPECT_TRUE(same(next.value, sent));
  EXPECT_NE(next.value.data, destination.data);
}

// A recv's answer, and its destination's bytes at the moment the answer came.
class Snapshot : public RecvCallback {
 public:
  explicit Snapshot(const RecvDestination& destination) : destination_(destination) {}
  void complete(RecvResult result) override {
    bytes_.assign(destination_.data, destination_.data + destination_.nbytes);
    waiting_.complete(std::move(result));
  }
  RecvResult get() { return waiting_.get(); }
  const std::vector<std::uint8_t>& bytes() const { return bytes_; }

 private:
  const RecvDestination destination_;
  std::vector<std::uint8_t> bytes_;
  Waiting waiting_;
};

TEST_P(LandingPair, AGivenUpRecvsDestinationIsNotWrittenAfterItsCallerHeard) {
  // memory the peer writes directly in every mode (the pool: server.allocate)
  constexpr std::size_t kCount = std::size_t{1} << 18;
  auto buffer = worker_->allocate(kCount * 4);
  ASSERT_TRUE(buffer.ok()) << buffer.status().message();
  PoolBuffer memory = buffer.take();
  const RecvDestination destination{kFloat, {static_cast<std::int64_t>(kCount)}, memory->data(),
                                    kCount * 4, memory};
  ASSERT_TRUE(ps_->send(20, kWorker, "o", floats(kCount, 1.0f)).ok());  // the meta-data cached
  ASSERT_TRUE(recv(20, "o", 60, destination).status.ok());
  std::memset(destination.data, 0, destination.nbytes);
  // the request (carrying its landing) waits at the ps when its caller gives up
  auto caller = std::make_shared<Snapshot>(destination);
  std::shared_ptr<PendingRecv> pending = worker_->recv(21, kPs, "o", -1, caller, destination);
  while (ps_->pending().second == 0) std::this_thread::yield();
  auto gate = std::make_shared<Gate>();  // the ps takes no message (its CANCEL) meanwhile
  ps_->recv(21, kWorker, "freeze", -1, gate);
  ASSERT_TRUE(worker_->send(21, kPs, "freeze", floats(1, 0)).ok());
  gate->wait_entered();
  pending->give_up(Status(Code::kCancelled, "given up"));
  const TensorValue sent = floats(kCount, 9.0f);
  ASSERT_TRUE(ps_->send(21, kWorker, "o", sent).ok());  // meets the request it still holds
  gate->release();
  EXPECT_EQ(caller->get().status.code(), Code::kCancelled);
  RecvResult next = recv(21, "o");  // the tensor was kept for the next recv
  ASSERT_TRUE(next.status.ok()) << next.status.message();
  EXPECT_TRUE(same(next.value, sent));
  // whatever was written into the destination, nothing was after its caller heard
  EXPECT_EQ(0, std::memcmp(caller->bytes().data(), destination.data, destination.nbytes));
}

TEST_P(SmallPoolPair, ABorrowedTensorKeptWhileThePoolIsFullIsNotLost) {
  const RecvDestination destination = zeros(100, {100});
  const TensorValue sent = floats(100, 5.0f);
  TensorValue borrowed = received_borrowed(14, "full", sent, destination);
  std::vector<PoolBuffer> hog;  // every byte of the worker's pool
  for (const std::size_t size : {std::size_t{1} << 20, std::size_t{1} << 14, std::size_t{64}}) {
    for (auto taken = worker_->allocate(size); taken.ok(); taken = worker_->allocate(size)) {
      hog.push_back(taken.take());
    }
  }
  keep_and_reuse(14, "full", std::move(borrowed), destination);
  hog.clear();
  RecvResult next = recv(14, "full", 5);
  ASSERT_TRUE(next.status.ok()) << next.status.message();
  EXPECT_TRUE(same(next.value, sent));
}

INSTANTIATE_TEST_SUITE_P(Modes, LandingPair, all_modes(), mode_name);
INSTANTIATE_TEST_SUITE_P(Ibverbs, LandingPair, ibverbs_modes(), mode_name);
INSTANTIATE_TEST_SUITE_P(IbverbsType2, LandingPair, type2_modes(), mode_name);
INSTANTIATE_TEST_SUITE_P(Modes, SmallPoolPair,
                         ::testing::Values(Options{}, Options{false, false, "no"}), mode_name);

}  // namespace
}  // namespace tensorverbs
