// A request that waits for its old queue pair's receives to be flushed (the peer may have
// written its tensor) is held as soon as the flush has been seen, also when the failure
// reaches it only after the flush came: it does not wait out the drain's bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/rdma_rendezvous.h"
#include "protocol/rdma_tensor_request.h"
#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

constexpr std::size_t kLarge = std::size_t{1} << 18;  // floats: written into a window
constexpr std::size_t kWindowed = 4;

using ChannelRecoveryDrain = RendezvousPair;

bool draining(const std::shared_ptr<PendingRecv>& recv) {
  return recv->progress().find("waiting for the old queue pair's receives to be flushed") != std::string::npos;
}

// Still asked of the failed channel: the failure's pass has not reached it.
bool unreached(const std::shared_ptr<PendingRecv>& recv) {
  return recv->progress().rfind("requested; ", 0) == 0;
}

// The control plane's pass over a transiently failed channel's requests is held up in one
// of them (a recv asked kMaxAttempts times, whose caller it answers) while the completion
// thread handles the flush of the receives. The windowed requests the pass reaches after
// that wait for a flush that has come already: they were left waiting out the bound (5 s,
// past the deadline of a recv into a destination) before they were asked again.
TEST_P(ChannelRecoveryDrain, ARequestTheFailureReachesAfterTheFlushIsHeldAtOnce) {
  // 'y' of step 1 caches its meta-data at the worker: the recvs of 'y' below carry windows
  ASSERT_TRUE(ps_->send(1, kWorker, "y", floats(kLarge, 0.5f)).ok());
  ASSERT_TRUE(recv(1, "y").status.ok());
  // 'g', never sent, asked again after each failure until it was asked kMaxAttempts times
  auto gate = std::make_shared<Gate>();
  worker_->recv(2, kPs, "g", 60, gate);
  ASSERT_TRUE(eventually([&] { return ps_->pending().second == 1; }));
  for (std::uint32_t attempt = 1; attempt < RdmaTensorRequest::kMaxAttempts; ++attempt) {
    worker_->fail_channel(kPs, Status(Code::kUnavailable, "the worker's queue pair gave up"), true);
    ASSERT_TRUE(connect_tasks(*worker_, 8, *ps_, 7));
  }
  std::vector<std::shared_ptr<PendingRecv>> windowed;
  std::vector<std::shared_ptr<Waiting>> callers;
  for (std::size_t i = 0; i < kWindowed; ++i) {
    callers.push_back(std::make_shared<Waiting>());
    windowed.push_back(worker_->recv(3 + static_cast<std::int64_t>(i), kPs, "y", 60, callers.back()));
  }
  ASSERT_TRUE(eventually([&] { return ps_->pending().second == 1 + kWindowed; }));
  std::thread control_plane([&] {
    worker_->fail_channel(kPs, Status(Code::kUnavailable, "the worker's queue pair gave up"), true);
  });
  gate->wait_entered();  // the pass answers 'g' (not asked again), held there
  // the completion thread takes the flush: the channel lets go of every request it had, and
  // those the pass had made wait for it are held
  ASSERT_TRUE(eventually([&] {
    return worker_->describe_channels().find("requests in flight 0 ") != std::string::npos &&
           std::none_of(windowed.begin(), windowed.end(), draining);
  }));
  const auto behind = std::count_if(windowed.begin(), windowed.end(), unreached);
  gate->release();
  control_plane.join();
  ASSERT_GT(behind, 0) << "not staged: the pass reached every windowed request before 'g'";
  for (std::size_t i = 0; i < kWindowed; ++i) {
    EXPECT_FALSE(draining(windowed[i])) << "recv " << i << ": " << windowed[i]->progress();
  }
  ASSERT_TRUE(connect_tasks(*worker_, 8, *ps_, 7));
  for (std::size_t i = 0; i < kWindowed; ++i) {
    const TensorValue sent = floats(kLarge, static_cast<float>(i));
    ASSERT_TRUE(ps_->send(3 + static_cast<std::int64_t>(i), kWorker, "y", sent).ok());
    const RecvResult got = callers[i]->get();
    ASSERT_TRUE(got.status.ok()) << "recv " << i << ": " << got.status.message();
    EXPECT_TRUE(same(got.value, sent));
  }
}

// Requests carry windows in write mode only (a read-mode request asks for the meta-data).
INSTANTIATE_TEST_SUITE_P(Modes, ChannelRecoveryDrain,
                         ::testing::Values(Options{}, Options{false, true}, Options{false, false, "no"}),
                         mode_name);
INSTANTIATE_TEST_SUITE_P(Ibverbs, ChannelRecoveryDrain,
                         ::testing::Values(Options{false, false, "auto", "ibverbs", "registration"}),
                         mode_name);

}  // namespace
}  // namespace tensorverbs
