#include "binding/future_recv.h"

#include <nanobind/stl/string.h>

#include <algorithm>
#include <chrono>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "binding/gil_released.h"
#include "binding/py_ref.h"
#include "core/thread_guard.h"
#include "core/thread_name.h"

namespace nb = nanobind;

namespace tensorverbs::binding {

namespace {

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

// set_variant_settle()'s (owned; each recv that may call it holds a reference of its own)
std::atomic<PyObject*> registered_variant_settle{nullptr};

Settler& settler() {
  static Settler* instance = new Settler();
  return *instance;
}

PyObject* held(nb::object object) { return object.is_none() ? nullptr : object.release().ptr(); }

}  // namespace

FutureRecv::FutureRecv(std::weak_ptr<RdmaRendezvous> rendezvous, StepKey key, nb::object call,
                       nb::object settle)
    : rendezvous_(std::move(rendezvous)), key_(std::move(key)),
      call_(held(std::move(call))), settle_(held(std::move(settle))) {}

FutureRecv::~FutureRecv() {
  PyRefDeleter release;
  for (PyObject* object : {call_, settle_, variant_call_, variant_settle_, kept_}) {
    if (object) release(object);
  }
}

void ArrivalGroup::arrived(std::size_t index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    arrived_.push_back(index);
  }
  came_.notify_one();
}

std::vector<std::size_t> ArrivalGroup::wait(std::size_t count, std::chrono::nanoseconds slice) {
  std::unique_lock<std::mutex> lock(mu_);
  came_.wait_for(lock, slice, [&] { return arrived_.size() >= count; });
  std::vector<std::size_t> came;
  came.swap(arrived_);
  return came;
}

void FutureRecv::complete(RecvResult result) {
  std::shared_ptr<ArrivalGroup> group;
  std::size_t index = 0;
  bool settler_settles = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    group = group_;
    index = group_index_;
    if (!abandoned_ && !call_ && variant_call_ && result.status.ok() && result.value.meta.dtype == kDtVariant &&
        state_ != State::kWaited) {  // a descriptor to act on: settled as it comes
      call_ = std::exchange(variant_call_, nullptr);
      settle_ = std::exchange(variant_settle_, nullptr);
      variant_taken_ = true;
      state_ = State::kGone;
      settler_settles = true;
    } else if (!abandoned_ && (state_ == State::kWaited || !call_)) {
      // a thread waits for it, or its future takes it
      result_ = std::move(result);
      state_ = call_ ? State::kArrived : State::kParked;
      if (!call_) arrived_at_ = std::chrono::steady_clock::now();
      ready_.store(true, std::memory_order_release);
    } else {
      state_ = State::kGone;
      settler_settles = true;
    }
  }
  arrived_.notify_one();
  // the core holds this callback while the recv is pending; the settler holds it until done
  if (settler_settles) settler().post(shared_from_this(), std::move(result));
  if (group) group->arrived(index);
}

FutureRecv::Waited FutureRecv::wait_here(double seconds) {
  RecvResult result;
  {
    GilReleased release;
    std::unique_lock<std::mutex> lock(mu_);
    if (state_ == State::kParked) return Waited::kParked;
    if (state_ != State::kPending) return Waited::kElsewhere;
    state_ = State::kWaited;
    lock.unlock();
    spin_for(ready_);
    lock.lock();
    const auto slice = std::chrono::duration<double>(std::clamp(seconds, 0.0, 3600.0));
    arrived_.wait_for(lock, slice, [this] { return state_ != State::kWaited; });
    if (state_ == State::kParked) return Waited::kParked;
    if (state_ == State::kWaited) {  // its answer goes to the settler if it comes now
      state_ = State::kPending;
      return Waited::kNotYet;
    }
    if (state_ != State::kArrived) return Waited::kElsewhere;
    state_ = State::kGone;
    result = std::move(result_);
  }
  try {
    settle_here(result);
  } catch (...) {  // (a conversion's error, or a signal handler's: the caller gets it)
    hand_to_settler(nb::handle(call_), nb::handle(settle_), result);
    throw;
  }
  release_python();
  return Waited::kSettledHere;
}

bool FutureRecv::settle_parked(nb::handle call, nb::handle settle) {
  RecvResult result;
  std::chrono::steady_clock::time_point arrived;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kParked) return false;
    state_ = State::kGone;
    result = std::move(result_);
    arrived = arrived_at_;
  }
  try {
    nb::tuple answer = to_python(result);
    const std::chrono::duration<double> since = arrived.time_since_epoch();
    nb::object taken = settle(call, answer[0], answer[1], answer[2], answer[3], answer[4],
                              answer[5], since.count());
    if (!nb::cast<bool>(taken)) keep_late(result);
  } catch (...) {
    hand_to_settler(call, settle, result);
    throw;
  }
  return true;
}

