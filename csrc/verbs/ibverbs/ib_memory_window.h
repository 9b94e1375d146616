// IbMemoryWindow: a type 2 memory window (ibv_alloc_mw), bound by an IBV_WR_BIND_MW work
// request on the queue pair whose peer may use it: the device lets only that queue pair's
// peer through, only within the range, only until the window is invalidated. Each bind
// draws the key's byte at random (the device's index is the rest of the key).
//
// revoke():
//  - the queue pair is in the error state (it takes no remote access at all), or the bind
//    is known to have run (its signaled completion was polled, as it usually has been by
//    the time the peer used the rkey): the window is deallocated (ibv_dealloc_mw, done when
//    it returns) and revoke() returns true;
//  - else a local invalidation (IBV_WR_LOCAL_INV) is posted behind the bind and revoke()
//    returns false: quiesced() turns true once it has left the send queue, seen when the
//    completion queue is polled. The window goes back to the queue pair's pool at once (a
//    later bind on the same send queue runs after the invalidation).
// The region must stay registered until then (a region windows are bound to cannot be
// deregistered).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "core/status.h"
#include "verbs/ibverbs/libibverbs.h"
#include "verbs/memory_window.h"

namespace tensorverbs::verbs {
class MemoryRegion;
}

namespace tensorverbs::verbs::ibverbs {

class IbQueuePair;

class IbMemoryWindow final : public MemoryWindow {
 public:
  static Result<std::unique_ptr<MemoryWindow>> bind(std::shared_ptr<IbQueuePair> qp,
                                                    const MemoryRegion& region,
                                                    std::uint64_t addr, std::size_t length,
                                                    std::uint32_t access);
  ~IbMemoryWindow() override;

  bool revoke() override;
  bool quiesced() override;

 private:
  IbMemoryWindow(std::shared_ptr<IbQueuePair> qp, ibv_mw* mw, std::uint64_t addr,
                 std::size_t length, std::uint32_t rkey);
  bool invalidate();  // under mu_: true when no access can happen any more

  std::shared_ptr<IbQueuePair> qp_;
  std::mutex mu_;
  ibv_mw* mw_;  // null once the invalidation is posted (or the window deallocated)
  bool revoked_ = false;
  bool done_ = false;  // nothing can reach the range any more
  std::shared_ptr<std::atomic<bool>> bound_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<bool>> invalidated_ = std::make_shared<std::atomic<bool>>(false);
};

}  // namespace tensorverbs::verbs::ibverbs
