// LocalTable: the tag matching of this task's sends with recvs (local ones, and peers'
// requests answered by RdmaTensorResponse), scoped by step.
//
// A send puts its value in the table unless a recv already waits for it; a recv takes the
// value if it is there and waits otherwise; first in, first out per key. Aborting a step
// fails its waiting recvs and refuses its later sends and recvs until it is cleaned up; the
// sends it drops (aborted or cleaned up) have their completions failed with the reason. A
// step cleaned up stays so (CleanedSteps) until it is used again: a value of it given back
// meanwhile is dropped, its send failed. A step's state is dropped as soon as it holds
// nothing (no value, no recv, no abort).
// A recv of a watched name that waits (a relay broadcast's late receiver) is noted in
// unmatched() for the control plane.
// Callbacks run outside the lock, in the thread that completed the match. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/recycling_map.h"
#include "core/status.h"
#include "protocol/cleaned_steps.h"
#include "protocol/rendezvous_key.h"
#include "protocol/tensor_value.h"
#include "protocol/unmatched_recvs.h"

namespace tensorverbs {

class LocalTable {
 public:
  // Called once: with an error status (value empty), or OK and the value.
  using Callback = std::function<void(Status, TensorValue)>;

  // A waiting recv, for withdraw(); id 0 means the callback already ran.
  struct Waiter {
    StepKey key;
    std::uint64_t id = 0;
  };

  // Offers `value`; fails (Aborted) if the step is aborted. A step cleaned up is used again.
  Status send(std::int64_t step, const RendezvousKey& key, TensorValue value);
  // Gives back a value a recv took but could not deliver: matched again before any later
  // send of the key. Dropped if the step was aborted or cleaned up meanwhile (its send fails).
  void requeue(std::int64_t step, const RendezvousKey& key, TensorValue value);
  // Matches a recv: `callback` runs now if the value (or the step's abort) is there. `keep`
  // is held as long as the callback is (so that a callback of one pointer, which a
  // std::function holds in place, can keep its target alive: no heap per recv).
  Waiter recv(std::int64_t step, const RendezvousKey& key, Callback callback,
              std::shared_ptr<const void> keep = nullptr);
  // Withdraws a waiting recv; false if its callback already ran (or is running).
  bool withdraw(const Waiter& waiter);

  void abort_step(std::int64_t step, const Status& why);
  // A recv of a peer's tensor at `step` starts, a use of the step (one cleaned up is used
  // again): the step's abort, if it is aborted.
  std::optional<Status> start_recv(std::int64_t step);
  // Whether a tensor of `step` that comes late is dropped: the step is aborted, or cleaned
  // up and not used since.
  bool drops_late(std::int64_t step) const;
  // Forgets the step; its waiting recvs fail with Aborted.
  void cleanup_step(std::int64_t step);

  // Notes in unmatched() each recv of `name` at `step` that waits, now or later, whatever
  // its source and destination, until unwatch().
  void watch(std::int64_t step, const std::string& name);
  void unwatch(std::int64_t step, const std::string& name);
  UnmatchedRecvs& unmatched() { return unmatched_; }

  // (values waiting for a recv, recvs waiting for a value)
  std::pair<std::size_t, std::size_t> pending() const;
  // Steps the table holds state for.
  std::size_t steps() const;

 private:
  struct Pending {
    std::uint64_t id;
    Callback callback;
    std::shared_ptr<const void> keep;
  };
  // Queues by key, whose nodes and queue memory serve the next keys.
  template <typename T>
  using Queues = RecyclingMap<StepKey, std::deque<T>, StepKeyHash, ClearKeeping>;
  // What the table holds for a step; cleared, it keeps its memory for the next step (its
  // keys' nodes go to the table's spares, which every step draws on).
  struct Step {
    Queues<TensorValue> items{0};
    Queues<Pending> waiters{0};
    std::optional<Status> aborted;
    bool empty() const { return items.empty() && waiters.empty() && !aborted; }
    void clear() noexcept {
      items.clear();
      waiters.clear();
      aborted.reset();
    }
  };
  static constexpr std::size_t kSpareSteps = 16;
  // Keys' nodes kept for the next keys of any step: enough for a batch of blocks (a few MiB).
  static constexpr std::size_t kSpareKeys = 4096;

  // The state of `step`, added if it has none (drawing on the table's spare nodes).
  Step& state_of(std::int64_t step);

  void offer(std::int64_t step, const RendezvousKey& key, TensorValue value, bool first,
             Status* refused);
  void prune(std::int64_t step, const Step& state);
  // The step's values and waiting recvs, moved out of `state`, which is left empty of them.
  static void take(Step& state, std::vector<TensorValue>* values, std::vector<Pending>* waiters);

  mutable std::mutex mu_;
  Queues<TensorValue>::Spares item_spares_{{}, kSpareKeys};  // (before the steps: they outlive them)
  Queues<Pending>::Spares waiter_spares_{{}, kSpareKeys};
  RecyclingMap<std::int64_t, Step, std::hash<std::int64_t>, ClearKeeping> steps_{kSpareSteps, kSpareSteps};
  CleanedSteps cleaned_;
  std::uint64_t next_id_ = 1;
  std::set<std::pair<std::int64_t, std::string>> watched_;  // (step, name)
  UnmatchedRecvs unmatched_;
};

}  // namespace tensorverbs
