// A channel that broke under the transport (its queue pair gave up retransmitting: a lossy
// fabric, a link that flapped) and was set up again: the recvs that were pending on it are
// asked again on the new channel, and get their tensors; a channel that failed for good
// (the peer is gone, the task stops) fails them.
#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "protocol/rdma_rendezvous.h"
#include "protocol/rdma_tensor_request.h"
#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

constexpr std::size_t kLarge = std::size_t{1} << 20;  // floats: written, not inline

class ChannelRecovery : public RendezvousPair {
 protected:
  // Starts recvs of "small" and "large" at `step` and waits until the ps has both requests.
  std::pair<std::shared_ptr<Waiting>, std::shared_ptr<Waiting>> pending(std::int64_t step,
                                                                         double timeout = 60) {
    auto small = std::make_shared<Waiting>(), large = std::make_shared<Waiting>();
    worker_->recv(step, kPs, "small", timeout, small);
    worker_->recv(step, kPs, "large", timeout, large);
    while (ps_->pending().second < 2) std::this_thread::yield();
    return {small, large};
  }

  void expect_both(std::int64_t step, Waiting& small, Waiting& large) {
    const TensorValue s = floats(10, 1.0f), l = floats(kLarge, 2.0f);
    ASSERT_TRUE(ps_->send(step, kWorker, "small", s).ok());
    ASSERT_TRUE(ps_->send(step, kWorker, "large", l).ok());
    RecvResult got_small = small.get(), got_large = large.get();
    ASSERT_TRUE(got_small.status.ok()) << got_small.status.message();
    ASSERT_TRUE(got_large.status.ok()) << got_large.status.message();
    EXPECT_TRUE(same(got_small.value, s));
    EXPECT_TRUE(same(got_large.value, l));
  }
};

TEST_P(ChannelRecovery, TheRecvsPendingOnAChannelThePeerSetsUpAgainAreAskedAgain) {
  const TensorValue before = floats(kLarge, 0.5f);  // the channel carried tensors already
  ASSERT_TRUE(ps_->send(1, kWorker, "before", before).ok());
  RecvResult got = recv(1, "before");
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  auto [small, large] = pending(2);
  // the ps's side broke, and the ps sets the channel up again (same incarnations)
  ps_->fail_channel(kWorker, Status(Code::kUnavailable, "the ps's queue pair gave up"), true);
  ASSERT_TRUE(connect_tasks(*ps_, 7, *worker_, 8));
  expect_both(2, *small, *large);
  // "before" too if its write's completion had not reached the ps when the channel broke: a
  // response whose outcome is unknown gives its tensor back (a duplicate the step's cleanup
  // drops, rather than a recv asked again that nothing answers); step 2 leaves nothing
  ps_->cleanup_step(1);
  EXPECT_EQ(ps_->pending(), std::make_pair(std::size_t{0}, std::size_t{0}));
}

TEST_P(ChannelRecovery, ATransportFailureHoldsTheRecvsUntilThisSideSetsTheChannelUpAgain) {
  auto [small, large] = pending(3);
  worker_->fail_channel(kPs, Status(Code::kUnavailable, "the worker's queue pair gave up"), true);
  EXPECT_EQ(worker_->next_lost(60), std::optional<std::int32_t>(kPs));  // the control plane hears
  EXPECT_FALSE(worker_->ready(kPs));
  ASSERT_TRUE(connect_tasks(*worker_, 8, *ps_, 7));
  expect_both(3, *small, *large);
  // and the new channel carries the next steps
  const TensorValue after = floats(kLarge, 4.0f);
  ASSERT_TRUE(ps_->send(4, kWorker, "after", after).ok());
  RecvResult got = recv(4, "after");
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_TRUE(same(got.value, after));
}

// The control plane saw the channel up, and starts the core's recv as it breaks: the recv
// is held for the channel set up again like those already pending on it.
TEST_P(ChannelRecovery, ARecvStartedAsItsChannelBrokeIsHeldForTheNextOne) {
  worker_->fail_channel(kPs, Status(Code::kUnavailable, "the worker's queue pair gave up"), true);
  auto small = std::make_shared<Waiting>(), large = std::make_shared<Waiting>();
  worker_->recv(10, kPs, "small", 60, small);
  worker_->recv(10, kPs, "large", 60, large);
  ASSERT_EQ(worker_->next_lost(60), std::optional<std::int32_t>(kPs));
  ASSERT_TRUE(connect_tasks(*worker_, 8, *ps_, 7));
  expect_both(10, *small, *large);
}

