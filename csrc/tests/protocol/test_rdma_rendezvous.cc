// Two tasks' RdmaRendezvous in one process, their channel set up directly (as the control
// plane would), over the soft provider: the protocol end to end, under the sanitizers.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/rdma_rendezvous.h"
#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

TEST_P(RendezvousPair, MovesSmallAndLargeTensorsInEitherOrder) {
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{3} << 20}) {
    const TensorValue sent = floats(count, 1.5f);
    ASSERT_TRUE(ps_->send(1, kWorker, "w", sent).ok());
    RecvResult got = recv(1, "w");
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(same(got.value, sent)) << count;
  }
  auto waiting = std::make_shared<Waiting>();  // the recv first
  worker_->recv(2, kPs, "late", 60, waiting);
  const TensorValue sent = floats(1 << 16, 3.0f);
  ASSERT_TRUE(ps_->send(2, kWorker, "late", sent).ok());
  RecvResult got = waiting->get();
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_TRUE(same(got.value, sent));
  EXPECT_EQ(ps_->pending(), std::make_pair(std::size_t{0}, std::size_t{0}));
}

// (fewer over ibverbs: the soft-RoCE lane's guest emulates its CPUs)
bool emulated(const Options& options) { return options.provider == "ibverbs"; }

TEST_P(RendezvousPair, ManyThreadsManyTensors) {
  constexpr int kThreads = 4;
  const int each = emulated(GetParam()) ? 50 : 200;
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < each; ++i) {
        const std::string name = "t" + std::to_string(t) + "/" + std::to_string(i);
        const TensorValue sent = floats(static_cast<std::size_t>(1 + (i % 3) * 3000), static_cast<float>(i));
        EXPECT_TRUE(ps_->send(3, kWorker, name, sent).ok());
        RecvResult got = recv(3, name);
        if (got.status.ok() && same(got.value, sent)) ++good;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(good.load(), kThreads * each);
}

TEST_P(RendezvousPair, ATimedOutRecvLeavesItsTensorForTheNext) {
  RecvResult timed_out = recv(4, "slow", 0.05);
  EXPECT_EQ(timed_out.status.code(), Code::kDeadlineExceeded);
  // the message says where the recv stood: the peer never answered
  EXPECT_NE(timed_out.status.message().find("has not answered"), std::string::npos)
      << timed_out.status.message();
  const TensorValue sent = floats(5000, 2.0f);
  ASSERT_TRUE(ps_->send(4, kWorker, "slow", sent).ok());
  RecvResult got = recv(4, "slow");
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_TRUE(same(got.value, sent));
}

TEST_P(RendezvousPair, ATensorForAGivenUpRecvGoesToTheNextOneAlreadyWaiting) {
  // the first recv's request is waiting at the ps when its caller gives up
  // (given up as its deadline would, once the ps has it: a deadline of its own could pass
  // before the request reached a ps slowed by a busy machine, and this wait would not end)
  auto first = std::make_shared<Waiting>();
  auto request = worker_->recv(9, kPs, "k", -1, first);
  while (ps_->pending().second == 0) std::this_thread::yield();
  // the ps's messages wait (its CANCEL and the next request among them)
  auto gate = std::make_shared<Gate>();
  ps_->recv(9, kWorker, "freeze", -1, gate);
  ASSERT_TRUE(worker_->send(9, kPs, "freeze", floats(1, 0)).ok());
  gate->wait_entered();
  request->give_up(Status(Code::kDeadlineExceeded, "its deadline passed"));
  EXPECT_EQ(first->get().status.code(), Code::kDeadlineExceeded);
  auto second = std::make_shared<Waiting>();
  // (timeouts that only guard against a hang: the soft-RoCE lane's emulated guest is slow)
  worker_->recv(9, kPs, "k", 30, second);
  // the send meets the first request, which the ps still holds: the tensor comes back
  // for a recv that gave up, while the second recv already waits for it
  const TensorValue sent = floats(100, 4.0f);
  ASSERT_TRUE(ps_->send(9, kWorker, "k", sent).ok());
  gate->release();
  RecvResult got = second->get();
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_TRUE(same(got.value, sent));
  // and the next send of the key goes to the next recv
  const TensorValue again = floats(100, 8.0f);
  ASSERT_TRUE(ps_->send(9, kWorker, "k", again).ok());
  RecvResult next = recv(9, "k", 30);
  ASSERT_TRUE(next.status.ok()) << next.status.message();
  EXPECT_TRUE(same(next.value, again));
}

