// A recv whose channel broke under the transport still ends: given up (its deadline, its
// step's abort, its caller's cancel) as its channel is set up again, whichever comes first,
// the give-up or the recv asked again there; and one whose read into its caller's memory was
// cut short by the set-up.
#include <gtest/gtest.h>

#include <atomic>
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
  const int rounds = GetParam().provider == "ibverbs" ? 2 : 200;  // (the lane's guest is slow)
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

// Read mode: a recv into the caller's memory whose read was outstanding as its channel was
// set up again ends, with its tensor: it waits for its read's completion (nothing lands in
// its memory after that), though the channel it read on was replaced before that came, and
// is asked again on the new channel.
class ChannelRecoveryReads : public RendezvousPair {
 protected:
  static constexpr std::size_t kBig = std::size_t{16} << 20;  // 64 MiB: a read that takes a while

  // Starts the recv of `sent` as "big" at `step` into the caller's memory (answered to
  // `caller`), and once its read is under way stops the worker's adapter from taking
  // completions (the read's waits there): the gate that holds it; null if the read ended
  // first (the adapter goes on).
  std::shared_ptr<Gate> read_held(std::int64_t step, const TensorValue& sent,
                                  std::shared_ptr<RecvCallback> caller,
                                  std::shared_ptr<PendingRecv>* pending) {
    *pending = worker_->recv(step, kPs, "big", 60, std::move(caller),
                             zeros(kBig, {static_cast<std::int64_t>(kBig)}));
    EXPECT_TRUE(ps_->send(step, kWorker, "big", sent).ok());
    while ((*pending)->progress().find("requested") != std::string::npos) std::this_thread::yield();
    auto gate = std::make_shared<Gate>();
    worker_->recv(step, kWorker, "freeze", 0, gate);
    gate->wait_entered();
    if ((*pending)->progress().find("being read") != std::string::npos) return gate;
    gate->release();
    return nullptr;
  }
};

TEST_P(ChannelRecoveryReads, ARecvIntoItsDestinationWhoseReadWasCutShortByARecoveryEnds) {
  const TensorValue sent = floats(kBig, 1.0f);
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto caller = std::make_shared<Waiting>();
    std::shared_ptr<PendingRecv> pending;
    const std::shared_ptr<Gate> gate = read_held(30 + attempt, sent, caller, &pending);
    if (!gate) {  // the read ended first
      ASSERT_TRUE(caller->get().status.ok());
      continue;
    }
    // the ps's side broke and the ps sets the channel up again: the worker's is replaced
    ps_->fail_channel(kWorker, Status(Code::kUnavailable, "the ps's queue pair gave up"), true);
    const ::testing::AssertionResult set_up = connect_tasks(*ps_, 7, *worker_, 8);
    gate->release();
    ASSERT_TRUE(set_up);
    RecvResult got = caller->get();
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(same(got.value, sent));
    return;
  }
  FAIL() << "every read ended before the adapter could be held";
}

// Read mode: a recv into the caller's memory whose read was outstanding as its channel broke,
// and whose wait for the old queue pair's drain ran out, ends only once its read is seen to
// end: nothing lands in the caller's memory after it raised. (It raised at once.)
TEST_P(ChannelRecoveryReads, ARecvIntoItsDestinationWaitedOutDuringItsReadEndsOnceTheReadHas) {
  const TensorValue sent = floats(kBig, 1.0f);
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto caller = std::make_shared<Waiting>();
    auto answered = std::make_shared<std::atomic<bool>>(false);
    struct Marking : RecvCallback {
      Marking(std::shared_ptr<Waiting> to, std::shared_ptr<std::atomic<bool>> mark)
          : to_(std::move(to)), mark_(std::move(mark)) {}
      void complete(RecvResult result) override {
        mark_->store(true);
        to_->complete(std::move(result));
      }
      std::shared_ptr<Waiting> to_;
      std::shared_ptr<std::atomic<bool>> mark_;
    };
    std::shared_ptr<PendingRecv> pending;
    const std::shared_ptr<Gate> gate =
        read_held(40 + attempt, sent, std::make_shared<Marking>(caller, answered), &pending);
    if (!gate) {  // the read ended first
      caller->get();
      continue;
    }
    worker_->fail_channel(kPs, Status(Code::kUnavailable, "the worker's queue pair gave up"), true);
    // what the completion thread does once the drain's bound ran out
    std::static_pointer_cast<RdmaTensorRequest>(pending)->drained(true);
    const bool early = answered->load();
    gate->release();
    ASSERT_TRUE(connect_tasks(*worker_, 8, *ps_, 7));  // (a recv held is asked again there)
    RecvResult got = caller->get();
    EXPECT_FALSE(early) << "the recv ended before its read into the caller's memory: "
                        << got.status.message();
    return;
  }
  FAIL() << "every read ended before the adapter could be held";
}

