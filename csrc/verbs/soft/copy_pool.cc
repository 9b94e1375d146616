#include "verbs/soft/copy_pool.h"

#include <algorithm>
#include <cstring>

#include "core/thread_guard.h"
#include "core/thread_name.h"

namespace tensorverbs::verbs::soft {

int default_copy_helpers() {
  const unsigned cores = std::thread::hardware_concurrency();
  return static_cast<int>(std::clamp(cores, 1u, 4u));
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

bool CopyPool::start_helpers_locked() {
  if (threads_.empty()) {  // those that cannot start leave their parts to the others
    run_guarded(
        [&] {
          while (threads_.size() < static_cast<std::size_t>(helpers_)) {
            threads_.emplace_back([this] {
              name_thread("tv-copy");
              run();
            });
          }
        },
        [](const char*) {});
  }
  return !threads_.empty();
}

void CopyPool::copy_async(void* dst, const void* src, std::size_t n, std::function<void()> done) {
  bool queued = false;
  {
    std::lock_guard lock(mu_);
    if (helpers_ > 0 && start_helpers_locked()) {
      queued = run_guarded(
          [&] {
            const std::size_t parts = std::clamp<std::size_t>(n / kPartBytes, 1, threads_.size());
            const std::size_t chunk = (n / parts + 4095) & ~std::size_t{4095};
            const std::size_t used = chunk == 0 ? 1 : (n + chunk - 1) / chunk;
            auto batch = std::make_shared<Batch>(Batch{static_cast<std::uint8_t*>(dst),
                                                       static_cast<const std::uint8_t*>(src), n,
                                                       chunk, used, 0, used, std::move(done)});
            batches_.push_back(std::move(batch));  // (nothing queued if it throws)
          },
          [](const char*) {});
    }
  }
  if (queued) {
    work_cv_.notify_all();
    return;
  }
  std::memmove(dst, src, n);
  if (done) done();
}

void CopyPool::run() {
  // a helper that fails ends; the others take the parts it did not start
  run_guarded([this] { serve(); }, [](const char*) {});
}

void CopyPool::serve() {
  std::unique_lock lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || !batches_.empty(); });
    if (batches_.empty()) return;  // stopping, nothing left
    std::shared_ptr<Batch> batch = batches_.front();
    const std::size_t off = batch->chunk * batch->next;
    if (++batch->next == batch->parts) batches_.pop_front();
    lock.unlock();
    std::memcpy(batch->dst + off, batch->src + off, std::min(batch->chunk, batch->n - off));
    lock.lock();
    if (--batch->left == 0) {
      lock.unlock();
      if (batch->done) batch->done();
      batch.reset();
      lock.lock();
    }
  }
}

}  // namespace tensorverbs::verbs::soft
