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
