// Flow control: more transfers in flight on one channel than its queues hold wait their
// turn (requests beyond the receive credits queue at the requester, work requests beyond
// the send queue at the sender) instead of failing the channel or stalling on
// receiver-not-ready retries; with timeouts among them, nothing is lost or stranded.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

constexpr int kInFlight = 300;  // with queues of 8

TEST_P(ShallowQueuePair, MoreTransfersInFlightThanTheQueuesHold) {
  std::vector<TensorValue> sent;
  std::vector<std::shared_ptr<Waiting>> waiting;
  for (int i = 0; i < kInFlight; ++i) {  // 64 KiB: written into a landing; every 10th inline
    sent.push_back(floats(i % 10 == 0 ? 4 : std::size_t{1} << 14, static_cast<float>(i)));
    waiting.push_back(std::make_shared<Waiting>());
    worker_->recv(1, kPs, "t" + std::to_string(i), 120, waiting.back());
  }
  for (int i = 0; i < kInFlight; ++i) {
    ASSERT_TRUE(ps_->send(1, kWorker, "t" + std::to_string(i), sent[static_cast<std::size_t>(i)]).ok());
  }
  for (int i = 0; i < kInFlight; ++i) {
    RecvResult got = waiting[static_cast<std::size_t>(i)]->get();
    ASSERT_TRUE(got.status.ok()) << i << ": " << got.status.message() << "\nworker: "
                                 << worker_->describe_channels() << "ps: " << ps_->describe_channels();
    EXPECT_TRUE(same(got.value, sent[static_cast<std::size_t>(i)])) << i;
  }
  EXPECT_TRUE(worker_->ready(kPs) && ps_->ready(kWorker));
}

TEST_P(ShallowQueuePair, BothWaysAtOnceWithGiveUpsAmongThem) {
  constexpr int kEach = 120;
  std::vector<std::shared_ptr<Waiting>> to_worker, to_ps, given_up;
  const TensorValue value = floats(std::size_t{1} << 14, 7.0f);
  for (int i = 0; i < kEach; ++i) {
    const std::string name = "b" + std::to_string(i);
    to_worker.push_back(std::make_shared<Waiting>());
    worker_->recv(2, kPs, name, 120, to_worker.back());
    to_ps.push_back(std::make_shared<Waiting>());
    ps_->recv(2, kWorker, name, 120, to_ps.back());
    if (i % 7 == 0) {  // given up at once, before its tensor is sent
      given_up.push_back(std::make_shared<Waiting>());
      worker_->recv(3, kPs, name, 0, given_up.back());
    }
  }
  for (int i = 0; i < kEach; ++i) {
    const std::string name = "b" + std::to_string(i);
    ASSERT_TRUE(ps_->send(2, kWorker, name, value).ok());
    ASSERT_TRUE(worker_->send(2, kPs, name, value).ok());
  }
  for (auto& w : given_up) EXPECT_EQ(w->get().status.code(), Code::kDeadlineExceeded);
  for (int i = 0; i < kEach; ++i) {
    RecvResult a = to_worker[static_cast<std::size_t>(i)]->get();
    RecvResult b = to_ps[static_cast<std::size_t>(i)]->get();
    ASSERT_TRUE(a.status.ok() && b.status.ok())
        << a.status.message() << b.status.message() << "\nworker: " << worker_->describe_channels()
        << "ps: " << ps_->describe_channels();
    EXPECT_TRUE(same(a.value, value) && same(b.value, value)) << i;
  }
  for (int i = 0; i < kEach; i += 7) {  // the tensors of the recvs that gave up are still there
    const std::string name = "b" + std::to_string(i);
    ASSERT_TRUE(ps_->send(3, kWorker, name, value).ok());
    RecvResult got = recv(3, name);
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(same(got.value, value));
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ShallowQueuePair, all_modes(), mode_name);
INSTANTIATE_TEST_SUITE_P(Ibverbs, ShallowQueuePair, ibverbs_modes(), mode_name);
INSTANTIATE_TEST_SUITE_P(IbverbsType2, ShallowQueuePair, type2_modes(), mode_name);

}  // namespace
}  // namespace tensorverbs
