// Two tasks' RdmaRendezvous in one process, their channel set up directly (as the control
// plane would), over the soft provider: the protocol end to end, under the sanitizers.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "protocol/rdma_rendezvous.h"

namespace tensorverbs {
namespace {

constexpr std::int32_t kPs = 0, kWorker = 1;
constexpr std::int32_t kFloat = 1;

class Waiting : public RecvCallback {
 public:
  void complete(RecvResult result) override { promise_.set_value(std::move(result)); }
  RecvResult get() {
    auto future = promise_.get_future();
    if (future.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      ADD_FAILURE() << "a recv did not end within 60 s";
      return RecvResult{Status(Code::kDeadlineExceeded, "test timeout"), {}};
    }
    return future.get();
  }

 private:
  std::promise<RecvResult> promise_;
};

TensorValue floats(std::size_t count, float first) {
  auto data = std::make_shared<std::vector<float>>(count);
  std::iota(data->begin(), data->end(), first);
  return TensorValue{TensorMeta{kFloat, {static_cast<std::int64_t>(count)}, false, count * 4},
                     reinterpret_cast<const std::uint8_t*>(data->data()), data};
}

bool same(const TensorValue& got, const TensorValue& want) {
  // an empty tensor may have no data at all (memcmp must not see a null pointer)
  return got.meta == want.meta &&
         (want.size() == 0 || std::memcmp(got.data, want.data, want.size()) == 0);
}

struct Options {
  bool read_mode = false;
  bool validate = false;
  std::string same_host = "auto";
};

class RendezvousPair : public ::testing::TestWithParam<Options> {
 protected:
  void SetUp() override {
    for (std::int32_t task : {kPs, kWorker}) {
      RendezvousSettings settings;
      settings.task = task;
      settings.task_names = {"/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"};
      settings.verbs.provider = "soft";
      settings.verbs.same_host = GetParam().same_host;
      settings.listen_host = "127.0.0.1";
      settings.read_mode = GetParam().read_mode;
      settings.validate = GetParam().validate;
      settings.slots = 4;  // few slots: credits run out and come back
      settings.pool_block = 8 << 20;
      if (pool_limit_) settings.pool_limit = pool_limit_;
      auto opened = RdmaRendezvous::open(settings);
      ASSERT_TRUE(opened.ok()) << opened.status().message();
      (task == kPs ? ps_ : worker_) = opened.take();
    }
    auto mine = worker_->channel(kPs, 7, {});
    ASSERT_TRUE(mine.ok()) << mine.status().message();
    auto theirs = ps_->channel(kWorker, 8, mine.value());
    ASSERT_TRUE(theirs.ok()) << theirs.status().message();
    ASSERT_TRUE(ps_->connect(kWorker, 8, mine.value()).ok());
    ASSERT_TRUE(worker_->connect(kPs, 7, theirs.value()).ok());
  }

  void TearDown() override {
    if (worker_) worker_->stop();
    if (ps_) ps_->stop();
  }

  RecvResult recv(std::int64_t step, const std::string& name, double timeout = 60,
                  std::optional<RecvDestination> destination = std::nullopt) {
    auto waiting = std::make_shared<Waiting>();
    worker_->recv(step, kPs, name, timeout, waiting, std::move(destination));
    return waiting->get();
  }

