#include "protocol/local_table.h"

#include <string>
#include <vector>

namespace tensorverbs {

namespace {

// Fails the sends of `items`, whose values the table drops.
void fail_sends(const std::unordered_map<StepKey, std::deque<TensorValue>, StepKeyHash>& items,
                const Status& why) {
  for (const auto& [key, queue] : items) {
    for (const TensorValue& value : queue) {
      if (value.ticket) value.ticket->fail(why);
    }
  }
}

template <typename T>
std::optional<T> pop_front(std::unordered_map<StepKey, std::deque<T>, StepKeyHash>& queues,
                           const StepKey& key) {
  auto it = queues.find(key);
  if (it == queues.end()) return std::nullopt;
  T entry = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) queues.erase(it);
  return entry;
}

}  // namespace

Status LocalTable::send(std::int64_t step, const RendezvousKey& key, TensorValue value) {
  Status refused;
  offer(step, key, std::move(value), false, &refused);
  return refused;
}

void LocalTable::requeue(std::int64_t step, const RendezvousKey& key, TensorValue value) {
  offer(step, key, std::move(value), true, nullptr);
}

void LocalTable::offer(std::int64_t step, const RendezvousKey& key, TensorValue value,
                       bool first, Status* refused) {
  const StepKey match{step, key};
  std::optional<Pending> waiter;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Step& state = steps_[step];
    if (state.aborted) {
      if (refused) *refused = *state.aborted;
      return;
    }
    waiter = pop_front(state.waiters, match);
    if (!waiter) {
      auto& queue = state.items[match];
      first ? queue.push_front(std::move(value)) : queue.push_back(std::move(value));
      return;
    }
    prune(step, state);
  }
  waiter->callback(Status(), std::move(value));
}

LocalTable::Waiter LocalTable::recv(std::int64_t step, const RendezvousKey& key,
                                    Callback callback) {
  const StepKey match{step, key};
  Status error;
  std::optional<TensorValue> value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Step& state = steps_[step];
    if (state.aborted) {
      error = *state.aborted;
    } else {
      value = pop_front(state.items, match);
      if (!value) {
        const std::uint64_t id = next_id_++;
        state.waiters[match].push_back(Pending{id, std::move(callback)});
        return Waiter{match, id};
      }
      prune(step, state);
    }
  }
  callback(std::move(error), value ? std::move(*value) : TensorValue{});
  return Waiter{match, 0};
}

bool LocalTable::withdraw(const Waiter& waiter) {
  if (waiter.id == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto step = steps_.find(waiter.key.step);
  if (step == steps_.end()) return false;
  auto queue = step->second.waiters.find(waiter.key);
  if (queue == step->second.waiters.end()) return false;
  for (auto it = queue->second.begin(); it != queue->second.end(); ++it) {
    if (it->id != waiter.id) continue;
    queue->second.erase(it);
    if (queue->second.empty()) step->second.waiters.erase(queue);
    prune(waiter.key.step, step->second);
    return true;
  }
  return false;
}

void LocalTable::abort_step(std::int64_t step, const Status& why) {
  std::vector<Pending> failed;
  std::unordered_map<StepKey, std::deque<TensorValue>, StepKeyHash> dropped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Step& state = steps_[step];
    state.aborted = why;
    dropped.swap(state.items);
    for (auto& [key, queue] : state.waiters) {
      for (Pending& waiter : queue) failed.push_back(std::move(waiter));
    }
    state.waiters.clear();
  }
  fail_sends(dropped, why);
  for (Pending& waiter : failed) waiter.callback(why, TensorValue{});
}

std::optional<Status> LocalTable::aborted(std::int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = steps_.find(step);
  if (it == steps_.end()) return std::nullopt;
  return it->second.aborted;
}

void LocalTable::cleanup_step(std::int64_t step) {
  Step removed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = steps_.find(step);
    if (it == steps_.end()) return;
    removed = std::move(it->second);
    steps_.erase(it);
  }
  const Status why(Code::kAborted, "step " + std::to_string(step) + " was cleaned up");
  fail_sends(removed.items, Status(why.code(), why.message() + " before its receiver took it"));
  for (auto& [key, queue] : removed.waiters) {
    for (Pending& waiter : queue) waiter.callback(why, TensorValue{});
  }
}

std::pair<std::size_t, std::size_t> LocalTable::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t items = 0, waiters = 0;
  for (const auto& [step, state] : steps_) {
    for (const auto& [key, queue] : state.items) items += queue.size();
    for (const auto& [key, queue] : state.waiters) waiters += queue.size();
  }
  return {items, waiters};
}

std::size_t LocalTable::steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return steps_.size();
}

void LocalTable::prune(std::int64_t step, const Step& state) {
  if (state.empty()) steps_.erase(step);
}

}  // namespace tensorverbs
