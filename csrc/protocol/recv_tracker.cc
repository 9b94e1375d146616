#include "protocol/recv_tracker.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace tensorverbs {

std::optional<TensorValue> RecvTracker::track(const std::shared_ptr<PendingRecv>& recv) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!stopped_) {
      if (auto late = late_.take(recv->key())) return late;
      recvs_[recv.get()] = Tracked{next_order_++, recv};
      return std::nullopt;
    }
  }
  recv->give_up(Status(Code::kCancelled, "the server stopped"));
  return std::nullopt;
}

void RecvTracker::forget(const PendingRecv* recv) {
  std::lock_guard<std::mutex> lock(mu_);
  recvs_.erase(recv);
}

std::optional<TensorValue> RecvTracker::take_late(const StepKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return late_.take(key);
}

void RecvTracker::hand_over(const StepKey& key, TensorValue value) {
  std::vector<const PendingRecv*> declined;
  for (;;) {
    std::shared_ptr<PendingRecv> oldest;  // of the recvs of `key` still waiting
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      std::uint64_t first = 0;
      for (auto& [ptr, tracked] : recvs_) {
        if (oldest && tracked.order >= first) continue;
        if (std::find(declined.begin(), declined.end(), ptr) != declined.end()) continue;
        if (auto recv = tracked.recv.lock(); recv && recv->key() == key) {
          oldest = std::move(recv);
          first = tracked.order;
        }
      }
      if (!oldest) {  // for the next recv of the key
        late_.keep(key, std::move(value));
        return;
      }
    }
    if (oldest->hand_over(value)) return;
    declined.push_back(oldest.get());  // it was answered or gave up meanwhile
  }
}

void RecvTracker::abort_step(std::int64_t step, const Status& why) {
  std::vector<std::shared_ptr<PendingRecv>> aborted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [ptr, tracked] : recvs_) {
      if (auto recv = tracked.recv.lock(); recv && recv->step() == step) aborted.push_back(std::move(recv));
    }
    late_.drop_step(step);
  }
  for (auto& recv : aborted) recv->give_up(why);
}

void RecvTracker::cleanup_step(std::int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  late_.drop_step(step);
}

void RecvTracker::stop() {
  std::vector<std::shared_ptr<PendingRecv>> recvs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
    for (auto& [ptr, tracked] : recvs_) {
      if (auto recv = tracked.recv.lock()) recvs.push_back(std::move(recv));
    }
    recvs_.clear();
    late_.clear();
  }
  const Status stopped(Code::kCancelled, "the server stopped");
  for (auto& recv : recvs) recv->give_up(stopped);
}

}  // namespace tensorverbs
