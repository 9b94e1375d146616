#include "protocol/registered_pool.h"

#include <string>

namespace tensorverbs {

PoolAllocation::~PoolAllocation() { pool_->release(block_, offset_, size_); }

RegisteredPool::RegisteredPool(std::shared_ptr<verbs::ProtectionDomain> pd,
                               std::size_t block_bytes, std::size_t limit_bytes,
                               std::size_t first_block_bytes)
    : pd_(std::move(pd)), block_bytes_(block_bytes), limit_bytes_(limit_bytes),
      next_block_(first_block_bytes < block_bytes ? first_block_bytes : block_bytes) {}

bool RegisteredPool::take(Block& block, std::size_t size, std::size_t* offset) {
  for (auto it = block.free.begin(); it != block.free.end(); ++it) {  // first fit
    if (it->second < size) continue;
    *offset = it->first;
    const std::size_t left = it->second - size;
    if (left == 0) {
      block.free.erase(it);
    } else if (auto node = block.free.extract(it); !node.empty()) {  // (never empty: for GCC)
      // the rest of the range, under its node re-keyed (no allocation)
      node.key() = *offset + size;
      node.mapped() = left;
      block.free.insert(std::move(node));
    }
    block.in_use += size;
    return true;
  }
  return false;
}

Result<PoolBuffer> RegisteredPool::allocate(std::size_t nbytes) {
  const std::size_t size = nbytes <= kAlign ? kAlign : (nbytes + kAlign - 1) / kAlign * kAlign;
  if (size < nbytes) return Status(Code::kResourceExhausted, "cannot allocate " + std::to_string(nbytes) + " bytes");
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_) return Status(Code::kFailedPrecondition, "the registered-memory pool is closed");
  std::size_t index = 0, offset = 0;
  for (; index < blocks_.size(); ++index) {
    if (blocks_[index].region && take(blocks_[index], size, &offset)) break;
  }
  if (index == blocks_.size()) {
    const std::size_t length = size > next_block_ ? size : next_block_;
    if (registered_ + length > limit_bytes_) {
      return Status(Code::kResourceExhausted,
                    "registered-memory pool limit of " + std::to_string(limit_bytes_) +
                        " bytes reached (TENSORVERBS_POOL_LIMIT): cannot allocate " +
                        std::to_string(nbytes) + " bytes, " + std::to_string(registered_) +
                        " bytes are registered and a block of " + std::to_string(length) +
                        " more would be needed");
    }
    // local access only: a peer reaches an allocation through a window over it, never the
    // block through its own key
    Result<std::unique_ptr<verbs::MemoryRegion>> region =
        pd_->allocate_memory(length, verbs::kLocalWrite);
    if (!region.ok()) return region.status();
    Block block;
    block.region = region.take();
    block.free.emplace(0, length);
    starts_.emplace(block.region->addr(), blocks_.size());
    blocks_.push_back(std::move(block));
    registered_ += length;
    ++registrations_;
    next_block_ = next_block_ > block_bytes_ / 2 ? block_bytes_ : 2 * next_block_;
    take(blocks_.back(), size, &offset);
  }
  in_use_ += size;
  Block& block = blocks_[index];
  return std::make_shared<PoolAllocation>(shared_from_this(), index, offset, nbytes,
                                          block.region->data() + offset, block.region.get());
}

void RegisteredPool::release(std::size_t index, std::size_t offset, std::size_t nbytes) {
  const std::size_t size = nbytes <= kAlign ? kAlign : (nbytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard<std::mutex> lock(mu_);
  Block& block = blocks_[index];
  block.in_use -= size;
  in_use_ -= size;
  // merged with its free neighbours, whose nodes it reuses (no allocation unless it has
  // none)
  auto next = block.free.lower_bound(offset);
  const bool joins_next = next != block.free.end() && next->first == offset + size;
  auto prev = next == block.free.begin() ? block.free.end() : std::prev(next);
  if (prev != block.free.end() && prev->first + prev->second == offset) {
    prev->second += size;
    if (joins_next) {
      prev->second += next->second;
      block.free.erase(next);
    }
  } else if (joins_next) {
    if (auto node = block.free.extract(next); !node.empty()) {  // (never empty: for GCC)
      node.key() = offset;
      node.mapped() += size;
      block.free.insert(std::move(node));
    }
  } else {
    block.free.emplace(offset, size);
  }
  if (closed_ && block.in_use == 0 && block.region) {
    starts_.erase(block.region->addr());
    registered_ -= block.region->length();
    block.region.reset();
  }
}

const verbs::MemoryRegion* RegisteredPool::region_of(const void* p, std::size_t n) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = starts_.upper_bound(addr);
  if (it == starts_.begin()) return nullptr;
  const verbs::MemoryRegion* region = blocks_[std::prev(it)->second].region.get();
  return region && region->contains(p, n) ? region : nullptr;
}

PoolStats RegisteredPool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {registered_, in_use_, registrations_};
}

void RegisteredPool::close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  for (Block& block : blocks_) {
    if (block.in_use == 0 && block.region) {
      starts_.erase(block.region->addr());
      registered_ -= block.region->length();
      block.region.reset();
    }
  }
}

}  // namespace tensorverbs
