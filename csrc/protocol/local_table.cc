#include "protocol/local_table.h"

#include <string>

namespace tensorverbs {

namespace {

// The oldest entry of `key`'s queue, taken out of it (the queue dropped once empty).
template <typename Queues>
std::optional<typename Queues::mapped_type::value_type> pop_front(Queues& queues,
                                                                  const StepKey& key) {
  auto* queue = queues.find(key);
  if (queue == nullptr) return std::nullopt;
  auto entry = std::move(queue->front());
  queue->pop_front();
  if (queue->empty()) queues.erase(key);
  return entry;
}

// Moves every entry of `queues` to `out`, the queues dropped.
template <typename Queues, typename T>
void take_all(Queues& queues, std::vector<T>* out) {
  for (auto& [key, queue] : queues) {
    for (T& entry : queue) out->push_back(std::move(entry));
  }
  queues.clear();
}

Status cleaned_up(std::int64_t step) {
  return Status(Code::kAborted, "step " + std::to_string(step) + " was cleaned up");
}

// Why a send whose value the step's clean-up dropped fails.
Status dropped_at_cleanup(std::int64_t step) {
  const Status why = cleaned_up(step);
  return Status(why.code(), why.message() + " before its receiver took it");
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
  bool dropped = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!first) cleaned_.erase(step);  // a send uses the step again
    dropped = first && cleaned_.contains(step);  // it would bring the step back, for nobody
    if (!dropped) {
      Step& state = state_of(step);
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
  }
  if (dropped) {  // (its send fails, and its memory goes, outside the lock)
    if (value.ticket) value.ticket->fail(dropped_at_cleanup(step));
    return;
  }
  waiter->callback(Status(), std::move(value));
}

LocalTable::Waiter LocalTable::recv(std::int64_t step, const RendezvousKey& key,
                                    Callback callback, std::shared_ptr<const void> keep) {
  const StepKey match{step, key};
  Status error;
  std::optional<TensorValue> value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Step& state = state_of(step);
    if (state.aborted) {
      error = *state.aborted;
    } else {
      value = pop_front(state.items, match);
      if (!value) {
        const std::uint64_t id = next_id_++;
        state.waiters[match].push_back(Pending{id, std::move(callback), std::move(keep)});
        if (!watched_.empty() && watched_.count({step, key.name}) != 0) unmatched_.note(match);
        return Waiter{match, id};
      }
      prune(step, state);
    }
  }
  callback(std::move(error), value ? std::move(*value) : TensorValue{});
  return Waiter{match, 0};
}

void LocalTable::watch(std::int64_t step, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!watched_.emplace(step, name).second) return;
  const Step* state = steps_.find(step);
  if (state == nullptr) return;
  for (const auto& [key, queue] : state->waiters) {  // those waiting already
    if (key.key.name != name) continue;
    for (std::size_t i = 0; i < queue.size(); ++i) unmatched_.note(key);
  }
}

void LocalTable::unwatch(std::int64_t step, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  watched_.erase({step, name});
}

bool LocalTable::withdraw(const Waiter& waiter) {
  if (waiter.id == 0) return false;
  std::lock_guard<std::mutex> lock(mu_);
  Step* state = steps_.find(waiter.key.step);
  if (state == nullptr) return false;
  auto* queue = state->waiters.find(waiter.key);
  if (queue == nullptr) return false;
  for (auto it = queue->begin(); it != queue->end(); ++it) {
    if (it->id != waiter.id) continue;
    queue->erase(it);
    if (queue->empty()) state->waiters.erase(waiter.key);
    prune(waiter.key.step, *state);
    return true;
  }
  return false;
}

void LocalTable::take(Step& state, std::vector<TensorValue>* values,
                      std::vector<Pending>* waiters) {
  take_all(state.items, values);
  take_all(state.waiters, waiters);
}

void LocalTable::abort_step(std::int64_t step, const Status& why) {
  std::vector<TensorValue> dropped;
  std::vector<Pending> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Step& state = state_of(step);
    state.aborted = why;
    take(state, &dropped, &failed);
  }
  fail_sends(dropped, why);
  for (Pending& waiter : failed) waiter.callback(why, TensorValue{});
}

std::optional<Status> LocalTable::start_recv(std::int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  cleaned_.erase(step);
  const Step* state = steps_.find(step);
  return state == nullptr ? std::nullopt : state->aborted;
}

bool LocalTable::drops_late(std::int64_t step) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Step* state = steps_.find(step);
  return cleaned_.contains(step) || (state != nullptr && state->aborted);
}

void LocalTable::cleanup_step(std::int64_t step) {
  std::vector<TensorValue> dropped;
  std::vector<Pending> failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // (a value of it out with a recv may still come back, even when it holds nothing now)
    cleaned_.add(step);
    Step* state = steps_.find(step);
    if (state == nullptr) return;
    take(*state, &dropped, &failed);
    steps_.erase(step);
  }
  if (dropped.empty() && failed.empty()) return;
  const Status why = cleaned_up(step);
  fail_sends(dropped, dropped_at_cleanup(step));
  for (Pending& waiter : failed) waiter.callback(why, TensorValue{});
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

LocalTable::Step& LocalTable::state_of(std::int64_t step) {
  Step& state = steps_[step];
  state.items.share(&item_spares_);
  state.waiters.share(&waiter_spares_);
  return state;
}

}  // namespace tensorverbs
