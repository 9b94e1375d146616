// CopyPool: large copies carried out off the caller's thread, split across a few helper
// threads (one core does not reach the memory bandwidth). A queue pair hands it its large
// shared-memory copies so that neither its mutex nor the thread that posted waits for
// them. The helpers start on the first copy and sleep on a condition variable between
// copies. A copy never fails: when no helper can start, or its parts cannot be queued,
// the caller copies and is told at once.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tensorverbs::verbs::soft {

class CopyPool {
 public:
  // Each helper takes at least this much of a copy.
  static constexpr std::size_t kPartBytes = 2 << 20;

  explicit CopyPool(int helpers);  // 0: every copy in the caller
  ~CopyPool();                     // finishes the copies queued
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  // Copies `n` bytes and then calls `done` (which must not throw), on the helper that
  // finishes last, or in this call when no helper could take it.
  void copy_async(void* dst, const void* src, std::size_t n, std::function<void()> done);

 private:
  // One copy: its parts go to helpers in turn (the pool's mutex guards the counts).
  struct Batch {
    std::uint8_t* dst;
    const std::uint8_t* src;
    std::size_t n, chunk;
    std::size_t parts, next = 0, left;
    std::function<void()> done;
  };
  bool start_helpers_locked();
  void run();
  void serve();

  int helpers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::deque<std::shared_ptr<Batch>> batches_;  // with parts no helper took yet
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// The number of helpers for this machine (its cores, at most 4).
int default_copy_helpers();

}  // namespace tensorverbs::verbs::soft
