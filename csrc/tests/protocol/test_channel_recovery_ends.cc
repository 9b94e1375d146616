// A recv whose channel broke under the transport still ends: given up (its deadline, its
// step's abort, its caller's cancel) as its channel is set up again, whichever comes first,
// the give-up or the recv asked again there.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/rdma_rendezvous.h"
#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

// Counts the recvs answered (a give-up answers its caller before it returns); the count
// outlives a recv that ends only as the task stops.
class Ended : public RecvCallback {
 public:
  explicit Ended(std::shared_ptr<std::atomic<int>> count) : count_(std::move(count)) {}
  void complete(RecvResult) override { count_->fetch_add(1, std::memory_order_relaxed); }

 private:
  const std::shared_ptr<std::atomic<int>> count_;
};

// Tasks whose queue pairs hold 8 requests: most recvs wait in their channel, so the held
// recvs are asked again in the order they were made, as they are given up.
class ChannelRecoveryEnds : public ShallowQueuePair {};

// The recvs are given up from another thread as the set-up asks them again, over and over:
// a give-up that saw no recv asked again yet, and then found it ended by being asked again,
// was lost (the recv asked again had no deadline of its own, and waited for ever).
TEST_P(ChannelRecoveryEnds, ARecvGivenUpAsItIsAskedAgainEnds) {
  constexpr int kRecvs = 200;
  const int rounds = GetParam().provider == "ibverbs" ? 5 : 200;
  for (int round = 0; round < rounds; ++round) {
    const std::int64_t step = 300 + round;
    auto ended = std::make_shared<std::atomic<int>>(0);
    std::vector<std::shared_ptr<PendingRecv>> recvs;
    for (int i = 0; i < kRecvs; ++i) {
      recvs.push_back(worker_->recv(step, kPs, "t" + std::to_string(i), -1,
                                    std::make_shared<Ended>(ended)));
    }
    worker_->fail_channel(kPs, Status(Code::kUnavailable, "the worker's queue pair gave up"), true);
    std::atomic<bool> set_up_failed{false};
    std::thread giving_up([&] {
      // the channel is connected again: its held recvs are being asked again now
      while (!worker_->ready(kPs) && !set_up_failed) std::this_thread::yield();
      for (auto& recv : recvs) recv->give_up(Status(Code::kCancelled, "given up"));
    });
    const ::testing::AssertionResult set_up = connect_tasks(*worker_, 8, *ps_, 7);
    set_up_failed = !set_up;
    giving_up.join();
    ASSERT_TRUE(set_up);
    ASSERT_EQ(ended->load(), kRecvs) << "round " << round << ": " << kRecvs - ended->load()
                                    << " recvs given up did not end";
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ChannelRecoveryEnds, all_modes(), mode_name);
// write mode only, as the other recovery tests in the lane
INSTANTIATE_TEST_SUITE_P(Ibverbs, ChannelRecoveryEnds,
                         ::testing::Values(Options{false, false, "auto", "ibverbs", "registration"}),
                         mode_name);

}  // namespace
}  // namespace tensorverbs
