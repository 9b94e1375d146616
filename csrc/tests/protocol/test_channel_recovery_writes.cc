// Write mode: a tensor whose write finished at the sender reaches its recv, though the
// receiver's channel was set up again before its completion thread saw the write.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "protocol/rdma_rendezvous.h"
#include "protocol/rdma_tensor_request.h"
#include "protocol/send_completion.h"
#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

// floats: written into the landing; below the soft provider's asynchronous copies, whose
// completion the receiver's (held) completion thread would see to
constexpr std::size_t kLarge = std::size_t{1} << 18;

class ChannelRecoveryWrites : public RendezvousPair {
 protected:
  // With the worker's completion thread held (released by `gate_`), the ps writes `sent_`
  // for the worker's recv at step 2 (answered to `caller_`, within `timeout`); whether the ps's send said
  // delivered.
  bool write_while_held(double timeout = 5) {
    auto ledger = std::make_shared<SendLedger>();
    // the worker caches the meta-data (later requests carry their landing), and the ps maps
    // the worker's pool block: the soft provider's first write there takes the stream, and
    // the block comes before that write's acknowledgement (its send is delivered once it has)
    TensorValue warm = floats(kLarge, 0.5f);
    warm.ticket = ledger->open("'w' at step 1");
    EXPECT_TRUE(ps_->send(1, kWorker, "w", warm).ok());
    EXPECT_TRUE(recv(1, "w").status.ok());
    EXPECT_TRUE(ledger->wait_all(60));
    worker_->recv(2, kPs, "w", timeout, caller_);
    while (ps_->pending().second < 1) std::this_thread::yield();
    worker_->recv(0, kWorker, "freeze", 0, gate_);
    gate_->wait_entered();
    sent_.ticket = ledger->open("'w' at step 2");
    std::shared_ptr<SendCompletion> completion = sent_.ticket->completion();
    EXPECT_TRUE(ps_->send(2, kWorker, "w", sent_).ok());  // written at once
    return completion->wait(60) && completion->status()->ok();
  }
  void expect_received() {
    RecvResult got = caller_->get();
    ASSERT_TRUE(got.status.ok()) << "the worker's recv: " << got.status.message();
    EXPECT_TRUE(same(got.value, sent_));
  }

  std::shared_ptr<Waiting> caller_ = std::make_shared<Waiting>();
  std::shared_ptr<Gate> gate_ = std::make_shared<Gate>();
  TensorValue sent_ = floats(kLarge, 2.0f);
};

TEST_P(ChannelRecoveryWrites, AWriteTheSenderSawFinishReachesItsRecvAcrossARecovery) {
  const bool delivered = write_while_held();
  // the ps's side broke and the ps sets the channel up again before the worker saw the write
  ps_->fail_channel(kWorker, Status(Code::kUnavailable, "the ps's queue pair gave up"), true);
  const ::testing::AssertionResult set_up = connect_tasks(*ps_, 7, *worker_, 8);
  gate_->release();
  ASSERT_TRUE(delivered);
  ASSERT_TRUE(set_up);
  expect_received();
}

TEST_P(ChannelRecoveryWrites, AWriteTheSenderSawFinishReachesItsRecvAsTheWorkerSeesTheBreakFirst) {
  const bool delivered = write_while_held();
  // the ps's side broke; the worker's thread goes on and finds its channel broken before it
  // took the write's completion, then the channel is set up again
  ps_->fail_channel(kWorker, Status(Code::kUnavailable, "the ps's queue pair gave up"), true);
  gate_->release();
  ASSERT_TRUE(delivered);
  ASSERT_TRUE(connect_tasks(*ps_, 7, *worker_, 8));
  expect_received();
}

// The worker's completion thread stalls (a callback it runs takes long) past the bound of the
// wait for its old queue pair's drain, with the write the ps saw finish, and the flush, in its
// queue: the write still reaches its recv. (The bound was checked before the thread took them:
// the recv was asked again of a ps that had nothing left to send, and timed out.)
TEST_P(ChannelRecoveryWrites, AWriteTheSenderSawFinishReachesItsRecvThoughTheWorkerStalledPastTheDrainBound) {
  const bool delivered = write_while_held(30);
  worker_->fail_channel(kPs, Status(Code::kUnavailable, "the worker's queue pair gave up"), true);
  // the stall: time passing, not a wait for anything
  std::this_thread::sleep_for(RdmaTensorRequest::kDrainBound + std::chrono::milliseconds(500));
  gate_->release();
  ASSERT_TRUE(delivered);
  ASSERT_TRUE(connect_tasks(*worker_, 8, *ps_, 7));
  expect_received();
}

// The completion thread read a META_DATA_RESPONSE (the tensor's meta-data changed) just
// before the channel broke, and handles it once the request waits for the old queue pair's
// drain: the request is still asked again on the next channel. (It was lost: the handling
// re-requested on the broken channel, the drain then passed it by, and nothing held it, so
// that neither the tensor nor its deadline ever reached its caller.)
TEST_P(ChannelRecoveryWrites, AMetaDataResponseHandledAsTheRequestAwaitsTheDrainLeavesItAskedAgain) {
  // the worker caches the meta-data of 'w': its next request carries a landing
  ASSERT_TRUE(ps_->send(1, kWorker, "w", floats(kLarge, 0.5f)).ok());
  ASSERT_TRUE(recv(1, "w").status.ok());
  const std::weak_ptr<PendingRecv> asked = worker_->recv(2, kPs, "w", 30, caller_);
  while (ps_->pending().second < 1) std::this_thread::yield();
  worker_->recv(0, kWorker, "freeze", 0, gate_);
  gate_->wait_entered();
  worker_->fail_channel(kPs, Status(Code::kUnavailable, "the worker's queue pair gave up"), true);
  // what the completion thread does with the message it took before the failure
  sent_ = floats(2 * kLarge, 3.0f);
  const RdmaMessage meta{MessageType::kMetaDataResponse, 0, "w", 2, 0, 0, sent_.meta, 0, ""};
  std::static_pointer_cast<RdmaTensorRequest>(asked.lock())->on_message(meta);
  gate_->release();
  ASSERT_TRUE(connect_tasks(*worker_, 8, *ps_, 7));
  ASSERT_TRUE(ps_->send(2, kWorker, "w", sent_).ok());
  expect_received();
}

// Write mode on one host only: over TCP the write is finished by the receiver's
// acknowledgement, which its held completion thread does not send; in validate mode the
// tensor's checksum comes first, in a message the held thread does not take; in read mode
// the receiver reads. The sequence cannot be staged there.
INSTANTIATE_TEST_SUITE_P(Modes, ChannelRecoveryWrites, ::testing::Values(Options{}), mode_name);
INSTANTIATE_TEST_SUITE_P(Ibverbs, ChannelRecoveryWrites,
                         ::testing::Values(Options{false, false, "auto", "ibverbs", "registration"}),
                         mode_name);

}  // namespace
}  // namespace tensorverbs