  std::unique_ptr<RdmaRendezvous> ps_, worker_;
  std::size_t pool_limit_ = 0;  // 0: the default
};

// Tasks whose pools hold 16 MiB at most.
class SmallPoolPair : public RendezvousPair {
 protected:
  void SetUp() override {
    pool_limit_ = 16 << 20;
    RendezvousPair::SetUp();
  }
};

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

TEST_P(RendezvousPair, ManyThreadsManyTensors) {
  constexpr int kThreads = 4, kEach = 200;
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const std::string name = "t" + std::to_string(t) + "/" + std::to_string(i);
        const TensorValue sent = floats(static_cast<std::size_t>(1 + (i % 3) * 3000), static_cast<float>(i));
        EXPECT_TRUE(ps_->send(3, kWorker, name, sent).ok());
        RecvResult got = recv(3, name);
        if (got.status.ok() && same(got.value, sent)) ++good;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(good.load(), kThreads * kEach);
}

// The caller's memory for `count` floats, zeroed.
RecvDestination zeros(std::size_t count, std::vector<std::int64_t> shape) {
  auto memory = std::make_shared<std::vector<float>>(count, 0.0f);
  return RecvDestination{kFloat, std::move(shape), reinterpret_cast<std::uint8_t*>(memory->data()),
                         count * 4, memory};
}

std::uint64_t landing_registrations(const RdmaRendezvous& rendezvous) {
  for (const auto& [name, value] : rendezvous.stats()) {
    if (name == "landing_registrations") return value;
  }
  ADD_FAILURE() << "no landing_registrations counter";
  return 0;
}

bool all_zero(const RecvDestination& destination) {
  const auto* data = destination.data;
  return std::all_of(data, data + destination.nbytes, [](std::uint8_t b) { return b == 0; });
}

TEST_P(RendezvousPair, ATensorThatFitsLandsInTheDestination) {
  // inline, through the pool below kRegisterFrom, registered from it on (over TCP)
  for (std::size_t count :
       {std::size_t{100}, std::size_t{5000}, kRegisterFrom / 4, std::size_t{3} << 20}) {
    const auto shape = std::vector<std::int64_t>{static_cast<std::int64_t>(count)};
    const RecvDestination destination = zeros(count, shape);
    const TensorValue sent = floats(count, 0.5f);
    const std::uint64_t registrations = landing_registrations(*worker_);
    ASSERT_TRUE(ps_->send(9, kWorker, "into", sent).ok());
    RecvResult got = recv(9, "into", 60, destination);
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(same(got.value, sent)) << count;
    // on one host the soft provider writes the pool's shared memory directly: no registration
    const bool registered = count * 4 >= kRegisterFrom && GetParam().same_host == "no";
    const bool lands = count * 4 <= kMaxTailBytes || registered;  // else the caller copies
    EXPECT_EQ(got.value.data == destination.data, lands) << count;
    EXPECT_EQ(got.value.borrowed, lands) << count;
    EXPECT_EQ(landing_registrations(*worker_) - registrations, registered ? 1u : 0u) << count;
  }
}

TEST_P(RendezvousPair, ATensorThatFitsADestinationInThePoolLandsThereAtAnySize) {
  // memory of the pool (Python's server.allocate): the peer reaches it as it is, so the
  // tensor lands there without a registration and without the caller's copy, in every mode
  for (std::size_t count : {std::size_t{5000}, std::size_t{3} << 20}) {
    auto buffer = worker_->allocate(count * 4);
    ASSERT_TRUE(buffer.ok()) << buffer.status().message();
    PoolBuffer memory = buffer.take();
    std::memset(memory->data(), 0, count * 4);
    const RecvDestination destination{kFloat, {static_cast<std::int64_t>(count)}, memory->data(),
                                      count * 4, memory};
    const TensorValue sent = floats(count, 3.0f);
    const std::uint64_t registrations = landing_registrations(*worker_);
    ASSERT_TRUE(ps_->send(13, kWorker, "pooled", sent).ok());
    RecvResult got = recv(13, "pooled", 60, destination);
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(same(got.value, sent)) << count;
    EXPECT_EQ(got.value.data, destination.data) << count;
    EXPECT_TRUE(got.value.borrowed) << count;
    EXPECT_EQ(landing_registrations(*worker_), registrations) << count;
  }
}

TEST_P(RendezvousPair, AnotherTensorLandsInThePoolAndLeavesTheDestinationAlone) {
  for (std::size_t count : {std::size_t{100}, std::size_t{3} << 20}) {
    // as expected first (the meta-data is cached), then a longer one of the same name
    const auto shape = std::vector<std::int64_t>{static_cast<std::int64_t>(count)};
    ASSERT_TRUE(ps_->send(10, kWorker, "other", floats(count, 1.0f)).ok());
    ASSERT_TRUE(recv(10, "other", 60, zeros(count, shape)).status.ok());
    const RecvDestination destination = zeros(count, shape);
    const TensorValue sent = floats(count + 1, 2.0f);
    ASSERT_TRUE(ps_->send(11, kWorker, "other", sent).ok());
    RecvResult got = recv(11, "other", 60, destination);
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(same(got.value, sent)) << count;
    EXPECT_NE(got.value.data, destination.data);
    EXPECT_FALSE(got.value.borrowed);
    EXPECT_TRUE(all_zero(destination)) << count;
  }
}

TEST_P(RendezvousPair, ATensorKeptForTheNextRecvIsACopyOfABorrowedOne) {
  const std::size_t count = 100;  // inline: lands in the destination in every mode
  const RecvDestination destination = zeros(count, {static_cast<std::int64_t>(count)});
  const TensorValue sent = floats(count, 4.0f);
  ASSERT_TRUE(ps_->send(12, kWorker, "again", sent).ok());
  RecvResult got = recv(12, "again", 60, destination);
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  ASSERT_TRUE(got.value.borrowed);
  worker_->keep_late(StepKey{12, RendezvousKey{kPs, kWorker, "again"}}, std::move(got.value));
  std::memset(destination.data, 0, destination.nbytes);  // the first caller reuses its memory
  RecvResult next = recv(12, "again");
  ASSERT_TRUE(next.status.ok()) << next.status.message();
  EXPECT_TRUE(same(next.value, sent));
  EXPECT_NE(next.value.data, destination.data);
}

TEST_P(SmallPoolPair, ABorrowedTensorKeptWhileThePoolIsFullIsNotLost) {
  const std::size_t count = 100;  // inline: lands in the destination in every mode
  const RecvDestination destination = zeros(count, {static_cast<std::int64_t>(count)});
  const TensorValue sent = floats(count, 5.0f);
  ASSERT_TRUE(ps_->send(14, kWorker, "full", sent).ok());
  RecvResult got = recv(14, "full", 60, destination);
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  ASSERT_TRUE(got.value.borrowed);
  std::vector<PoolBuffer> hog;  // every byte of the worker's pool
  for (const std::size_t size : {std::size_t{1} << 20, std::size_t{1} << 14, std::size_t{64}}) {
    for (auto taken = worker_->allocate(size); taken.ok(); taken = worker_->allocate(size)) {
      hog.push_back(taken.take());
    }
  }
  worker_->keep_late(StepKey{14, RendezvousKey{kPs, kWorker, "full"}}, std::move(got.value));
  std::memset(destination.data, 0, destination.nbytes);  // the first caller reuses its memory
  hog.clear();
  RecvResult next = recv(14, "full", 5);
  ASSERT_TRUE(next.status.ok()) << next.status.message();
  EXPECT_TRUE(same(next.value, sent));
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

// Holds the thread that completes it until released (a recv's answer arrives in the
// adapter's thread: this freezes the task's message handling).
class Gate : public RecvCallback {
 public:
  void complete(RecvResult) override {
    entered_.set_value();
    released_.wait();
  }
  void wait_entered() { ASSERT_EQ(entered_future_.wait_for(std::chrono::seconds(60)), std::future_status::ready); }
  void release() { release_.set_value(); }

 private:
  std::promise<void> entered_, release_;
  std::future<void> entered_future_ = entered_.get_future();
  std::shared_future<void> released_ = release_.get_future().share();
};

TEST_P(RendezvousPair, ATensorForAGivenUpRecvGoesToTheNextOneAlreadyWaiting) {
  // the first recv's request is waiting at the ps when its caller gives up
  auto first = std::make_shared<Waiting>();
  worker_->recv(9, kPs, "k", 0.3, first);
  while (ps_->pending().second == 0) std::this_thread::yield();
  // the ps's messages wait (its CANCEL and the next request among them)
  auto gate = std::make_shared<Gate>();
  ps_->recv(9, kWorker, "freeze", -1, gate);
  ASSERT_TRUE(worker_->send(9, kPs, "freeze", floats(1, 0)).ok());
  gate->wait_entered();
  EXPECT_EQ(first->get().status.code(), Code::kDeadlineExceeded);
  auto second = std::make_shared<Waiting>();
  worker_->recv(9, kPs, "k", 5, second);
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
  RecvResult next = recv(9, "k", 5);
  ASSERT_TRUE(next.status.ok()) << next.status.message();
  EXPECT_TRUE(same(next.value, again));
}

// A parameter-server exchange, both ways at once: each step the ps offers the weights and
// asks for the gradients while the worker asks for the weights, then offers its gradients.
// Large tensors (writes) and small ones (inline) interleave, messages outrun the credits.
TEST_P(RendezvousPair, AParameterServerExchangeBothWaysAtOnce) {
  const std::vector<std::size_t> floats_of = {23232, 64, 307200, 192, 663552, 384, 884736, 256,
                                              589824, 256, 1179648, 512, 262144, 512, 51200, 100};
  constexpr int kSteps = 6;
  auto exchange = [&](RdmaRendezvous& self, std::int32_t peer, bool ps) {
    for (int step = 0; step < kSteps; ++step) {
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
        ASSERT_TRUE(got.status.ok()) << (ps ? "ps: " : "worker: ") << got.status.message();
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

std::string mode_name(const ::testing::TestParamInfo<Options>& mode) {
  if (mode.param.read_mode) return "read";
  if (mode.param.validate) return "validate";
  return mode.param.same_host == "no" ? "tcp" : "write";
}

INSTANTIATE_TEST_SUITE_P(Modes, RendezvousPair,
                         ::testing::Values(Options{}, Options{true, false, "auto"},
                                           Options{false, true, "auto"}, Options{false, false, "no"}),
                         mode_name);
INSTANTIATE_TEST_SUITE_P(Modes, SmallPoolPair,
                         ::testing::Values(Options{}, Options{false, false, "no"}), mode_name);

}  // namespace
}  // namespace tensorverbs
