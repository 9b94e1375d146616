// SendCompletion: a send's ticket is settled once, by delivery, by its step's abort or
// clean-up, or as dropped; the ledger counts what is open (flush); and in every mode of the
// protocol a send is delivered exactly when its receiver has the tensor.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/send_completion.h"
#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

TEST(SendLedger, SettlesOnceAndCountsWhatIsOpen) {
  auto ledger = std::make_shared<SendLedger>();
  auto first = ledger->open("'a' to x at step 1");
  auto second = ledger->open("'b' to x at step 1");
  auto third = ledger->open("'c' to x at step 2");
  EXPECT_EQ(ledger->open_count(), 3u);
  EXPECT_EQ(ledger->describe_open(2), (std::vector<std::string>{"'a' to x at step 1", "'b' to x at step 1"}));
  EXPECT_FALSE(ledger->wait_all(0.01));

  second->deliver();
  second->fail(Status(Code::kAborted, "too late"));  // the first outcome stays
  EXPECT_TRUE(second->completion()->status()->ok());
  first->fail(Status(Code::kAborted, "step 1 was aborted"));
  EXPECT_EQ(first->completion()->status()->code(), Code::kAborted);
  EXPECT_EQ(first->completion()->status()->message(), "'a' to x at step 1: step 1 was aborted");
  EXPECT_EQ(ledger->describe_open(5), std::vector<std::string>{"'c' to x at step 2"});

  std::shared_ptr<SendCompletion> dropped = third->completion();
  third.reset();  // its value was freed before anybody took it
  ASSERT_TRUE(dropped->status());
  EXPECT_EQ(dropped->status()->code(), Code::kCancelled);
  EXPECT_TRUE(ledger->wait_all(0));
  EXPECT_EQ(ledger->open_count(), 0u);
}

TEST(SendLedger, ATicketOfPartsIsDeliveredOnceEachPartIsAndDroppedIfOneIsNot) {
  auto ledger = std::make_shared<SendLedger>();
  auto all = ledger->open("3 blocks 'kv/0'..'kv/2' to x at step 1", 3);
  all->deliver();
  all->deliver();
  EXPECT_FALSE(all->completion()->status());  // one block to go
  all->deliver();
  ASSERT_TRUE(all->completion()->status());
  EXPECT_TRUE(all->completion()->status()->ok());

  auto some = ledger->open("2 blocks 'kv/0'..'kv/1' to x at step 2", 2);
  std::shared_ptr<SendCompletion> dropped = some->completion();
  some->deliver();
  some.reset();  // the other block's value was freed before anybody took it
  ASSERT_TRUE(dropped->status());
  EXPECT_EQ(dropped->status()->code(), Code::kCancelled);

  auto failed = ledger->open("2 blocks 'kv/0'..'kv/1' to x at step 3", 2);
  failed->fail(Status(Code::kAborted, "step 3 was aborted"));  // one block's failure fails all
  failed->deliver();
  failed->deliver();
  EXPECT_EQ(failed->completion()->status()->code(), Code::kAborted);
  EXPECT_TRUE(ledger->wait_all(0));
}

TEST(SendLedger, WaitAllWakesWhenTheLastSettlesAndFailAllEndsEveryone) {
  auto ledger = std::make_shared<SendLedger>();
  std::vector<std::shared_ptr<SendTicket>> tickets;
  for (int i = 0; i < 100; ++i) tickets.push_back(ledger->open("t" + std::to_string(i)));
  std::thread deliverer([&] {
    for (auto& ticket : tickets) ticket->deliver();
  });
  EXPECT_TRUE(ledger->wait_all(60));
  deliverer.join();

  auto open = ledger->open("'w' to y at step 3");
  std::thread waiter([&] { EXPECT_TRUE(open->completion()->wait(60)); });
  ledger->fail_all(Status(Code::kCancelled, "the server stopped"));
  waiter.join();
  EXPECT_EQ(open->completion()->status()->message(), "'w' to y at step 3: the server stopped");
  EXPECT_TRUE(ledger->wait_all(0));
}

class SendCompletionPair : public RendezvousPair {};

TEST_P(SendCompletionPair, ASendIsDeliveredWhenItsReceiverHasIt) {
  auto ledger = std::make_shared<SendLedger>();
  for (std::size_t count : {std::size_t{4}, std::size_t{1} << 16, std::size_t{1} << 20}) {
    TensorValue sent = floats(count, 2.0f);
    sent.ticket = ledger->open("w" + std::to_string(count));
    std::shared_ptr<SendCompletion> completion = sent.ticket->completion();
    ASSERT_TRUE(ps_->send(1, kWorker, "w", sent).ok());
    sent.ticket.reset();
    EXPECT_FALSE(completion->wait(0.01)) << "delivered before it was asked for";
    RecvResult got = recv(1, "w");
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(same(got.value, sent));
    ASSERT_TRUE(completion->wait(60)) << count;
    EXPECT_TRUE(completion->status()->ok()) << completion->status()->message();
  }
  EXPECT_TRUE(ledger->wait_all(0));
}

