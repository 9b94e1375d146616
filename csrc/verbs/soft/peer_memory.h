// PeerMemory: a peer context's memory as this process sees it: its key table (mapped),
// its doorbell, and the segments mapped so far, shared by every queue pair to that
// context. A peer is known by the device and inode of the key table it passed, never by
// what it claims. Segments come on demand (SEG frames) and are never unmapped while the
// peer is known, so a copy in progress never loses its mapping.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>

#include "core/status.h"
#include "verbs/soft/doorbell.h"
#include "verbs/soft/key_table.h"
#include "verbs/soft/shared_segment.h"

namespace tensorverbs::verbs::soft {

class PeerMemory {
 public:
  PeerMemory(std::shared_ptr<KeyTableView> table, std::unique_ptr<PeerDoorbell> doorbell)
      : table_(std::move(table)), doorbell_(std::move(doorbell)) {}

  const KeyTableView& table() const { return *table_; }
  const PeerDoorbell& doorbell() const { return *doorbell_; }

  // The mapping of segment `id`, or nullptr when it is not mapped yet.
  std::shared_ptr<SharedSegment> segment(std::uint32_t id);
  // Whether `asker` (a queue pair) should ask for the segment now: true once per segment,
  // until it comes, while fewer than kMaxRequested are asked for (each answer carries a
  // descriptor, and the stream holds only so many ahead of the frames that use them).
  bool should_request(std::uint32_t id, const void* asker);
  static constexpr std::size_t kMaxRequested = 32;
  // `asker` is gone: what it asked for will not come (others may ask again).
  void forget_requests_of(const void* asker);
  // Maps segment `id` from the descriptor the peer sent.
  Status add_segment(std::uint32_t id, UniqueFd fd);
  // The peer has no segment `id` (it may ask again later).
  void forget_request(std::uint32_t id);

 private:
  std::shared_ptr<KeyTableView> table_;
  std::unique_ptr<PeerDoorbell> doorbell_;
  std::mutex mu_;
  std::unordered_map<std::uint32_t, std::shared_ptr<SharedSegment>> segments_;
  std::unordered_map<std::uint32_t, const void*> requested_;  // id -> who asked
};

}  // namespace tensorverbs::verbs::soft