// Read mode: META_DATA_RESPONSEs the completion thread took just before the channel failed
// for good, handled as the failure ends the channel's recvs one by one: their reads are
// never posted, and their recvs into the callers' memory still end. (They waited for the
// completions of reads never posted, past their deadlines, until the task stopped.)
TEST_P(ChannelRecoveryReads, ARecvWhoseReadWasNeverPostedOnAFailedChannelEnds) {
  constexpr std::size_t kCount = std::size_t{1} << 18;
  constexpr std::size_t kRecvs = 4;
  std::vector<std::shared_ptr<PendingRecv>> recvs;
  std::vector<std::shared_ptr<Waiting>> callers;
  for (std::size_t i = 0; i < kRecvs; ++i) {
    callers.push_back(std::make_shared<Waiting>());
    recvs.push_back(worker_->recv(1, kPs, "y" + std::to_string(i), 30, callers.back(),
                                  zeros(kCount, {static_cast<std::int64_t>(kCount)})));
  }
  // the last recv made, whose answer holds the thread that fails the channel (the failure
  // ends the channel's recvs from the last made, where the standard library's map keeps
  // its entries so)
  auto holding = std::make_shared<Gate>();
  worker_->recv(1, kPs, "g", 30, holding);
  while (ps_->pending().second < kRecvs + 1) std::this_thread::yield();
  auto frozen = std::make_shared<Gate>();
  worker_->recv(0, kWorker, "freeze", 0, frozen);
  frozen->wait_entered();
  std::thread failing(
      [&] { worker_->fail_channel(kPs, Status(Code::kUnavailable, "the ps is gone"), false); });
  holding->wait_entered();
  // what the completion thread does with the messages it took before the failure
  int staged = 0;
  for (std::size_t i = 0; i < kRecvs; ++i) {
    if (recvs[i]->progress().rfind("requested", 0) != 0) continue;  // ended already
    const RdmaMessage meta{MessageType::kMetaDataResponse, 0, "y" + std::to_string(i), 1, 0x1000, 1,
                           floats(kCount, 0.0f).meta, 0, ""};
    std::static_pointer_cast<RdmaTensorRequest>(recvs[i])->on_message(meta);
    ++staged;
  }
  holding->release();
  failing.join();
  frozen->release();
  ASSERT_GT(staged, 0) << "the failure ended every recv before the one holding it";
  for (std::size_t i = 0; i < kRecvs; ++i) {
    const RecvResult got = callers[i]->get();
    EXPECT_EQ(got.status.code(), Code::kUnavailable) << "y" << i << ": " << got.status.message();
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ChannelRecoveryEnds, all_modes(), mode_name);
// write mode only, as the other recovery tests in the lane
INSTANTIATE_TEST_SUITE_P(Ibverbs, ChannelRecoveryEnds,
                         ::testing::Values(Options{false, false, "auto", "ibverbs", "registration"}),
                         mode_name);
// read mode, on one host and over TCP (where the read's bytes stream in while it is outstanding)
INSTANTIATE_TEST_SUITE_P(Modes, ChannelRecoveryReads,
                         ::testing::Values(Options{true, false, "auto"}, Options{true, false, "no"}),
                         [](const ::testing::TestParamInfo<Options>& mode) {
                           return mode_name(mode) + (mode.param.same_host == "no" ? "_tcp" : "");
                         });
INSTANTIATE_TEST_SUITE_P(Ibverbs, ChannelRecoveryReads,
                         ::testing::Values(Options{true, false, "auto", "ibverbs", "registration"}),
                         mode_name);

}  // namespace
}  // namespace tensorverbs
