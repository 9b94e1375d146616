// CleanedSteps: the steps cleaned up lately, so that a value of one that comes back afterwards
// (given back by an answer whose channel broke, or a tensor that came late) is dropped instead
// of bringing the step back, where nothing would clean it up again. A step used again (a send
// or a recv of it) is no longer one. Not locked: its owner (LocalTable) holds it under its own
// lock.
//
// Only the last kKept steps cleaned up are remembered: step ids are any int64 and a job
// cleans one up per iteration, so a record of every one would grow without bound, while what
// comes back does so as the transfers in flight at the clean-up end (a broken channel fails
// them within seconds: its retransmission timeout, the control plane's health watch), long
// before kKept more steps are cleaned up. One that came back later would bring its step back.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <utility>

namespace tensorverbs {

class CleanedSteps {
 public:
  static constexpr std::size_t kKept = 4096;

  void add(std::int64_t step);
  bool contains(std::int64_t step) const { return steps_.count(step) != 0; }
  // `step` is in use again.
  void erase(std::int64_t step) {
    if (!steps_.empty()) steps_.erase(step);
  }

 private:
  std::uint64_t next_ = 0;
  std::unordered_map<std::int64_t, std::uint64_t> steps_;  // step -> when it was added
  std::deque<std::pair<std::int64_t, std::uint64_t>> order_;  // oldest first (some used again)
};

}  // namespace tensorverbs
