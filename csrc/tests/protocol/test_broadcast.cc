// RdmaRendezvous::broadcast: one tensor offered to several receivers (here the peer and the
// task itself) has its bytes registered once, or staged into the pool once when small (the
// task's own recv gets its tensor as it is); each receiver gets the same bytes and each
// send's ticket is delivered.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "protocol/send_completion.h"
#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using rendezvous_testing::floats;
using rendezvous_testing::kPs;
using rendezvous_testing::kWorker;
using rendezvous_testing::RendezvousPair;
using rendezvous_testing::same;
using rendezvous_testing::Waiting;

std::uint64_t stat(const RdmaRendezvous& task, const std::string& name) {
  for (const auto& [key, value] : task.stats()) {
    if (key == name) return value;
  }
  ADD_FAILURE() << "no stat " << name;
  return 0;
}

class BroadcastPair : public RendezvousPair {
 protected:
  // `sent` broadcast to the worker and the ps itself at `step`: what each received.
  std::vector<RecvResult> broadcast(std::int64_t step, const TensorValue& sent,
                                    std::vector<std::shared_ptr<SendCompletion>>* completions) {
    auto ledger = std::make_shared<SendLedger>();
    std::vector<std::shared_ptr<SendTicket>> tickets = {ledger->open("to the worker"),
                                                        ledger->open("to itself")};
    for (const auto& ticket : tickets) completions->push_back(ticket->completion());
    std::vector<Status> done = ps_->broadcast(step, {kWorker, kPs}, "w", sent, std::move(tickets));
    EXPECT_EQ(done.size(), 2u);
    for (const Status& status : done) EXPECT_TRUE(status.ok()) << status.message();
    std::vector<RecvResult> got;
    got.push_back(recv(step, "w"));
    auto local = std::make_shared<Waiting>();
    ps_->recv(step, kPs, "w", 60, local);
    got.push_back(local->get());
    return got;
  }
};

TEST_P(BroadcastPair, ALargeTensorIsRegisteredOnceForEveryReceiver) {
  const TensorValue sent = floats(std::size_t{1} << 18, 3.0f);  // 1 MiB: registered, not staged
  const std::uint64_t registrations = stat(*ps_, "source_registrations");
  std::vector<std::shared_ptr<SendCompletion>> completions;
  for (const RecvResult& got : broadcast(1, sent, &completions)) {
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(same(got.value, sent));
  }
  EXPECT_EQ(stat(*ps_, "source_registrations"), registrations + 1);
  for (const auto& completion : completions) {
    ASSERT_TRUE(completion->wait(60)) << completion->what();
    EXPECT_TRUE(completion->status()->ok()) << completion->status()->message();
  }
}

TEST_P(BroadcastPair, ASmallTensorIsStagedOnceForEveryReceiver) {
  const TensorValue sent = floats(4096, 7.0f);  // 16 KiB: staged into the pool
  const std::uint64_t staged = stat(*ps_, "staging_copies");
  std::vector<std::shared_ptr<SendCompletion>> completions;
  const std::vector<RecvResult> got = broadcast(2, sent, &completions);
  for (const RecvResult& each : got) {
    ASSERT_TRUE(each.status.ok()) << each.status.message();
    EXPECT_TRUE(same(each.value, sent));
  }
  EXPECT_EQ(got[1].value.data, sent.data) << "the task's own recv got the staged copy, not its tensor";
  EXPECT_EQ(stat(*ps_, "staging_copies"), staged + 1);
  for (const auto& completion : completions) ASSERT_TRUE(completion->wait(60));
}

TEST_P(BroadcastPair, AnAbortedStepFailsEverySend) {
  ps_->abort_step(3, Status(Code::kAborted, "step 3 went wrong"));
  auto ledger = std::make_shared<SendLedger>();
  std::vector<Status> done = ps_->broadcast(3, {kWorker, kPs}, "w", floats(8, 1.0f),
                                            {ledger->open("a"), ledger->open("b")});
  ASSERT_EQ(done.size(), 2u);
  for (const Status& status : done) EXPECT_EQ(status.code(), Code::kAborted) << status.message();
  EXPECT_TRUE(ledger->wait_all(10));  // the tickets were dropped: settled as such
}

INSTANTIATE_TEST_SUITE_P(Modes, BroadcastPair, rendezvous_testing::all_modes(), rendezvous_testing::mode_name);
INSTANTIATE_TEST_SUITE_P(Ibverbs, BroadcastPair, rendezvous_testing::ibverbs_modes(),
                         rendezvous_testing::mode_name);

}  // namespace
}  // namespace tensorverbs
