#include "binding/recv_callbacks.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "binding/byte_view.h"
#include "binding/gil_released.h"
#include "core/spin_pause.h"
#include "core/thread_guard.h"
#include "core/thread_name.h"
#include "binding/py_ref.h"

namespace nb = nanobind;

namespace tensorverbs::binding {

namespace {

// How long a blocked caller spins before it sleeps: most answers on one host come sooner.
constexpr auto kSpin = std::chrono::microseconds(50);

class Settler {
 public:
  void post(std::shared_ptr<FutureRecv> recv, RecvResult result) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    if (!thread_.joinable()) {
      thread_ = std::thread([this] {
        name_thread("tv-settle");
        run();
      });
    }
    queue_.emplace_back(std::move(recv), std::move(result));
    wake_.notify_one();
  }

  void stop() {
    std::thread thread;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopped_ = true;
      thread.swap(thread_);
      wake_.notify_one();
    }
    if (thread.joinable()) {
      GilReleased release;
      thread.join();
    }
    std::lock_guard<std::mutex> lock(mu_);
    queue_.clear();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      wake_.wait(lock, [this] { return stopped_ || !queue_.empty(); });
      if (stopped_) return;
      std::deque<std::pair<std::shared_ptr<FutureRecv>, RecvResult>> batch;
      batch.swap(queue_);
      lock.unlock();
      {
        nb::gil_scoped_acquire gil;
        for (auto& settled : batch) {  // settle() reports Python's errors itself
          run_guarded([&] { settled.first->settle(settled.second); }, [](const char*) {});
        }
        batch.clear();  // drops Python references with the GIL
      }
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::pair<std::shared_ptr<FutureRecv>, RecvResult>> queue_;
  std::thread thread_;
  bool stopped_ = false;
};

Settler& settler() {
  static Settler* instance = new Settler();
  return *instance;
}

}  // namespace

nb::tuple to_python(const RecvResult& result) {
  if (!result.status.ok()) {
    return nb::make_tuple(static_cast<int>(result.status.code()), result.status.message(),
                          nb::none(), nb::none(), false, nb::none());
  }
  const TensorValue& value = result.value;
  nb::object payload;
  PyObject* own = value.borrowed ? nullptr : kept_object(value.keepalive);
  if (own) {
    payload = nb::borrow(own);
  } else {
    payload = nb::cast(ByteView{const_cast<std::uint8_t*>(value.data), value.size(), false,
                                value.keepalive});
  }
  return nb::make_tuple(0, "", value.meta.dtype, nb::tuple(nb::cast(value.meta.shape)),
                        value.meta.is_dead, payload);
}

void BlockingRecv::complete(RecvResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    result_ = std::move(result);
    done_.store(true, std::memory_order_release);
  }
  cv_.notify_one();
}

bool spin_for(const std::atomic<bool>& done) {
  const auto until = std::chrono::steady_clock::now() + kSpin;
  while (!done.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until) {
    spin_pause();
  }
  return done.load(std::memory_order_acquire);
}

bool BlockingRecv::wait_for(std::chrono::nanoseconds slice) {
  if (!spun_) {
    spun_ = true;
    spin_for(done_);
  }
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, slice, [this] { return done_.load(std::memory_order_acquire); });
}

RecvResult BlockingRecv::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return done_.load(std::memory_order_acquire); });
  return std::move(result_);
}

class BatchRecv::Entry final : public PyRecvCallback {
 public:
  Entry(std::shared_ptr<BatchRecv> batch, std::size_t index) : batch_(std::move(batch)), index_(index) {}
  void complete(RecvResult result) override { batch_->complete(index_, std::move(result)); }

 private:
  const std::shared_ptr<BatchRecv> batch_;
  const std::size_t index_;
};

std::shared_ptr<RecvCallback> BatchRecv::entry(std::size_t index) {
  return std::make_shared<Entry>(shared_from_this(), index);
}

void BatchRecv::complete(std::size_t index, RecvResult result) {
  std::lock_guard<std::mutex> lock(mu_);
  results_[index] = std::move(result);
  if (--left_ == 0) {
    done_.store(true, std::memory_order_release);
    all_in_.notify_one();
  }
}

bool BatchRecv::wait_for(std::chrono::nanoseconds slice) {
  if (!spun_) {
    spun_ = true;
    spin_for(done_);
  }
  std::unique_lock<std::mutex> lock(mu_);
  return all_in_.wait_for(lock, slice, [this] { return left_ == 0; });
}

void BatchRecv::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  all_in_.wait(lock, [this] { return left_ == 0; });
}

FutureRecv::FutureRecv(std::weak_ptr<RdmaRendezvous> rendezvous, StepKey key, nb::object call,
                       nb::object settle)
    : rendezvous_(std::move(rendezvous)), key_(std::move(key)),
      call_(call.release().ptr()), settle_(settle.release().ptr()) {}

FutureRecv::~FutureRecv() {
  PyRefDeleter release;
  release(call_);
  release(settle_);
}

void FutureRecv::complete(RecvResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kWaited) {  // a thread waits for it: it settles the future
      result_ = std::move(result);
      state_ = State::kArrived;
      ready_.store(true, std::memory_order_release);
      arrived_.notify_one();
      return;
    }
    state_ = State::kGone;
  }
  // the core holds this callback while the recv is pending; the settler holds it until done
  settler().post(shared_from_this(), std::move(result));
}

FutureRecv::Waited FutureRecv::wait_here(double seconds) {
  RecvResult result;
  {
    GilReleased release;
    std::unique_lock<std::mutex> lock(mu_);
    if (state_ != State::kPending) return Waited::kElsewhere;
    state_ = State::kWaited;
    lock.unlock();
    spin_for(ready_);
    lock.lock();
    const auto slice = std::chrono::duration<double>(std::clamp(seconds, 0.0, 3600.0));
    arrived_.wait_for(lock, slice, [this] { return state_ == State::kArrived; });
    if (state_ != State::kArrived) {  // its answer goes to the settler if it comes now
      state_ = State::kPending;
      return Waited::kNotYet;
    }
    state_ = State::kGone;
    result = std::move(result_);
  }
  try {
    settle_here(result);
  } catch (nb::python_error&) {
    // what a signal's handler raised as this thread settled (Ctrl-C): the caller gets it,
    // and the answer, unless the future has it already, goes to the settler
    if (!nb::cast<bool>(nb::handle(call_).attr("done")())) {
      settler().post(shared_from_this(), std::move(result));
    }
    throw;
  }
  return Waited::kSettledHere;
}

void FutureRecv::settle(RecvResult& result) {
  try {
    settle_here(result);
  } catch (nb::python_error& error) {
    error.restore();
    PyErr_WriteUnraisable(settle_);
  } catch (const std::exception& error) {  // a conversion failed: say so, never terminate
    PyErr_SetString(PyExc_RuntimeError, error.what());
    PyErr_WriteUnraisable(settle_);
  }
}

void FutureRecv::settle_here(RecvResult& result) {
  nb::tuple args = to_python(result);
  nb::object returned = nb::handle(settle_)(nb::handle(call_), *args);
  if (!nb::cast<bool>(returned) && result.status.ok()) {
    // cancelled just as it arrived, or refused: the next recv gets it
    if (auto rendezvous = rendezvous_.lock()) {
      GilReleased release;
      rendezvous->keep_late(key_, std::move(result.value));
    }
  }
}

void stop_settler() { settler().stop(); }

}  // namespace tensorverbs::binding
