// RecvTracker: the recvs in flight (requests to peers and recvs from this task's table), in
// the order they started, so that a step's abort and the server's stop reach them all, and a
// late tensor (its caller gave up as it arrived) goes to the oldest recv of its key and step
// still waiting; one no recv waits for is kept (LateTensors) for the next. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "core/recycling_map.h"
#include "core/status.h"
#include "protocol/late_tensors.h"
#include "protocol/pending_recv.h"
#include "protocol/rendezvous_key.h"
#include "protocol/tensor_value.h"

namespace tensorverbs {

class RecvTracker {
 public:
  // Tracks `recv`, unless a late tensor of its key is kept: then that tensor, `recv`
  // untracked. After stop(), `recv` is given up (Cancelled) instead.
  std::optional<TensorValue> track(const std::shared_ptr<PendingRecv>& recv);
  void forget(const PendingRecv* recv);
  // The oldest late tensor kept for `key`, no longer kept.
  std::optional<TensorValue> take_late(const StepKey& key);
  // Hands `value` to the oldest recv of `key` still waiting, else keeps it for the next
  // recv of `key` (after stop(), drops it).
  void hand_over(const StepKey& key, TensorValue value);
  // Gives the recvs of `step` up with `why` and drops the step's late tensors.
  void abort_step(std::int64_t step, const Status& why);
  // Drops the late tensors of `step`.
  void cleanup_step(std::int64_t step);
  // Gives every recv up (Cancelled) and drops the late tensors; see track().
  void stop();

 private:
  struct Tracked {
    std::uint64_t order;  // when it was started: late tensors go to the oldest
    std::weak_ptr<PendingRecv> recv;
  };

  std::mutex mu_;
  bool stopped_ = false;
  std::uint64_t next_order_ = 0;
  RecyclingMap<const PendingRecv*, Tracked> recvs_;
  LateTensors late_;
};

}  // namespace tensorverbs