void FutureRecv::hand_to_settler(nb::handle call, nb::handle settle, RecvResult& result) {
  if (nb::cast<bool>(call.attr("done")())) {  // it has the answer already
    release_python();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!call_) {
      call_ = call.inc_ref().ptr();
      settle_ = settle.inc_ref().ptr();
    }
  }
  settler().post(shared_from_this(), std::move(result));
}

void FutureRecv::eager(nb::object call, nb::object settle) {
  RecvResult result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (variant_taken_) {  // the settler holds the future weakly: hold it until it settled it
      if (call_ && !kept_) kept_ = held(std::move(call));
      return;
    }
    if (call_ || abandoned_ || state_ == State::kArrived || state_ == State::kGone) return;
    call_ = held(std::move(call));
    settle_ = held(std::move(settle));
    if (state_ != State::kParked) return;
    state_ = State::kGone;
    result = std::move(result_);
  }
  settler().post(shared_from_this(), std::move(result));
}

void FutureRecv::settle_variants_of(nb::handle future) {
  PyObject* settle = registered_variant_settle.load(std::memory_order_acquire);
  if (settle == nullptr) return;
  PyObject* ref = PyWeakref_NewRef(future.ptr(), nullptr);
  if (ref == nullptr) throw nb::python_error();
  Py_INCREF(settle);
  std::lock_guard<std::mutex> lock(mu_);  // (not started yet: nothing races it)
  variant_call_ = ref;
  variant_settle_ = settle;
}

void FutureRecv::abandon() {
  RecvResult result;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (call_ || state_ == State::kArrived || state_ == State::kGone) return;
    abandoned_ = true;
    if (state_ != State::kParked) return;
    state_ = State::kGone;
    result = std::move(result_);
  }
  settler().post(shared_from_this(), std::move(result));
}

void FutureRecv::keep_late(RecvResult& result) {
  if (!result.status.ok()) return;
  if (auto rendezvous = rendezvous_.lock()) {
    GilReleased release;
    rendezvous->keep_late(key_, std::move(result.value));
  }
}

void FutureRecv::join(const std::shared_ptr<ArrivalGroup>& group, std::size_t index) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!group_ && (state_ == State::kPending || state_ == State::kWaited)) {
      group_ = group;
      group_index_ = index;
      return;
    }
  }
  group->arrived(index);
}

void FutureRecv::leave(const std::shared_ptr<ArrivalGroup>& group) {
  std::lock_guard<std::mutex> lock(mu_);
  if (group_ == group) group_.reset();
}

void FutureRecv::settle(RecvResult& result) {
  if (!call_) {  // abandoned: no future takes it
    keep_late(result);
    return;
  }
  try {
    settle_here(result);
  } catch (nb::python_error& error) {
    error.restore();
    PyErr_WriteUnraisable(settle_);
  } catch (const std::exception& error) {  // a conversion failed: say so, never terminate
    PyErr_SetString(PyExc_RuntimeError, error.what());
    PyErr_WriteUnraisable(settle_);
  }
  release_python();
}

void FutureRecv::settle_here(RecvResult& result) {
  nb::tuple args = to_python(result);
  nb::object returned = nb::handle(settle_)(nb::handle(call_), *args);
  if (!nb::cast<bool>(returned)) keep_late(result);  // cancelled as it arrived, or refused
}

void FutureRecv::release_python() {
  PyObject* call;
  PyObject* settle;
  PyObject* variant_call;
  PyObject* variant_settle;
  PyObject* kept;
  {
    std::lock_guard<std::mutex> lock(mu_);
    call = std::exchange(call_, nullptr);
    settle = std::exchange(settle_, nullptr);
    variant_call = std::exchange(variant_call_, nullptr);
    variant_settle = std::exchange(variant_settle_, nullptr);
    kept = std::exchange(kept_, nullptr);
  }
  Py_XDECREF(call);
  Py_XDECREF(settle);
  Py_XDECREF(variant_call);
  Py_XDECREF(variant_settle);
  Py_XDECREF(kept);  // (last: the future may go with it, and this with the future)
}

void stop_settler() { settler().stop(); }

void set_variant_settle(nb::object settle) {
  PyObject* previous = registered_variant_settle.exchange(settle.release().ptr(), std::memory_order_acq_rel);
  Py_XDECREF(previous);
}

}  // namespace tensorverbs::binding
