#include "verbs/soft/copy_pool.h"

#include <algorithm>
#include <cstring>

#include "core/thread_guard.h"

namespace tensorverbs::verbs::soft {

int default_copy_helpers() {
  const unsigned cores = std::thread::hardware_concurrency();
  if (cores <= 1) return 0;
  return static_cast<int>(cores - 1 > 3 ? 3 : cores - 1);
}

CopyPool::CopyPool(int helpers) : helpers_(helpers < 0 ? 0 : helpers) {}

CopyPool::~CopyPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void CopyPool::copy(void* dst, const void* src, std::size_t n) {
  if (n < kSplitBytes || helpers_ == 0) {
    std::memmove(dst, src, n);
    return;
  }
  const std::size_t parts = static_cast<std::size_t>(helpers_) + 1;
  const std::size_t chunk = (n / parts + 4095) & ~std::size_t{4095};
  auto* d = static_cast<std::uint8_t*>(dst);
  const auto* s = static_cast<const std::uint8_t*>(src);
  Batch batch;
  bool queued = false;
  {
    std::lock_guard lock(mu_);
    if (threads_.empty()) {  // those that cannot start leave their share to the caller
      run_guarded(
          [&] {
            while (threads_.size() < static_cast<std::size_t>(helpers_)) {
              threads_.emplace_back([this] { run(); });
            }
          },
          [](const char*) {});
    }
    queued = run_guarded(
        [&] {
          for (std::size_t off = chunk; off < n; off += chunk) {
            jobs_.push_back({d + off, s + off, off + chunk > n ? n - off : chunk, &batch});
            ++batch.left;
          }
        },
        [](const char*) {});
    if (!queued) {  // no memory to queue the parts: none may outlive this call
      jobs_.erase(std::remove_if(jobs_.begin(), jobs_.end(),
                                 [&](const Job& job) { return job.batch == &batch; }),
                  jobs_.end());
    }
  }
  if (!queued) {
    std::memmove(dst, src, n);
    return;
  }
  work_cv_.notify_all();
  std::memcpy(d, s, chunk < n ? chunk : n);
  std::unique_lock lock(mu_);
  // take back jobs no helper started (helpers may be busy with another caller's)
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->batch == &batch) {
      Job job = *it;
      it = jobs_.erase(it);
      lock.unlock();
      std::memcpy(job.dst, job.src, job.n);
      lock.lock();
      --batch.left;
      it = jobs_.begin();
    } else {
      ++it;
    }
  }
  done_cv_.wait(lock, [&] { return batch.left == 0; });
}

void CopyPool::run() {
  // a helper that fails ends; its callers copy the parts it did not start
  run_guarded([this] { serve(); }, [](const char*) {});
}

void CopyPool::serve() {
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    Job job = jobs_.front();
    jobs_.pop_front();
    lock.unlock();
    std::memcpy(job.dst, job.src, job.n);
    lock.lock();
    if (--job.batch->left == 0) done_cv_.notify_all();
  }
}

}  // namespace tensorverbs::verbs::soft