TEST_P(ChannelRecovery, HeldRecvsEndByTheirDeadlineAStepsAbortOrAFailureForGood) {
  auto timed = std::make_shared<Waiting>(), aborted = std::make_shared<Waiting>(),
       failed = std::make_shared<Waiting>();
  worker_->recv(5, kPs, "timed", 0.5, timed);
  worker_->recv(6, kPs, "aborted", 60, aborted);
  worker_->recv(7, kPs, "failed", -1, failed);
  while (ps_->pending().second < 3) std::this_thread::yield();
  worker_->fail_channel(kPs, Status(Code::kUnavailable, "the worker's queue pair gave up"), true);
  worker_->abort_step(6, Status(Code::kAborted, "step 6 aborted"));
  RecvResult got = timed->get();
  EXPECT_EQ(got.status.code(), Code::kDeadlineExceeded) << got.status.message();
  EXPECT_NE(got.status.message().find("set up again"), std::string::npos) << got.status.message();
  EXPECT_EQ(aborted->get().status.code(), Code::kAborted);
  // the control plane could not set the channel up again: the peer is gone
  worker_->fail_channel(kPs, Status(Code::kUnavailable, "the ps is unavailable"));
  got = failed->get();
  EXPECT_EQ(got.status.code(), Code::kUnavailable);
  EXPECT_NE(got.status.message().find("the ps is unavailable"), std::string::npos) << got.status.message();
}

// A transient failure's pass holds each recv it took off the channel; the control plane may
// fail the channel for good meanwhile (the peer is gone: its health stream ended) and give
// up the recvs held so far. A recv the pass holds after that would wait for a set-up that
// the control plane keeps trying through the start-up grace period: it fails instead.
TEST_P(ChannelRecovery, ARecvHeldAfterItsChannelFailedForGoodFailsInstead) {
  worker_->fail_channel(kPs, Status(Code::kUnavailable, "the ps is unavailable"));
  auto caller = std::make_shared<Waiting>();
  auto late = std::make_shared<RdmaTensorRequest>(*worker_, nullptr,
                                                  StepKey{9, RendezvousKey{kPs, kWorker, "late"}}, caller);
  std::string why_not;  // (the pass then fails it with the transport's error, and this)
  EXPECT_FALSE(worker_->hold(late, &why_not));
  EXPECT_EQ(why_not, "its channel failed for good (the ps is unavailable)");
}

TEST_P(ChannelRecovery, StopEndsHeldRecvsAndTheWaitForLostChannels) {
  auto held = std::make_shared<Waiting>();
  worker_->recv(8, kPs, "held", -1, held);
  while (ps_->pending().second < 1) std::this_thread::yield();
  worker_->fail_channel(kPs, Status(Code::kUnavailable, "the worker's queue pair gave up"), true);
  ASSERT_EQ(worker_->next_lost(60), std::optional<std::int32_t>(kPs));
  std::thread stopper([&] { worker_->stop(); });
  EXPECT_EQ(worker_->next_lost(-1), std::nullopt);  // woken by stop()
  stopper.join();
  EXPECT_EQ(held->get().status.code(), Code::kCancelled);
}

TEST_P(ChannelRecovery, APeerThatRestartedFailsTheRecvsOfItsLastIncarnation) {
  auto held = std::make_shared<Waiting>();
  worker_->recv(9, kPs, "held", 60, held);
  while (ps_->pending().second < 1) std::this_thread::yield();
  ps_->fail_channel(kWorker, Status(Code::kUnavailable, "the ps's queue pair gave up"), true);
  ASSERT_TRUE(connect_tasks(*ps_, 70, *worker_, 8));  // the ps, as incarnation 70
  EXPECT_EQ(held->get().status.code(), Code::kUnavailable);
}

// When both sides set the channel up at once, the side that answers connects first and
// may ask at once: its request reaches the other side while that one is still connecting,
// whose answer and acknowledgement wait until it is.
TEST_P(ChannelRecovery, ThePeerMayAskWhileThisSideIsStillConnecting) {
  // many rounds where a round is quick; the lane's emulated guest makes each set-up slow
  const int rounds = GetParam().provider == "ibverbs" ? 3 : 20;
  for (int round = 0; round < rounds; ++round) {
    const std::int64_t step = 100 + round;
    const TensorValue sent = floats(round % 2 ? 10 : kLarge, static_cast<float>(round));
    ASSERT_TRUE(ps_->send(step, kWorker, "early", sent).ok());
    ps_->fail_channel(kWorker, Status(Code::kUnavailable, "set up again"));
    worker_->fail_channel(kPs, Status(Code::kUnavailable, "set up again"));
    auto mine = ps_->channel(kWorker, 8, {});
    ASSERT_TRUE(mine.ok()) << mine.status().message();
    auto theirs = worker_->channel(kPs, 7, mine.value());
    ASSERT_TRUE(theirs.ok()) << theirs.status().message();
    ASSERT_TRUE(worker_->connect(kPs, 7, mine.value()).ok());
    auto waiting = std::make_shared<Waiting>();
    worker_->recv(step, kPs, "early", 60, waiting);  // asks before the ps has connected
    ASSERT_TRUE(ps_->connect(kWorker, 8, theirs.value()).ok());
    RecvResult got = waiting->get();
    ASSERT_TRUE(got.status.ok()) << "round " << round << ": " << got.status.message();
    EXPECT_TRUE(same(got.value, sent)) << round;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ChannelRecovery, all_modes(), mode_name);
// write mode only: read mode adds nothing to recovery, and each test sets channels up anew
INSTANTIATE_TEST_SUITE_P(Ibverbs, ChannelRecovery,
                         ::testing::Values(Options{false, false, "auto", "ibverbs", "registration"}),
                         mode_name);

}  // namespace
}  // namespace tensorverbs
