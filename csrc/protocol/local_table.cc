#include "protocol/local_table.h"

#include <string>
#include <unordered_set>

namespace tensorverbs {

namespace {

// The oldest entry of `key`'s queue, taken out of it (the queue dropped once empty).
template <typename Queues>
auto pop_front(Queues& queues, const StepKey& key)
    -> std::optional<std::decay_t<decltype(queues.find(key)->front())>> {
  auto* queue = queues.find(key);
  if (queue == nullptr) return std::nullopt;
  auto entry = std::move(queue->front());
  queue->pop_front();
  if (queue->empty()) queues.erase(key);
  return entry;
}

// Moves the entries of `step`'s queues to `out`, the queues dropped.
template <typename Queues, typename T>
void take_queues(Queues& queues, std::int64_t step, std::vector<T>* out) {
  for (auto it = queues.begin(); it != queues.end();) {
    if (it->first.step != step) {
      ++it;
      continue;
    }
    for (T& entry : it->second) out->push_back(std::move(entry));
    it = queues.erase(it);
  }
}

void fail_sends(const std::vector<TensorValue>& values, const Status& why) {
  for (const TensorValue& value : values) {
    if (value.ticket) value.ticket->fail(why);
  }
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
    if (auto aborted = aborted_.find(step); aborted != aborted_.end()) {
      if (refused) *refused = aborted->second;
      return;
    }
    waiter = pop_front(waiters_, match);
    if (!waiter) {
      auto& queue = items_[match];
      first ? queue.push_front(std::move(value)) : queue.push_back(std::move(value));
      return;
    }
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
    if (auto aborted = aborted_.find(step); aborted != aborted_.end()) {
      error = aborted->second;
    } else {
      value = pop_front(items_, match);
      if (!value) {
        const std::uint64_t id = next_id_++;
        waiters_[match].push_back(Pending{id, std::move(callback)});
        return Waiter{match, id};
      }
    }
  }
  callback(std::move(error), value ? std::move(*value) : TensorValue{});
  return Waiter{match, 0};
}

bool LocalTable::withdraw(const Waiter& waiter) {
  if (waiter.id == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  auto* queue = waiters_.find(waiter.key);
  if (queue == nullptr) return false;
  for (auto it = queue->begin(); it != queue->end(); ++it) {
    if (it->id != waiter.id) continue;
    queue->erase(it);
    if (queue->empty()) waiters_.erase(waiter.key);
    return true;
  }
  return false;
}

void LocalTable::take_step(std::int64_t step, std::vector<TensorValue>* values,
                           std::vector<Pending>* waiters) {
  take_queues(items_, step, values);
  take_queues(waiters_, step, waiters);
}

void LocalTable::abort_step(std::int64_t step, const Status& why) {
  std::vector<TensorValue> dropped;
  std::vector<Pending> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_[step] = why;
    take_step(step, &dropped, &failed);
  }
  fail_sends(dropped, why);
  for (Pending& waiter : failed) waiter.callback(why, TensorValue{});
}

std::optional<Status> LocalTable::aborted(std::int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = aborted_.find(step);
  if (it == aborted_.end()) return std::nullopt;
  return it->second;
}

void LocalTable::cleanup_step(std::int64_t step) {
  std::vector<TensorValue> dropped;
  std::vector<Pending> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_.erase(step);
    take_step(step, &dropped, &failed);
  }
  const Status why(Code::kAborted, "step " + std::to_string(step) + " was cleaned up");
  fail_sends(dropped, Status(why.code(), why.message() + " before its receiver took it"));
  for (Pending& waiter : failed) waiter.callback(why, TensorValue{});
}

std::pair<std::size_t, std::size_t> LocalTable::pending() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t items = 0, waiters = 0;
  for (const auto& [key, queue] : items_) items += queue.size();
  for (const auto& [key, queue] : waiters_) waiters += queue.size();
  return {items, waiters};
}

std::size_t LocalTable::steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::unordered_set<std::int64_t> steps;
  for (const auto& [key, queue] : items_) steps.insert(key.step);
  for (const auto& [key, queue] : waiters_) steps.insert(key.step);
  for (const auto& [step, why] : aborted_) steps.insert(step);
  return steps.size();
}

}  // namespace tensorverbs
