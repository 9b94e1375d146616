#include "binding/py_ref.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "core/thread_guard.h"
#include "core/thread_name.h"

namespace tensorverbs::binding {

namespace {

// Releases wait this long to be released together (one GIL acquisition for many: a burst of
// sends releases its arrays once, not once each), unless this many are waiting.
constexpr auto kGather = std::chrono::microseconds(200);
constexpr std::size_t kBatch = 256;

class Janitor {
 public:
  // Called from destructors (noexcept): what cannot be queued (no memory, or no thread to
  // release it) leaks rather than ending the process.
  void release(PyObject* object) noexcept {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;  // the interpreter is going away: leak
    run_guarded(
        [&] {
          if (!thread_.joinable()) {
            thread_ = std::thread([this] {
              name_thread("tv-py-release");
              run();
            });
          }
          queue_.push_back(object);
        },
        [](const char*) {});
    if (queue_.size() == 1 || queue_.size() == kBatch) wake_.notify_one();
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
      Py_BEGIN_ALLOW_THREADS
      thread.join();
      Py_END_ALLOW_THREADS
    }
    std::lock_guard<std::mutex> lock(mu_);
    for (PyObject* object : queue_) Py_DECREF(object);  // the caller holds the GIL
    queue_.clear();
  }

 private:
  void run() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      wake_.wait(lock, [this] { return stopped_ || !queue_.empty(); });
      wake_.wait_for(lock, kGather, [this] { return stopped_ || queue_.size() >= kBatch; });
      if (stopped_) return;
      batch_.swap(queue_);  // (the queue keeps the capacity the last batch had)
      lock.unlock();
      PyGILState_STATE gil = PyGILState_Ensure();
      for (PyObject* object : batch_) Py_DECREF(object);
      PyGILState_Release(gil);
      batch_.clear();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::vector<PyObject*> queue_;
  std::vector<PyObject*> batch_;  // the releasing thread's
  std::thread thread_;
  bool stopped_ = false;
};

Janitor& janitor() {
  static Janitor* instance = new Janitor();  // never destroyed: threads may still release
  return *instance;
}

}  // namespace

void PyRefDeleter::operator()(const void* object) const {
  auto* py = static_cast<PyObject*>(const_cast<void*>(object));
  if (PyGILState_Check()) {
    Py_DECREF(py);
  } else {
    janitor().release(py);
  }
}

std::shared_ptr<const void> keep(PyObject* object) {
  Py_INCREF(object);
  return std::shared_ptr<const void>(object, PyRefDeleter{});
}

PyObject* kept_object(const std::shared_ptr<const void>& keepalive) {
  if (!keepalive || !std::get_deleter<PyRefDeleter>(keepalive)) return nullptr;
  return static_cast<PyObject*>(const_cast<void*>(keepalive.get()));
}

void stop_janitor() { janitor().stop(); }

}  // namespace tensorverbs::binding