// A parameter-server exchange, both ways at once: each step the ps offers the weights and
// asks for the gradients while the worker asks for the weights, then offers its gradients.
// Large tensors (writes) and small ones (inline) interleave, messages outrun the credits.
TEST_P(RendezvousPair, AParameterServerExchangeBothWaysAtOnce) {
  const std::vector<std::size_t> floats_of = {23232, 64, 307200, 192, 663552, 384, 884736, 256,
                                              589824, 256, 1179648, 512, 262144, 512, 51200, 100};
  const int steps = emulated(GetParam()) ? 2 : 6;
  auto exchange = [&](RdmaRendezvous& self, std::int32_t peer, bool ps) {
    for (int step = 0; step < steps; ++step) {
      const float out_seed = static_cast<float>(step * 100 + (ps ? 0 : 50));
      const float in_seed = static_cast<float>(step * 100 + (ps ? 50 : 0));
      std::vector<std::shared_ptr<Waiting>> waiting;
      auto offer = [&] {
        for (std::size_t i = 0; i < floats_of.size(); ++i) {
          ASSERT_TRUE(self.send(step, peer, "t" + std::to_string(i),
                                floats(floats_of[i], out_seed + static_cast<float>(i))).ok());
        }
      };
      if (ps) offer();
      for (std::size_t i = 0; i < floats_of.size(); ++i) {
        waiting.push_back(std::make_shared<Waiting>());
        self.recv(step, peer, "t" + std::to_string(i), 20, waiting.back());
      }
      for (std::size_t i = 0; i < floats_of.size(); ++i) {
        RecvResult got = waiting[i]->get();
        ASSERT_TRUE(got.status.ok()) << (ps ? "ps: " : "worker: ") << got.status.message()
                                     << "\nworker: " << worker_->describe_channels()
                                     << "ps: " << ps_->describe_channels();
        ASSERT_TRUE(same(got.value, floats(floats_of[i], in_seed + static_cast<float>(i))));
      }
      if (!ps) offer();
    }
  };
  std::thread worker([&] { exchange(*worker_, kPs, false); });
  exchange(*ps_, kWorker, true);
  worker.join();
}

TEST_P(RendezvousPair, AbortFailsPendingRecvsOnBothSides) {
  auto waiting = std::make_shared<Waiting>();
  worker_->recv(5, kPs, "never", 60, waiting);
  ps_->abort_step(5, Status(Code::kAborted, "the ps gave up"));
  RecvResult got = waiting->get();
  EXPECT_EQ(got.status.code(), Code::kAborted);
  EXPECT_NE(got.status.message().find("the ps gave up"), std::string::npos);
  worker_->abort_step(6, Status(Code::kAborted, "stop"));
  EXPECT_EQ(recv(6, "x").status.code(), Code::kAborted);
}

TEST_P(RendezvousPair, AFailedChannelFailsItsRecvsAndKeepsTheTensors) {
  auto waiting = std::make_shared<Waiting>();
  worker_->recv(7, kPs, "gone", 60, waiting);
  while (ps_->pending().second == 0) std::this_thread::yield();  // the request is in
  worker_->fail_channel(kPs, Status(Code::kUnavailable, "the ps is unavailable"));
  EXPECT_EQ(waiting->get().status.code(), Code::kUnavailable);
  ASSERT_TRUE(ps_->send(7, kWorker, "kept", floats(10, 0)).ok());
  EXPECT_EQ(ps_->pending().first, 1u);  // nobody took it
}

TEST_P(RendezvousPair, StopCancelsPendingRecvs) {
  auto waiting = std::make_shared<Waiting>();
  worker_->recv(8, kPs, "never", -1, waiting);
  worker_->stop();
  EXPECT_EQ(waiting->get().status.code(), Code::kCancelled);
}

INSTANTIATE_TEST_SUITE_P(Modes, RendezvousPair, all_modes(), mode_name);
TEST(RdmaRendezvousOpen, AProviderThatCannotBeOpenedFailsTheOpenAndNothingElse) {
  // the half-made task is stopped as it goes: it has no completion thread nor pool yet
  Options options;
  options.provider = "no-such-provider";
  auto opened = open_task(kPs, {"/job:ps/replica:0/task:0"}, options);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("no-such-provider"), std::string::npos)
      << opened.status().message();
}

INSTANTIATE_TEST_SUITE_P(Ibverbs, RendezvousPair, ibverbs_modes(), mode_name);
INSTANTIATE_TEST_SUITE_P(IbverbsType2, RendezvousPair, type2_modes(), mode_name);

}  // namespace
}  // namespace tensorverbs
