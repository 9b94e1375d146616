// Whatever is thrown in a task's completion thread (here: by a recv's callback, which that
// thread runs) ends neither the thread nor the process: it fails the channel whose
// completion was being handled, whose recvs then fail naming the peer, and the task's
// other channels carry on.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

constexpr std::int32_t kWorker0 = 1, kWorker1 = 2;
const char* const kWorker0Name = "/job:worker/replica:0/task:0";

class Throwing : public RecvCallback {
 public:
  void complete(RecvResult) override {
    called_.set_value();
    throw std::runtime_error("the caller's callback broke");
  }
  // Whether complete() was called (and threw) within 60 s.
  bool called() {
    return called_.get_future().wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  }

 private:
  std::promise<void> called_;
};

// A ps with channels to two workers.
class CompletionThreadGuard : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::vector<std::string> names = {"/job:ps/replica:0/task:0", kWorker0Name,
                                            "/job:worker/replica:0/task:1"};
    for (std::int32_t task : {kPs, kWorker0, kWorker1}) {
      auto opened = open_task(task, names);
      ASSERT_TRUE(opened.ok()) << opened.status().message();
      tasks_.push_back(opened.take());
    }
    ASSERT_TRUE(connect_tasks(ps(), 1, worker(kWorker0), 2));
    ASSERT_TRUE(connect_tasks(ps(), 1, worker(kWorker1), 3));
  }

  void TearDown() override {
    for (auto& task : tasks_) task->stop();
  }

  RdmaRendezvous& ps() { return *tasks_[kPs]; }
  RdmaRendezvous& worker(std::int32_t id) { return *tasks_[static_cast<std::size_t>(id)]; }

  // `name` at `step` from worker 1 to the ps, received there: whether it came whole.
  bool moves_from_worker1(std::int64_t step, const std::string& name) {
    const TensorValue sent = floats(std::size_t{1} << 20, 2.0f);
    EXPECT_TRUE(worker(kWorker1).send(step, kPs, name, sent).ok());
    auto waiting = std::make_shared<Waiting>();
    ps().recv(step, kWorker1, name, 60, waiting);
    RecvResult got = waiting->get();
    EXPECT_TRUE(got.status.ok()) << got.status.message();
    return got.status.ok() && same(got.value, sent);
  }

  std::vector<std::unique_ptr<RdmaRendezvous>> tasks_;
};

TEST_F(CompletionThreadGuard, AThrowFailsTheChannelItCameFromAndNothingElse) {
  ps().recv(1, kWorker0, "thrown", 60, std::make_shared<Throwing>());
  auto pending = std::make_shared<Waiting>();
  ps().recv(1, kWorker0, "pending", 60, pending);
  ASSERT_TRUE(worker(kWorker0).send(1, kPs, "thrown", floats(1000, 1.0f)).ok());

  const RecvResult failed = pending->get();
  EXPECT_EQ(failed.status.code(), Code::kInternal);
  EXPECT_NE(failed.status.message().find(kWorker0Name), std::string::npos)
      << failed.status.message();
  EXPECT_NE(failed.status.message().find("the caller's callback broke"), std::string::npos)
      << failed.status.message();
  EXPECT_FALSE(ps().ready(kWorker0));
  EXPECT_TRUE(moves_from_worker1(2, "after"));
}

TEST_F(CompletionThreadGuard, AThrowAsARecvTimesOutEndsNothing) {
  auto throwing = std::make_shared<Throwing>();
  ps().recv(3, kWorker0, "never sent", 0.01, throwing);
  ASSERT_TRUE(throwing->called());  // by the completion thread, as the deadline passed
  EXPECT_TRUE(moves_from_worker1(3, "after"));
  const TensorValue sent = floats(10, 4.0f);
  ASSERT_TRUE(worker(kWorker0).send(4, kPs, "still", sent).ok());
  auto waiting = std::make_shared<Waiting>();
  ps().recv(4, kWorker0, "still", 60, waiting);
  const RecvResult got = waiting->get();
  ASSERT_TRUE(got.status.ok()) << got.status.message();
  EXPECT_TRUE(same(got.value, sent));
}

}  // namespace
}  // namespace tensorverbs
