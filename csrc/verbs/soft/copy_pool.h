// CopyPool: memcpy, with large copies (kSplitBytes and up) split across a few helper
// threads, since one core does not reach the memory bandwidth. The helpers start on the
// first large copy and sleep on a condition variable between copies. A copy never fails:
// helpers that cannot start, or parts that cannot be queued, are copied by the caller.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace tensorverbs::verbs::soft {

class CopyPool {
 public:
  static constexpr std::size_t kSplitBytes = 8 << 20;

  explicit CopyPool(int helpers);  // 0: every copy inline
  ~CopyPool();
  CopyPool(const CopyPool&) = delete;
  CopyPool& operator=(const CopyPool&) = delete;

  void copy(void* dst, const void* src, std::size_t n);
  int helpers() const { return helpers_; }

 private:
  struct Batch {
    int left = 0;
  };
  struct Job {
    std::uint8_t* dst;
    const std::uint8_t* src;
    std::size_t n;
    Batch* batch;
  };
  void run();
  void serve();

  int helpers_;
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<Job> jobs_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

// The number of helpers for this machine (the cores but one, at most 3).
int default_copy_helpers();

}  // namespace tensorverbs::verbs::soft
