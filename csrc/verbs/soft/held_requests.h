// HeldRequests: the requests a soft queue pair's responder holds, in sequence order, while
// the one first in line waits for a receive (as hardware retries on receiver-not-ready),
// each with its payload, within a budget of kMaxHeldBytes of payload. Not locked: its
// queue pair's mutex guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <vector>

#include "verbs/soft/wire.h"

namespace tensorverbs::verbs::soft {

inline constexpr std::size_t kMaxHeldBytes = 256u << 20;  // payloads held for receives

class HeldRequests {
 public:
  struct Held {
    FrameHeader header;
    std::vector<std::uint8_t> payload;
    bool applied = false;  // a write whose data landed; only its immediate waits
  };

  bool empty() const { return held_.empty(); }
  const Held& front() const { return held_.front(); }
  // Takes `bytes` of the budget for a payload about to be read into a buffer (then held
  // with push_back); false when the budget does not have them.
  bool reserve(std::size_t bytes);
  // Gives back `bytes` reserved for a payload held elsewhere (a stripe that came early).
  void release(std::size_t bytes) { bytes_ -= bytes < bytes_ ? bytes : bytes_; }
  // Holds a request last in line whose payload's bytes were reserved.
  void push_back(Held held) { held_.push_back(std::move(held)); }
  // Holds a request first in line, its payload taken from the budget.
  void push_front(Held held);
  // The request first in line, no longer held (its bytes back in the budget).
  Held pop_front();
  void clear();

 private:
  std::deque<Held> held_;
  std::size_t bytes_ = 0;
};

}  // namespace tensorverbs::verbs::soft
