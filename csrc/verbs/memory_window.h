// MemoryWindow: remote access to one range of a registered region, under a key of its
// own, for as long as the window lives (a type 2 memory window, or its equivalent).
//
// The protocol gives a peer a window over each landing, never the whole pool: the peer
// reaches only that landing, and only while its request lasts. revoke() ends remote
// access; when it returns false an access already under way may still be finishing,
// and the range must not be reused until quiesced() turns true.
//
// Two places make windows: ProtectionDomain::bind_window (any queue pair of the domain
// reaches it with its rkey) and QueuePair::bind_window (only that queue pair's peer: on
// ibverbs a type 2 memory window, bound and invalidated by work requests on its send
// queue, so its revoke() may return false until the invalidation ran; quiesced() turns
// true once its completion queue has been polled past it). Either way the window's region
// must stay registered until the window is revoked and quiesced (devices refuse to
// deregister a region windows are bound to); the region itself needs local access only.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tensorverbs::verbs {

class MemoryWindow {
 public:
  virtual ~MemoryWindow() = default;  // revokes, if revoke() was not called
  MemoryWindow(const MemoryWindow&) = delete;
  MemoryWindow& operator=(const MemoryWindow&) = delete;

  std::uint64_t addr() const { return addr_; }
  std::size_t length() const { return length_; }
  std::uint32_t rkey() const { return rkey_; }

  // Ends remote access; true when no access can still be under way.
  virtual bool revoke() = 0;
  // After a revoke() that returned false: true once the range may be reused.
  virtual bool quiesced() = 0;

 protected:
  MemoryWindow(std::uint64_t addr, std::size_t length, std::uint32_t rkey)
      : addr_(addr), length_(length), rkey_(rkey) {}

 private:
  std::uint64_t addr_;
  std::size_t length_;
  std::uint32_t rkey_;
};

}  // namespace tensorverbs::verbs
