// LateTensors: the store of late tensors, which came for a recv whose caller gave up as they
// arrived (or refused them), kept by key and step, oldest first, for the next recv of the
// same key and step. Not locked: its owner (RecvTracker) holds it under its own lock.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>

#include "protocol/rendezvous_key.h"
#include "protocol/tensor_value.h"

namespace tensorverbs {

class LateTensors {
 public:
  void keep(const StepKey& key, TensorValue value);
  // The oldest tensor kept for `key`, if any, no longer kept.
  std::optional<TensorValue> take(const StepKey& key);
  // Drops the tensors of `step`.
  void drop_step(std::int64_t step);
  void clear() { tensors_.clear(); }

 private:
  std::unordered_map<StepKey, std::deque<TensorValue>, StepKeyHash> tensors_;
};

}  // namespace tensorverbs