TEST_P(SendCompletionPair, AReceiverThatStopsAsItsRecvReturnsStillTellsTheSenderItHasTheTensor) {
  // the receiver's acknowledgement of the message that brought a small tensor (or of the
  // write of a large one) must leave before its channels close: else the sender takes it as
  // never received (its flush waits, and a restarted receiver would get it a second time)
  auto ledger = std::make_shared<SendLedger>();
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    if (round > 0) {  // a fresh receiver each round (a new incarnation)
      std::vector<std::string> names = {"/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"};
      auto opened = open_task(kWorker, std::move(names), GetParam());
      ASSERT_TRUE(opened.ok()) << opened.status().message();
      worker_ = opened.take();
      ASSERT_TRUE(connect_tasks(*worker_, 8 + static_cast<std::uint64_t>(round), *ps_, 7));
    }
    // inline (a message), and written into the receiver's landing (then a RELEASE)
    TensorValue sent = floats(round % 2 ? std::size_t{1} << 18 : 4, static_cast<float>(round));
    sent.ticket = ledger->open("'w' at step " + std::to_string(round));
    std::shared_ptr<SendCompletion> completion = sent.ticket->completion();
    ASSERT_TRUE(ps_->send(round, kWorker, "w", sent).ok());
    sent.ticket.reset();
    RecvResult got = recv(round, "w");
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    worker_->stop();
    ASSERT_TRUE(completion->wait(10))
        << "the sender never learned that the receiver has it; the ps holds " << ps_->pending().first
        << " tensors and " << ps_->pending().second << " requests; its channel: "
        << ps_->describe_channels();
    EXPECT_TRUE(completion->status()->ok()) << completion->status()->message();
    worker_.reset();
  }
}

// The receiver's credit for a small tensor's message rides on a message it sends back, and
// the sender's channel fails (transient) while its completion thread handles that message:
// the tensor was delivered (the credit says the receiver took it), so the send is, and the
// sender keeps no copy to send again. (The failure gave it back to the sender's table: the
// send stayed open, to fail as never taken once its step was cleaned up.)
TEST_P(SendCompletionPair, ASendWhoseCreditCameAsItsChannelFailedIsDelivered) {
  if (GetParam().provider != "soft" || GetParam().same_host == "no") {
    GTEST_SKIP() << "staged on one host: messages published in shared memory as they are "
                    "posted, taken together";
  }
  auto ledger = std::make_shared<SendLedger>();
  auto got_t = std::make_shared<Waiting>();
  auto worker_held = std::make_shared<Gate>(), ps_held = std::make_shared<Gate>();
  struct Released {  // whatever fails, the threads go on (the tasks stop at the end)
    std::shared_ptr<Gate> a, b;
    ~Released() {
      a->release();
      b->release();
    }
  } released{worker_held, ps_held};
  worker_->recv(1, kPs, "t", 60, got_t);
  ASSERT_TRUE(eventually([&] { return ps_->pending().second == 1; }));
  ASSERT_TRUE(worker_->send(1, kPs, "freeze", floats(4, 5.0f)).ok());
  worker_->recv(0, kWorker, "hold", 0, worker_held);  // (ends at once: the thread holds)
  ASSERT_NO_FATAL_FAILURE(worker_held->wait_entered());
  // behind 't' comes the ps's request for 'freeze', which the worker, handling both in one
  // batch, answers with its credit for 't'
  TensorValue sent = floats(4, 1.0f);
  sent.ticket = ledger->open("'t' at step 1");
  std::shared_ptr<SendCompletion> completion = sent.ticket->completion();
  ASSERT_TRUE(ps_->send(1, kWorker, "t", sent).ok());
  sent.ticket.reset();
  const std::uint64_t before = ps_->counters().messages_sent.load();
  ps_->recv(1, kWorker, "freeze", 60, ps_held);
  ASSERT_TRUE(eventually([&] { return ps_->counters().messages_sent.load() > before; }));
  worker_held->release();
  ASSERT_NO_FATAL_FAILURE(ps_held->wait_entered());  // the ps's thread, in the message with the credit for 't'
  RecvResult got = got_t->get();
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  ASSERT_FALSE(completion->status()) << "not staged: the credit for 't' came on its own";
  ps_->fail_channel(kWorker, Status(Code::kUnavailable, "the ps's queue pair gave up"), true);
  ASSERT_TRUE(completion->status()) << "the failure took 't' back from its receiver";
  EXPECT_TRUE(completion->status()->ok()) << completion->status()->message();
  ps_held->release();
  EXPECT_EQ(ps_->pending().first, 0u) << "the ps kept a tensor its receiver has";
}

