// A step cleaned up stays cleaned up: a tensor of it that comes back afterwards (an answer
// whose channel broke before the receiver had it, a tensor that came for a recv whose caller
// gave up) is dropped, and its send fails naming the step, instead of bringing the step back
// into the table for ever (its send never settled, a flush never ended, its memory stayed).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "protocol/cleaned_steps.h"
#include "protocol/local_table.h"
#include "protocol/rdma_rendezvous.h"
#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

constexpr std::size_t kLarge = std::size_t{1} << 20;  // floats: answered by meta-data first

class StepsCleanedUp : public RendezvousPair {};

TEST_P(StepsCleanedUp, AnAnswerGivenBackAfterItsStepWasCleanedUpIsDroppedAndItsSendFails) {
  auto ledger = std::make_shared<SendLedger>();
  TensorValue sent = floats(kLarge, 1.0f);
  sent.ticket = ledger->open("'big'");
  std::shared_ptr<SendCompletion> completion = sent.ticket->completion();
  auto caller = std::make_shared<Waiting>();
  worker_->recv(40, kPs, "big", 60, caller);
  while (ps_->pending().second < 1) std::this_thread::yield();
  // the worker's adapter stops taking completions: the ps's answer waits there, unhandled
  auto gate = std::make_shared<Gate>();
  worker_->recv(0, kWorker, "freeze", 0, gate);
  gate->wait_entered();
  ASSERT_TRUE(ps_->send(40, kWorker, "big", std::move(sent)).ok());  // answered at once
  ps_->cleanup_step(40);  // the ps is done with the step while its tensor is on its way
  // the channel breaks before the worker had the tensor: the answer gives it back
  ps_->fail_channel(kWorker, Status(Code::kUnavailable, "the ps's queue pair gave up"), true);
  const std::pair<std::size_t, std::size_t> pending = ps_->pending();
  const std::size_t steps = ps_->table_steps();
  const std::optional<Status> status = completion->status();
  const bool flushed = ledger->wait_all(0);
  gate->release();
  EXPECT_EQ(pending, std::make_pair(std::size_t{0}, std::size_t{0}));
  EXPECT_EQ(steps, 0u) << "the cleaned-up step is back in the table";
  ASSERT_TRUE(status) << "the send never settles";
  EXPECT_EQ(status->code(), Code::kAborted);
  EXPECT_EQ(status->message(), "'big': step 40 was cleaned up before its receiver took it");
  EXPECT_TRUE(flushed);
}

TEST_P(StepsCleanedUp, ALateTensorOfAStepCleanedUpIsNotKept) {
  constexpr std::size_t kBytes = std::size_t{1} << 20;
  const std::uint64_t in_use = stat(*worker_, "pool_in_use_bytes");
  {
    auto allocated = worker_->allocate(kBytes);
    ASSERT_TRUE(allocated.ok()) << allocated.status().message();
    PoolBuffer buffer = allocated.take();
    std::memset(buffer->data(), 7, kBytes);
    TensorValue late{TensorMeta{kFloat, {static_cast<std::int64_t>(kBytes / 4)}, false, kBytes},
                     buffer->data(), buffer};
    worker_->cleanup_step(41);
    // it came for a recv whose caller gave up (or refused it) after the step was cleaned up
    worker_->keep_late(StepKey{41, RendezvousKey{kPs, kWorker, "late"}}, std::move(late));
  }
  EXPECT_EQ(stat(*worker_, "pool_in_use_bytes"), in_use) << "the late tensor is kept";
  // a recv of the step made afterwards is a new use of it: it asks the ps
  const TensorValue sent = floats(kBytes / 4, 3.0f);
  ASSERT_TRUE(ps_->send(41, kWorker, "late", sent).ok());
  RecvResult got = recv(41, "late");
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_TRUE(same(got.value, sent));
}

TEST_P(StepsCleanedUp, AStepCleanedUpIsInUseAgainOnceSentTo) {
  // a job may use a step id again after cleaning it up: what its new sends give back (their
  // answer's channel broke) stays in the table for the recvs of its new use
  ps_->cleanup_step(42);
  auto ledger = std::make_shared<SendLedger>();
  TensorValue sent = floats(kLarge, 5.0f);
  sent.ticket = ledger->open("'again'");
  std::shared_ptr<SendCompletion> completion = sent.ticket->completion();
  auto caller = std::make_shared<Waiting>();
  worker_->recv(42, kPs, "again", 60, caller);
  while (ps_->pending().second < 1) std::this_thread::yield();
  auto gate = std::make_shared<Gate>();
  worker_->recv(0, kWorker, "freeze", 0, gate);
  gate->wait_entered();
  ASSERT_TRUE(ps_->send(42, kWorker, "again", std::move(sent)).ok());
  ps_->fail_channel(kWorker, Status(Code::kUnavailable, "the ps's queue pair gave up"), true);
  const std::pair<std::size_t, std::size_t> pending = ps_->pending();
  const bool settled = completion->status().has_value();
  gate->release();
  EXPECT_EQ(pending, std::make_pair(std::size_t{1}, std::size_t{0})) << "the tensor was dropped";
  EXPECT_FALSE(settled) << completion->status()->message();
  ps_->cleanup_step(42);  // and cleaned up again, it is dropped
  ASSERT_TRUE(completion->status());
  EXPECT_EQ(completion->status()->message(),
            "'again': step 42 was cleaned up before its receiver took it");
}

// The record is bounded: a step is remembered for the next CleanedSteps::kKept clean-ups.
TEST(CleanedStepsRecord, RemembersTheStepsCleanedUpLately) {
  LocalTable table;
  const RendezvousKey key{kPs, kWorker, "w"};
  for (std::int64_t step = 0; step <= static_cast<std::int64_t>(CleanedSteps::kKept); ++step) {
    table.cleanup_step(step);
  }
  table.requeue(1, key, floats(4, 1.0f));  // cleaned up kKept clean-ups ago: dropped
  EXPECT_EQ(table.steps(), 0u);
  table.requeue(0, key, floats(4, 1.0f));  // forgotten: back in the table, as before
  EXPECT_EQ(table.steps(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Modes, StepsCleanedUp, all_modes(), mode_name);
INSTANTIATE_TEST_SUITE_P(Ibverbs, StepsCleanedUp, ibverbs_modes(), mode_name);

}  // namespace
}  // namespace tensorverbs
