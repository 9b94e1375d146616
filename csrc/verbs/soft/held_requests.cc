#include "verbs/soft/held_requests.h"

#include <utility>

namespace tensorverbs::verbs::soft {

bool HeldRequests::reserve(std::size_t bytes) {
  if (bytes_ + bytes > kMaxHeldBytes) return false;
  bytes_ += bytes;
  return true;
}

void HeldRequests::push_front(Held held) {
  bytes_ += held.payload.size();
  held_.push_front(std::move(held));
}

HeldRequests::Held HeldRequests::pop_front() {
  Held held = std::move(held_.front());
  held_.pop_front();
  bytes_ -= held.payload.size();
  return held;
}

void HeldRequests::clear() {
  held_.clear();
  bytes_ = 0;
}

}  // namespace tensorverbs::verbs::soft
