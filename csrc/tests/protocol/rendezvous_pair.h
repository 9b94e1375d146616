// RendezvousPair: two tasks' RdmaRendezvous in one process, their channel set up directly
// (as the control plane would), over the soft provider; and what its tests share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "protocol/rdma_rendezvous.h"

namespace tensorverbs::rendezvous_testing {

inline constexpr std::int32_t kPs = 0, kWorker = 1;
inline constexpr std::int32_t kFloat = 1;

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

inline TensorValue floats(std::size_t count, float first) {
  auto data = std::make_shared<std::vector<float>>(count);
  std::iota(data->begin(), data->end(), first);
  return TensorValue{TensorMeta{kFloat, {static_cast<std::int64_t>(count)}, false, count * 4},
                     reinterpret_cast<const std::uint8_t*>(data->data()), data};
}

inline bool same(const TensorValue& got, const TensorValue& want) {
  // an empty tensor may have no data at all (memcmp must not see a null pointer)
  return got.meta == want.meta &&
         (want.size() == 0 || std::memcmp(got.data, want.data, want.size()) == 0);
}

struct Options {
  bool read_mode = false;
  bool validate = false;
  std::string same_host = "auto";
};

// One of `names` (task `task`) over the soft provider, as these tests open tasks: few
// message slots (credits run out and come back), small pool blocks.
inline Result<std::unique_ptr<RdmaRendezvous>> open_task(std::int32_t task,
                                                        std::vector<std::string> names,
                                                        const Options& options = {},
                                                        std::size_t pool_limit = 0) {
  RendezvousSettings settings;
  settings.task = task;
  settings.task_names = std::move(names);
  settings.verbs.provider = "soft";
  settings.verbs.same_host = options.same_host;
  settings.listen_host = "127.0.0.1";
  settings.read_mode = options.read_mode;
  settings.validate = options.validate;
  settings.slots = 4;
  settings.pool_block = 8 << 20;
  if (pool_limit) settings.pool_limit = pool_limit;
  return RdmaRendezvous::open(settings);
}

// The channel between `a` and `b` set up as the control plane does it: `a` describes its
// side, `b` connects to that and describes its own, `a` connects to that. `a_incarnation`
// is a's as b knows it, `b_incarnation` b's as a knows it.
inline ::testing::AssertionResult connect_tasks(RdmaRendezvous& a, std::uint64_t a_incarnation,
                                               RdmaRendezvous& b, std::uint64_t b_incarnation) {
  auto mine = a.channel(b.task(), b_incarnation, {});
  if (!mine.ok()) return ::testing::AssertionFailure() << mine.status().message();
  auto theirs = b.channel(a.task(), a_incarnation, mine.value());
  if (!theirs.ok()) return ::testing::AssertionFailure() << theirs.status().message();
  Status status = b.connect(a.task(), a_incarnation, mine.value());
  if (status.ok()) status = a.connect(b.task(), b_incarnation, theirs.value());
  if (!status.ok()) return ::testing::AssertionFailure() << status.message();
  return ::testing::AssertionSuccess();
}

class RendezvousPair : public ::testing::TestWithParam<Options> {
 protected:
  void SetUp() override {
    for (std::int32_t task : {kPs, kWorker}) {
      auto opened = open_task(task, {"/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"},
                              GetParam(), pool_limit_);
      ASSERT_TRUE(opened.ok()) << opened.status().message();
      (task == kPs ? ps_ : worker_) = opened.take();
    }
    ASSERT_TRUE(connect_tasks(*worker_, 8, *ps_, 7));
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

  // `sent`, small enough to come inline (so it lands in `destination` in every mode),
  // received as `name` of `step` into `destination`: its bytes are the caller's.
  TensorValue received_borrowed(std::int64_t step, const std::string& name, const TensorValue& sent,
                                const RecvDestination& destination) {
    EXPECT_TRUE(ps_->send(step, kWorker, name, sent).ok());
    RecvResult got = recv(step, name, 60, destination);
    EXPECT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(got.value.borrowed);
    return std::move(got.value);
  }

  // `value` kept for the next recv of `name` at `step` as if its caller gave up on it; that
  // caller then reuses `destination`.
  void keep_and_reuse(std::int64_t step, const std::string& name, TensorValue value,
                      const RecvDestination& destination) {
    worker_->keep_late(StepKey{step, RendezvousKey{kPs, kWorker, name}}, std::move(value));
    std::memset(destination.data, 0, destination.nbytes);
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

// The caller's memory for `count` floats, zeroed.
inline RecvDestination zeros(std::size_t count, std::vector<std::int64_t> shape) {
  auto memory = std::make_shared<std::vector<float>>(count, 0.0f);
  return RecvDestination{kFloat, std::move(shape), reinterpret_cast<std::uint8_t*>(memory->data()),
                         count * 4, memory};
}

inline std::uint64_t landing_registrations(const RdmaRendezvous& rendezvous) {
  for (const auto& [name, value] : rendezvous.stats()) {
    if (name == "landing_registrations") return value;
  }
  ADD_FAILURE() << "no landing_registrations counter";
  return 0;
}

inline bool all_zero(const RecvDestination& destination) {
  const auto* data = destination.data;
  return std::all_of(data, data + destination.nbytes, [](std::uint8_t b) { return b == 0; });
}

inline std::string mode_name(const ::testing::TestParamInfo<Options>& mode) {
  if (mode.param.read_mode) return "read";
  if (mode.param.validate) return "validate";
  return mode.param.same_host == "no" ? "tcp" : "write";
}

// The four modes: write (same host), read, validate, and write over TCP.
inline auto all_modes() {
  return ::testing::Values(Options{}, Options{true, false, "auto"}, Options{false, true, "auto"},
                           Options{false, false, "no"});
}

}  // namespace tensorverbs::rendezvous_testing
