// BlockCacheAllocator: an allocator whose blocks, once freed, wait for the next allocation of
// their size instead of going back to the heap (at most kKept of each size by default: 64
// KiB of a std::deque's 512-byte chunks), so that a node-based container whose length stays about
// steady (a std::deque used as a queue, whose chunks it frees at the front and allocates
// at the back) allocates nothing per element.
// Copies and rebinds share one cache; not thread-safe (the container's owner locks it).
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace tensorverbs {

class BlockCache {
 public:
  static constexpr std::size_t kKept = 128;

  // Keeps at most `most` blocks of each size.
  explicit BlockCache(std::size_t most = kKept) : most_(most) {}
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  ~BlockCache() {
    for (auto& [bytes, blocks] : sizes_) {
      for (void* block : blocks) ::operator delete(block);
    }
  }

  void* take(std::size_t bytes) {
    for (auto& [size, blocks] : sizes_) {
      if (size == bytes && !blocks.empty()) {
        void* block = blocks.back();
        blocks.pop_back();
        return block;
      }
    }
    return ::operator new(bytes);
  }

  void give(void* block, std::size_t bytes) noexcept {
    for (auto& [size, blocks] : sizes_) {
      if (size == bytes) {
        if (blocks.size() < most_) {
          try {
            blocks.push_back(block);  // (within kKept, into the room reserved: no throw)
            return;
          } catch (...) {  // no memory to keep it: freed instead
          }
        }
        break;
      }
    }
    ::operator delete(block);
  }

  // Keeps blocks of `bytes` from now on (room for kKept of them reserved; a cache made for
  // more grows its room as they come back).
  void keep(std::size_t bytes) {
    for (auto& entry : sizes_) {
      if (entry.first == bytes) return;
    }
    sizes_.emplace_back(bytes, std::vector<void*>());
    sizes_.back().second.reserve(std::min(most_, kKept));
  }

  // The blocks of `bytes` it holds for the next allocations.
  std::size_t kept(std::size_t bytes) const {
    for (const auto& [size, blocks] : sizes_) {
      if (size == bytes) return blocks.size();
    }
    return 0;
  }

 private:
  const std::size_t most_;
  std::vector<std::pair<std::size_t, std::vector<void*>>> sizes_;
};

template <class T>
class BlockCacheAllocator {
 public:
  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "blocks come from plain operator new");
  using value_type = T;

  // (`most`: the blocks of each size it keeps at most)
  explicit BlockCacheAllocator(std::size_t most = BlockCache::kKept)
      : cache_(std::make_shared<BlockCache>(most)) {}
  template <class U>
  BlockCacheAllocator(const BlockCacheAllocator<U>& other) noexcept  // NOLINT: a rebind converts
      : cache_(other.cache()) {}

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    cache_->keep(bytes);
    return static_cast<T*>(cache_->take(bytes));
  }
  void deallocate(T* block, std::size_t n) noexcept { cache_->give(block, n * sizeof(T)); }

  const std::shared_ptr<BlockCache>& cache() const noexcept { return cache_; }

  template <class U>
  bool operator==(const BlockCacheAllocator<U>& other) const noexcept {
    return cache_ == other.cache();
  }
  template <class U>
  bool operator!=(const BlockCacheAllocator<U>& other) const noexcept {
    return !(*this == other);
  }

 private:
  std::shared_ptr<BlockCache> cache_;
};

}  // namespace tensorverbs
