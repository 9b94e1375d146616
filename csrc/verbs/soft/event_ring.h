// EventRing: a single-producer, single-consumer ring of events in shared memory, one per
// queue pair, created by the consumer (the queue pair that receives) and mapped by its
// peer. An event says that a write with immediate landed through shared memory.
//
// Layout: a 256-byte header (magic, version, capacity; tail, written by the producer;
// head, written by the consumer; producer_waiting, set by a producer that found the ring
// full; consumer_closed, set by the consumer's queue pair as it enters the error state)
// and `capacity` 16-byte entries: seq | imm | byte_len | flags. The producer writes
// an entry, then publishes it with a release store of tail; the consumer reads tail with
// acquire, copies the entry, checks it, then releases the slot by storing head. Each side
// distrusts what the other wrote: head and tail are checked against the capacity, entries
// are decoded by decode_ring_event().
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "verbs/soft/shared_segment.h"

namespace tensorverbs::verbs::soft {

inline constexpr std::uint64_t kRingMagic = 0x3147'4e52'5654ULL;  // "TVRNG1"
inline constexpr std::size_t kRingHeaderBytes = 256;
inline constexpr std::size_t kRingEntryBytes = 16;
inline constexpr std::uint32_t kRingFlagImm = 1;
inline constexpr std::uint32_t kMaxRingCapacity = 1u << 16;
inline constexpr std::uint32_t kMaxMessageBytes = 1u << 31;  // the largest operation

struct RingEvent {
  std::uint32_t seq = 0;
  std::uint32_t imm = 0;
  std::uint32_t byte_len = 0;
};

// The event in an entry's raw fields, or why they are not one.
Result<RingEvent> decode_ring_event(std::uint32_t seq, std::uint32_t imm, std::uint32_t byte_len,
                                    std::uint32_t flags);

namespace ring_layout {
struct Header {
  std::atomic<std::uint64_t> magic;
  std::atomic<std::uint32_t> version;
  std::atomic<std::uint32_t> capacity;
  alignas(64) std::atomic<std::uint64_t> tail;
  alignas(64) std::atomic<std::uint64_t> head;
  alignas(64) std::atomic<std::uint32_t> producer_waiting;
  std::atomic<std::uint32_t> consumer_closed;
};
static_assert(sizeof(Header) <= kRingHeaderBytes);
struct Entry {
  std::atomic<std::uint32_t> seq;
  std::atomic<std::uint32_t> imm;
  std::atomic<std::uint32_t> byte_len;
  std::atomic<std::uint32_t> flags;
};
static_assert(sizeof(Entry) == kRingEntryBytes);
}  // namespace ring_layout

// The consumer's side, which owns the ring.
class EventRing {
 public:
  // `capacity`: a power of two, at most kMaxRingCapacity.
  static Result<std::unique_ptr<EventRing>> create(std::uint32_t capacity);

  const SharedSegment& segment() const { return *segment_; }
  std::uint32_t capacity() const { return capacity_; }

  // Whether the producer published events past those consumed (one load, no check).
  bool has_events() const { return tail().load(std::memory_order_seq_cst) != head_; }
  // seq_cst: a sleeper's last look, after its seq_cst store of `waiting`
  std::uint64_t published() const { return tail().load(std::memory_order_seq_cst); }
  // The oldest unconsumed event: true with *event set; false when the ring is empty or
  // (with *error set) when the producer wrote something impossible.
  bool peek(RingEvent* event, Status* error) const;
  // Consumes the event peek() returned; true when the producer waits for room.
  bool pop();
  // The consumer's queue pair entered the error state: it answers nothing from now on (the
  // producer may tell a key it revoked since from one it refuses).
  void close();

 private:
  EventRing(std::shared_ptr<SharedSegment> segment, std::uint32_t capacity);
  ring_layout::Header& header() const;
  const std::atomic<std::uint64_t>& tail() const { return header().tail; }

  std::shared_ptr<SharedSegment> segment_;
  std::uint32_t capacity_;
  std::uint64_t head_ = 0;  // private copy: the shared one is written, never trusted
};

// The producer's side: the peer's ring, mapped here.
class EventRingProducer {
 public:
  static Result<std::unique_ptr<EventRingProducer>> map(UniqueFd fd);

  std::uint32_t capacity() const { return capacity_; }
  enum class Push { kDone, kFull, kCorrupt };
  // Publishes `event`; kFull: no room (producer_waiting is set, so that the consumer
  // rings the doorbell when it makes room); kCorrupt: the consumer's head is impossible.
  Push push(const RingEvent& event);
  // The consumer's head as last seen, for telling whether room was made since.
  std::uint64_t consumed() const;
  // The consumer's head when the last push found the ring full: room was made since once
  // consumed() differs. (Not consumed() read after that push: the consumer may have made
  // room, and rung for it, in between; a wait for a later change would never end.)
  std::uint64_t head_when_full() const { return tail_ - capacity_; }
  void clear_waiting();
  // Whether the consumer's queue pair entered the error state (seq_cst: after whatever it
  // did next, such as revoking keys, was seen).
  bool consumer_closed() const;

 private:
  EventRingProducer(std::shared_ptr<SharedSegment> segment, std::uint32_t capacity);
  ring_layout::Header& header() const;

  std::shared_ptr<SharedSegment> segment_;
  std::uint32_t capacity_;
  std::uint64_t tail_ = 0;  // private copy
};

}  // namespace tensorverbs::verbs::soft