// The sender's write of a tensor finished, and its channel fails (transient) before its
// completion thread took the write's completion: the receiver has the tensor, so the send is
// delivered once that completion comes, and the sender keeps no copy to send again. (The
// failure gave it back to the sender's table at once; the completion then found nothing.)
TEST_P(SendCompletionPair, ASendWhoseWriteFinishedAsItsChannelFailedIsDelivered) {
  if (GetParam().provider != "soft" || GetParam().same_host == "no" || GetParam().read_mode ||
      GetParam().validate) {
    GTEST_SKIP() << "staged in write mode on one host: a write into the receiver's mapped pool "
                    "block is done as it is posted (the recv ends without a new channel)";
  }
  auto ledger = std::make_shared<SendLedger>();
  // the worker caches the meta-data (its next request carries its landing), and the ps maps
  // the worker's pool block
  TensorValue warm = floats(std::size_t{1} << 18, 0.5f);
  warm.ticket = ledger->open("'w' at step 1");
  ASSERT_TRUE(ps_->send(1, kWorker, "w", warm).ok());
  ASSERT_TRUE(recv(1, "w").status.ok());
  ASSERT_TRUE(ledger->wait_all(60));
  auto got = std::make_shared<Waiting>();
  worker_->recv(2, kPs, "w", 60, got);
  ASSERT_TRUE(eventually([&] { return ps_->pending().second == 1; }));
  auto held = std::make_shared<Gate>();
  struct Released {  // whatever fails, the thread goes on (the tasks stop at the end)
    std::shared_ptr<Gate> gate;
    ~Released() { gate->release(); }
  } released{held};
  ps_->recv(0, kPs, "hold", 0, held);  // (ends at once: the ps's completion thread holds)
  ASSERT_NO_FATAL_FAILURE(held->wait_entered());
  TensorValue sent = floats(std::size_t{1} << 18, 2.0f);
  sent.ticket = ledger->open("'w' at step 2");
  std::shared_ptr<SendCompletion> completion = sent.ticket->completion();
  ASSERT_TRUE(ps_->send(2, kWorker, "w", sent).ok());  // written at once
  sent.ticket.reset();
  ps_->fail_channel(kWorker, Status(Code::kUnavailable, "the ps's queue pair gave up"), true);
  held->release();
  RecvResult result = got->get();
  ASSERT_TRUE(result.status.ok()) << result.status.message();
  EXPECT_TRUE(same(result.value, sent));
  ASSERT_TRUE(completion->wait(60)) << "the ps took 'w' back from its receiver";
  EXPECT_TRUE(completion->status()->ok()) << completion->status()->message();
  EXPECT_EQ(ps_->pending().first, 0u) << "the ps kept a tensor its receiver has";
}

TEST_P(SendCompletionPair, AbortAndCleanupFailTheSendsNobodyTook) {
  auto ledger = std::make_shared<SendLedger>();
  TensorValue aborted = floats(8, 1.0f), cleaned = floats(8, 1.0f);
  aborted.ticket = ledger->open("'a'");
  cleaned.ticket = ledger->open("'c'");
  std::shared_ptr<SendCompletion> a = aborted.ticket->completion(), c = cleaned.ticket->completion();
  ASSERT_TRUE(ps_->send(5, kWorker, "a", std::move(aborted)).ok());
  ASSERT_TRUE(ps_->send(6, kWorker, "c", std::move(cleaned)).ok());
  ps_->abort_step(5, Status(Code::kAborted, "step 5 was aborted: bad batch"));
  ps_->cleanup_step(6);
  ASSERT_TRUE(a->status() && c->status());
  EXPECT_EQ(a->status()->message(), "'a': step 5 was aborted: bad batch");
  EXPECT_EQ(c->status()->code(), Code::kAborted);
  EXPECT_EQ(c->status()->message(), "'c': step 6 was cleaned up before its receiver took it");
}

TEST_P(SendCompletionPair, ALocalRecvDeliversThisTasksOwnSend) {
  auto ledger = std::make_shared<SendLedger>();
  TensorValue sent = floats(16, 0.5f);
  sent.ticket = ledger->open("'mine'");
  std::shared_ptr<SendCompletion> completion = sent.ticket->completion();
  ASSERT_TRUE(ps_->send(7, kPs, "mine", std::move(sent)).ok());
  auto waiting = std::make_shared<Waiting>();
  ps_->recv(7, kPs, "mine", 60, waiting);
  ASSERT_TRUE(waiting->get().status.ok());
  ASSERT_TRUE(completion->wait(60));
  EXPECT_TRUE(completion->status()->ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, SendCompletionPair, all_modes(), mode_name);
INSTANTIATE_TEST_SUITE_P(Ibverbs, SendCompletionPair, ibverbs_modes(), mode_name);
INSTANTIATE_TEST_SUITE_P(IbverbsType2, SendCompletionPair, type2_modes(), mode_name);

}  // namespace
}  // namespace tensorverbs
