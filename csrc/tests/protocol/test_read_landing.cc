// Read mode: the landing of a read still outstanding when its channel fails stays out of
// use until the read's completion (its flush) has been seen: on a real NIC a read response
// may still be placed in memory after the queue pair was moved to the error state.
#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

class ReadLandingPair : public RendezvousPair {};

constexpr std::size_t kCount = std::size_t{16} << 20;  // 64 MiB: a read that takes a while

TEST_P(ReadLandingPair, ALandingStaysOutOfUseUntilItsFailedReadIsSeenToEnd) {
  const TensorValue sent = floats(kCount, 1.0f);
  for (int attempt = 0; attempt < 5; ++attempt) {
    const std::int64_t step = 30 + attempt;
    auto caller = std::make_shared<Waiting>();
    std::shared_ptr<PendingRecv> pending = worker_->recv(step, kPs, "big", 60, caller);
    ASSERT_TRUE(ps_->send(step, kWorker, "big", sent).ok());
    while (pending->progress().find("requested") != std::string::npos ||
           pending->progress().find("re-requested") != std::string::npos) {
      std::this_thread::yield();
    }
    // the worker's adapter stops taking completions: a deadline it fires blocks in a gate
    auto gate = std::make_shared<Gate>();
    worker_->recv(step, kWorker, "freeze", 0, gate);
    gate->wait_entered();
    if (pending->progress().find("being read") == std::string::npos) {  // the read ended first
      gate->release();
      ASSERT_TRUE(caller->get().status.ok());
      continue;
    }
    const std::uint64_t in_use = stat(*worker_, "pool_in_use_bytes");
    worker_->fail_channel(kPs, Status(Code::kUnavailable, "the test failed the channel"));
    EXPECT_EQ(caller->get().status.code(), Code::kUnavailable);
    // the read's flush has not been seen (the adapter is held): its landing is kept
    EXPECT_GE(stat(*worker_, "pool_in_use_bytes"), in_use) << "released before the read ended";
    gate->release();
    return;
  }
  FAIL() << "every read ended before the adapter could be held";
}

// Over TCP the read's bytes stream in while it is outstanding (on one host a read is one copy
// when it is posted).
INSTANTIATE_TEST_SUITE_P(Modes, ReadLandingPair,
                         ::testing::Values(Options{true, false, "no"}), mode_name);
INSTANTIATE_TEST_SUITE_P(Ibverbs, ReadLandingPair,
                         ::testing::Values(Options{true, false, "auto", "ibverbs", "registration"}),
                         mode_name);

}  // namespace
}  // namespace tensorverbs
