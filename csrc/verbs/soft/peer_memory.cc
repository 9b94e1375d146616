#include "verbs/soft/peer_memory.h"

#include <iterator>

namespace tensorverbs::verbs::soft {

std::shared_ptr<SharedSegment> PeerMemory::segment(std::uint32_t id) {
  std::lock_guard lock(mu_);
  const auto it = segments_.find(id);
  return it == segments_.end() ? nullptr : it->second;
}

bool PeerMemory::should_request(std::uint32_t id, const void* asker) {
  std::lock_guard lock(mu_);
  if (segments_.count(id) != 0 || requested_.size() >= kMaxRequested) return false;
  return requested_.emplace(id, asker).second;
}

void PeerMemory::forget_requests_of(const void* asker) {
  std::lock_guard lock(mu_);
  for (auto it = requested_.begin(); it != requested_.end();) {
    it = it->second == asker ? requested_.erase(it) : std::next(it);
  }
}

Status PeerMemory::add_segment(std::uint32_t id, UniqueFd fd) {
  auto mapped = SharedSegment::map_peer(std::move(fd), 1, true, true);
  std::lock_guard lock(mu_);
  requested_.erase(id);
  if (!mapped.ok()) return mapped.status();
  segments_.emplace(id, mapped.take());  // a second copy of one segment is dropped
  return ok_status();
}

void PeerMemory::forget_request(std::uint32_t id) {
  std::lock_guard lock(mu_);
  requested_.erase(id);
}

}  // namespace tensorverbs::verbs::soft
