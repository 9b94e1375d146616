// RegisteredPool: tensors allocated inside large blocks registered once (the seeds'
// allocator visitor, the paper's memory pool). Registering is slow, so the pool registers
// blocks and carves allocations out of them: the first of `first_block_bytes`, each next
// one twice the last up to `block_bytes` (an allocation larger gets a block of its size),
// so a task moving small tensors registers little; it grows up to `limit_bytes` and
// refuses (ResourceExhausted) past it. Blocks are registered for local access only: a
// peer reaches an allocation through a window over it (TensorLanding, TensorSource), never
// a block as a whole. An allocation returns to its block when the last reference to it is
// dropped, from any thread; a block stays registered while any allocation of it lives,
// even after close(). Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/status.h"
#include "verbs/memory_region.h"
#include "verbs/protection_domain.h"

namespace tensorverbs {

class RegisteredPool;

// One allocation: `size` bytes at `data`, inside `region`.
class PoolAllocation {
 public:
  PoolAllocation(std::shared_ptr<RegisteredPool> pool, std::size_t block, std::size_t offset,
                 std::size_t size, std::uint8_t* data, const verbs::MemoryRegion* region)
      : pool_(std::move(pool)), block_(block), offset_(offset), size_(size), data_(data),
        region_(region) {}
  ~PoolAllocation();
  PoolAllocation(const PoolAllocation&) = delete;
  PoolAllocation& operator=(const PoolAllocation&) = delete;

  std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const verbs::MemoryRegion& region() const { return *region_; }

 private:
  std::shared_ptr<RegisteredPool> pool_;
  std::size_t block_, offset_, size_;
  std::uint8_t* data_;
  const verbs::MemoryRegion* region_;
};

using PoolBuffer = std::shared_ptr<PoolAllocation>;

struct PoolStats {
  std::uint64_t registered_bytes = 0;
  std::uint64_t in_use_bytes = 0;
  std::uint64_t registrations = 0;  // blocks registered so far
};

class RegisteredPool : public std::enable_shared_from_this<RegisteredPool> {
 public:
  static constexpr std::size_t kAlign = 64;

  // the first block when none is given (or block_bytes, if smaller)
  static constexpr std::size_t kFirstBlock = std::size_t{4} << 20;

  RegisteredPool(std::shared_ptr<verbs::ProtectionDomain> pd, std::size_t block_bytes,
                 std::size_t limit_bytes, std::size_t first_block_bytes = kFirstBlock);

  // `nbytes` of registered memory (at least one byte is reserved for 0).
  Result<PoolBuffer> allocate(std::size_t nbytes);
  // The region holding [p, p + n), if the pool's memory does.
  const verbs::MemoryRegion* region_of(const void* p, std::size_t n) const;
  PoolStats stats() const;
  // Refuses further allocations and deregisters idle blocks (the others when freed).
  void close();

 private:
  friend class PoolAllocation;
  struct Block {
    std::unique_ptr<verbs::MemoryRegion> region;
    std::map<std::size_t, std::size_t> free;  // offset -> size, coalesced
    std::size_t in_use = 0;
  };

  bool take(Block& block, std::size_t size, std::size_t* offset);
  void release(std::size_t block, std::size_t offset, std::size_t size);

  std::shared_ptr<verbs::ProtectionDomain> pd_;
  const std::size_t block_bytes_, limit_bytes_;
  std::size_t next_block_;  // the length of the next block registered (before the cap)
  mutable std::mutex mu_;
  std::vector<Block> blocks_;
  std::map<std::uintptr_t, std::size_t> starts_;  // block start address -> index
  std::uint64_t registered_ = 0, in_use_ = 0, registrations_ = 0;
  bool closed_ = false;
};

}  // namespace tensorverbs
