// TensorLanding: where the bytes of a tensor from a peer land (TensorSource's counterpart on
// the receiving side). A recv may name a destination, memory of its caller meant to hold
// the tensor (Python's recv(out=...)). A tensor that fits a destination inside the pool
// (Python's server.allocate) lands there as it is, at any size. One that fits another
// destination and is at least kRegisterFrom bytes lands in it, registered for the
// transfer, unless the peer reaches the pool faster than other memory (the soft provider
// on one host writes the pool's shared memory itself, other memory only over its
// stream). Anything else (no
// destination, another tensor than expected, a small one, memory that cannot be
// registered) lands in the registered pool, and the caller copies what it needs. This is
// the one place that decides where a received tensor's bytes land.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "protocol/protocol_counters.h"
#include "protocol/registered_pool.h"
#include "protocol/tensor_meta.h"
#include "verbs/memory_region.h"
#include "verbs/protection_domain.h"

namespace tensorverbs {

// From this size on, registering the destination costs no more than landing in the pool
// and copying (measured with the soft provider over TCP: even up to 256 KiB, 5-25% faster
// from 1 MiB on; on one host, landing in the pool was faster at every size).
inline constexpr std::size_t kRegisterFrom = 256 << 10;

// The caller's memory for a tensor of `dtype` and `shape`: `nbytes` writable bytes at `data`.
struct RecvDestination {
  std::int32_t dtype = 0;
  TensorShape shape;
  std::uint8_t* data = nullptr;
  std::uint64_t nbytes = 0;
  std::shared_ptr<const void> keepalive;  // keeps `data` valid

  // Whether a tensor of `meta` (dead or not) belongs there: its DataType, shape and size.
  bool fits(const TensorMeta& meta) const {
    return meta.dmaable() && meta.dtype == dtype && meta.shape == shape && meta.nbytes == nbytes;
  }
};

class TensorLanding {
 public:
  // Registered memory for a tensor of `meta` (at least one byte): in `destination` when it
  // fits and either lies in `pool` or is large enough for a peer that does not
  // `prefers_pool`, else a pool allocation.
  static Result<std::shared_ptr<TensorLanding>> prepare(const TensorMeta& meta,
                                                        const RecvDestination* destination,
                                                        bool prefers_pool, RegisteredPool& pool,
                                                        verbs::ProtectionDomain& pd,
                                                        ProtocolCounters& counters);
  ~TensorLanding();
  TensorLanding(const TensorLanding&) = delete;
  TensorLanding& operator=(const TensorLanding&) = delete;

  std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const verbs::MemoryRegion& region() const { return *region_; }
  // Whether the bytes land in the caller's destination (else in a pool allocation).
  bool in_destination() const { return destination_ != nullptr; }

 private:
  TensorLanding() = default;
  void land_in(const RecvDestination& destination, const verbs::MemoryRegion& region);
  std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  const verbs::MemoryRegion* region_ = nullptr;
  PoolBuffer pooled_;
  std::shared_ptr<const void> destination_;           // outlives the registration of it (set
                                                      // when landing in the destination)
  std::unique_ptr<verbs::MemoryRegion> registration_;
};

}  // namespace tensorverbs
