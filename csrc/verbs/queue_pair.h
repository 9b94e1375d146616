// QueuePair (ibv_qp): a reliable-connected queue pair.
//
// endpoint() is what the peer's connect() needs (opaque bytes: the control plane carries
// them); connect() takes the queue pair to RTS. Work requests that fail complete with an
// error status, and the first failure takes the queue pair to the error state, flushing
// everything outstanding; post_* return a Status only for misuse (too many requests
// outstanding, not connected). All methods are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"
#include "verbs/memory_region.h"
#include "verbs/memory_window.h"
#include "verbs/work.h"

namespace tensorverbs::verbs {

enum class QpState : std::uint8_t { kInit, kRtr, kRts, kError };

// The fields every provider's endpoint has (the GetRemoteAddress Channel message shows
// them); the rest of the endpoint is the provider's.
struct EndpointSummary {
  std::string provider;
  std::uint32_t qp_num = 0;
  std::uint32_t psn = 0;
  std::uint16_t lid = 0;
  std::uint32_t mtu = 0;  // bytes
};

// What a queue pair's further links do (the soft provider over TCP with TENSORVERBS_LINKS;
// zeros elsewhere).
struct LinkStats {
  std::uint64_t live = 0;     // links carrying stripes now
  std::uint64_t breaks = 0;   // times a link was left out (it broke, or was not reached)
  std::uint64_t rejoins = 0;  // times a link left out joined again
};

class QueuePair {
 public:
  virtual ~QueuePair() = default;
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  virtual std::uint32_t qp_num() const = 0;
  virtual QpState state() const = 0;
  virtual std::string endpoint() const = 0;
  virtual EndpointSummary summary() const = 0;
  // The path MTU negotiated by connect() (the smaller of both ends), in bytes.
  virtual std::uint32_t mtu() const = 0;

  virtual Status connect(std::string_view remote_endpoint) = 0;
  virtual Status post_send(const SendWr* wrs, std::size_t count) = 0;
  // How many send requests post_send takes now (the send queue's free entries).
  virtual std::size_t send_room() const = 0;
  virtual Status post_recv(const RecvWr* wrs, std::size_t count) = 0;
  // Moves to the error state (flushing outstanding work) with `why` as the detail.
  virtual void to_error(std::string_view why) = 0;
  // Why the queue pair failed, or why its last failed completion did; "" if it did not.
  virtual std::string error_detail() const = 0;
  // Whether the peer reaches memory of ProtectionDomain::allocate_memory faster than other
  // registered memory (the soft provider on one host: shared memory, where other memory
  // takes the stream).
  virtual bool prefers_allocated_memory() const { return false; }
  virtual LinkStats link_stats() const { return {}; }

  // A window over [addr, addr + length) of `region` (registered with this queue pair's
  // protection domain) that only this queue pair's peer can reach. ibverbs: a type 2
  // memory window, bound by a work request on this send queue, so the queue pair must be
  // connected; the bind precedes every request posted after this returns (its rkey may
  // travel in any of them; sent another way, it is valid once a later request on this
  // queue pair completed); a device without type 2 windows (or soft-RoCE, by default)
  // registers the range instead, which any queue pair of the domain reaches. soft: a key
  // bound to this queue pair, made at once.
  virtual Result<std::unique_ptr<MemoryWindow>> bind_window(const MemoryRegion& region,
                                                           std::uint64_t addr,
                                                           std::size_t length,
                                                           std::uint32_t access) = 0;

 protected:
  QueuePair() = default;
};

}  // namespace tensorverbs::verbs
