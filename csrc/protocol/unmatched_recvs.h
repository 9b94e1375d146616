// UnmatchedRecvs: the recvs of watched names that wait in the LocalTable for a send nobody
// made (a relay broadcast's late receivers, served by whoever has the tensor), queued for
// the control plane, which takes them with next(). Bounded: beyond kMaxQueued the oldest
// goes (a peer asking faster than they are taken cannot grow it; a late receiver whose
// note went is not served, its recv waits to its deadline). Thread-safe.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>

#include "protocol/rendezvous_key.h"

namespace tensorverbs {

class UnmatchedRecvs {
 public:
  static constexpr std::size_t kMaxQueued = 4096;

  // Queues a recv that waits (its step and key).
  void note(StepKey recv);
  // The next recv queued; waits up to `timeout` seconds (< 0: for ever). Nothing on timeout,
  // or once end() was called.
  std::optional<StepKey> next(double timeout);
  // next() returns nothing from now on (its follower ends).
  void end();

 private:
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<StepKey> queued_;
  bool ended_ = false;
};

}  // namespace tensorverbs
