#include "protocol/late_tensors.h"

#include <iterator>
#include <utility>

namespace tensorverbs {

void LateTensors::keep(const StepKey& key, TensorValue value) { tensors_[key].push_back(std::move(value)); }

std::optional<TensorValue> LateTensors::take(const StepKey& key) {
  auto it = tensors_.find(key);
  if (it == tensors_.end()) return std::nullopt;
  TensorValue value = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) tensors_.erase(it);
  return value;
}

void LateTensors::drop_step(std::int64_t step) {
  for (auto it = tensors_.begin(); it != tensors_.end();) {
    it = it->first.step == step ? tensors_.erase(it) : std::next(it);
  }
}

}  // namespace tensorverbs
