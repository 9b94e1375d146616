// RendezvousPair: two tasks' RdmaRendezvous in one process, their channel set up directly
// (as the control plane would), over the soft provider, or over ibverbs on the first two
// active devices (the soft-RoCE lane: rxe0 and rxe1; skipped where there is none, failed
// with TENSORVERBS_TEST_REQUIRE_IBVERBS=1); and what its tests share.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "../verbs/ibverbs_fixture.h"
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

// Holds the thread that completes it until released (a recv's answer arrives in the
// adapter's thread: this freezes the task's message handling).
class Gate : public RecvCallback {
 public:
  void complete(RecvResult) override {
    entered_.set_value();
    released_.wait();
  }
  void wait_entered() {
    ASSERT_EQ(entered_future_.wait_for(std::chrono::seconds(60)), std::future_status::ready);
  }
  void release() {  // (once; later calls do nothing)
    std::call_once(released_once_, [this] { release_.set_value(); });
  }

 private:
  std::once_flag released_once_;
  std::promise<void> entered_, release_;
  std::future<void> entered_future_ = entered_.get_future();
  std::shared_future<void> released_ = release_.get_future().share();
};

inline TensorValue floats(std::size_t count, float first) {
  auto data = std::make_shared<std::vector<float>>(count);
  std::iota(data->begin(), data->end(), first);
  return TensorValue{TensorMeta{kFloat, {static_cast<std::int64_t>(count)}, false, count * 4},
                     reinterpret_cast<const std::uint8_t*>(data->data()), data};
}

// Whether `condition()` came to hold within 60 s (asked again every 100 us).
template <typename Condition>
bool eventually(Condition condition) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
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
  std::string provider = "soft";
  std::string ib_windows = "auto";  // ibverbs: type2, registration or auto
  double hold_seconds = 0;          // 0: the default
};

inline void PrintTo(const Options& o, std::ostream* os) {
  *os << o.provider << (o.read_mode ? " read" : " write") << (o.validate ? " validate" : "")
      << " same_host=" << o.same_host << (o.provider == "ibverbs" ? " windows=" + o.ib_windows : "");
}

// One of `names` (task `task`) over the options' provider, as these tests open tasks: few
// message slots (credits run out and come back), small pool blocks; on ibverbs on `device`.
inline Result<std::unique_ptr<RdmaRendezvous>> open_task(std::int32_t task,
                                                        std::vector<std::string> names,
                                                        const Options& options = {},
                                                        std::size_t pool_limit = 0,
                                                        int queue_depth = 0,
                                                        const std::string& device = "") {
  RendezvousSettings settings;
  settings.task = task;
  settings.task_names = std::move(names);
  settings.verbs.provider = options.provider;
  settings.verbs.ib_windows = options.ib_windows;
  settings.verbs.same_host = options.same_host;
  if (!device.empty()) {
    settings.verbs.device = device;
    // the lane's guest emulates its CPUs: a long read can outlast 67 ms retransmission
    // timeouts, so give the transport 1 s (RDMA_QP_TIMEOUT=18)
    settings.verbs.timeout = 18;
  }
  if (queue_depth) settings.verbs.queue_depth = queue_depth;
  settings.listen_host = "127.0.0.1";
  settings.read_mode = options.read_mode;
  settings.validate = options.validate;
  if (options.hold_seconds > 0) settings.hold_seconds = options.hold_seconds;
  settings.slots = 4;
  settings.recover = true;  // as the control plane runs it
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
    std::vector<std::string> devices;
    if (GetParam().provider == "ibverbs") {
      IBVERBS_NEED_DEVICES(active);
      devices = active;
    }
    for (std::int32_t task : {kPs, kWorker}) {
      std::vector<std::string> names = {"/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"};
      for (int i = 0; i < extra_tasks_; ++i) {
        names.push_back("/job:other/replica:0/task:" + std::to_string(i));
      }
      const std::string device =
          devices.empty() ? "" : devices[std::min<std::size_t>(task == kPs ? 0 : 1, devices.size() - 1)];
      auto opened = open_task(task, std::move(names), GetParam(), pool_limit_, queue_depth_, device);
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
  int queue_depth_ = 0;         // 0: the default
  int extra_tasks_ = 0;         // tasks beyond the two, without a rendezvous here
};

// Tasks whose pools hold 16 MiB at most.
class SmallPoolPair : public RendezvousPair {
 protected:
  void SetUp() override {
    pool_limit_ = 16 << 20;
    RendezvousPair::SetUp();
  }
};

// Tasks whose queue pairs hold 8 requests (RDMA_QP_QUEUE_DEPTH=8).
class ShallowQueuePair : public RendezvousPair {
 protected:
  void SetUp() override {
    queue_depth_ = 8;
    RendezvousPair::SetUp();
  }
};

// The caller's memory for `count` floats, zeroed.
inline RecvDestination zeros(std::size_t count, std::vector<std::int64_t> shape) {
  auto memory = std::make_shared<std::vector<float>>(count, 0.0f);
  return RecvDestination{kFloat, std::move(shape), reinterpret_cast<std::uint8_t*>(memory->data()),
                         count * 4, memory};
}

inline std::uint64_t stat(const RdmaRendezvous& rendezvous, const std::string& counter) {
  for (const auto& [name, value] : rendezvous.stats()) {
    if (name == counter) return value;
  }
  ADD_FAILURE() << "no " << counter << " counter";
  return 0;
}

inline std::uint64_t landing_registrations(const RdmaRendezvous& rendezvous) {
  return stat(rendezvous, "landing_registrations");
}

inline bool all_zero(const RecvDestination& destination) {
  const auto* data = destination.data;
  return std::all_of(data, data + destination.nbytes, [](std::uint8_t b) { return b == 0; });
}

inline std::string mode_name(const ::testing::TestParamInfo<Options>& mode) {
  const std::string windows = mode.param.provider == "ibverbs" ? "_" + mode.param.ib_windows : "";
  if (mode.param.read_mode) return "read" + windows;
  if (mode.param.validate) return "validate" + windows;
  return (mode.param.same_host == "no" ? "tcp" : "write") + windows;
}

// The four modes of the soft provider: write (same host), read, validate, write over TCP.
inline auto all_modes() {
  return ::testing::Values(Options{}, Options{true, false, "auto"}, Options{false, true, "auto"},
                           Options{false, false, "no"});
}

// The modes on ibverbs (instantiated as "Ibverbs/...": the soft-RoCE lane runs them): write
// with registrations of the landing and read, as soft-RoCE runs them by default.
inline auto ibverbs_modes() {
  return ::testing::Values(Options{false, false, "auto", "ibverbs", "registration"},
                           Options{true, false, "auto", "ibverbs", "registration"});
}

// Write mode with type 2 memory windows (real NICs' default; forced on soft-RoCE).
inline auto type2_modes() {
  return ::testing::Values(Options{false, false, "auto", "ibverbs", "type2"});
}

}  // namespace tensorverbs::rendezvous_testing
