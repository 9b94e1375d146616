#include "protocol/unmatched_recvs.h"

#include <chrono>
#include <utility>

namespace tensorverbs {

void UnmatchedRecvs::note(StepKey recv) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (ended_) return;
    if (queued_.size() == kMaxQueued) queued_.pop_front();
    queued_.push_back(std::move(recv));
  }
  ready_.notify_one();
}

std::optional<StepKey> UnmatchedRecvs::next(double timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto some = [this] { return ended_ || !queued_.empty(); };
  if (timeout < 0) {
    ready_.wait(lock, some);
  } else if (!ready_.wait_for(lock, std::chrono::duration<double>(timeout), some)) {
    return std::nullopt;
  }
  if (ended_) return std::nullopt;
  StepKey recv = std::move(queued_.front());
  queued_.pop_front();
  return recv;
}

void UnmatchedRecvs::end() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ended_ = true;
    queued_.clear();
  }
  ready_.notify_all();
}

}  // namespace tensorverbs
