#include "protocol/cleaned_steps.h"

namespace tensorverbs {

void CleanedSteps::add(std::int64_t step) {
  const std::uint64_t added = next_++;
  steps_[step] = added;
  order_.emplace_back(step, added);
  if (order_.size() <= kKept) return;
  const auto [oldest, when] = order_.front();
  order_.pop_front();
  auto it = steps_.find(oldest);
  if (it != steps_.end() && it->second == when) steps_.erase(it);  // (not cleaned up again since)
}

}  // namespace tensorverbs
