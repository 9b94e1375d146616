#include "binding/recv_callbacks.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <utility>

#include "binding/byte_view.h"
#include "binding/py_ref.h"
#include "binding/tensor_shape_caster.h"
#include "core/bounded_spin.h"

namespace nb = nanobind;

namespace tensorverbs::binding {

namespace {

// How long a blocked caller spins before it sleeps: most answers on one host come sooner.
constexpr auto kSpin = std::chrono::microseconds(50);

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
  return nb::make_tuple(0, "", value.meta.dtype, nb::cast(value.meta.shape),
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
  BoundedSpin spin(kSpin);
  while (!done.load(std::memory_order_acquire) && spin.turn()) {}
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

}  // namespace tensorverbs::binding
