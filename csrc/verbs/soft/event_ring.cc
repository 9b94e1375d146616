#include "verbs/soft/event_ring.h"

#include <string>

namespace tensorverbs::verbs::soft {
namespace {

template <typename T>
T* at(std::uint8_t* bytes) {
  return static_cast<T*>(static_cast<void*>(bytes));
}

ring_layout::Entry& entry_at(const SharedSegment& segment, std::uint32_t capacity,
                             std::uint64_t index) {
  const std::size_t slot = static_cast<std::size_t>(index & (capacity - 1));
  return *at<ring_layout::Entry>(segment.data() + kRingHeaderBytes + slot * kRingEntryBytes);
}

}  // namespace

Result<RingEvent> decode_ring_event(std::uint32_t seq, std::uint32_t imm, std::uint32_t byte_len,
                                    std::uint32_t flags) {
  if (flags != kRingFlagImm) {
    return Status(Code::kInternal, "ring entry with unknown flags " + std::to_string(flags));
  }
  if (byte_len > kMaxMessageBytes) {
    return Status(Code::kInternal,
                  "ring entry of " + std::to_string(byte_len) + " bytes, over the largest operation");
  }
  return RingEvent{seq, imm, byte_len};
}

// --------------------------------------------------------------------------- consumer
Result<std::unique_ptr<EventRing>> EventRing::create(std::uint32_t capacity) {
  if (capacity == 0 || capacity > kMaxRingCapacity || (capacity & (capacity - 1)) != 0) {
    return Status(Code::kInvalidArgument, "an event ring holds a power of two of at most " +
                                              std::to_string(kMaxRingCapacity) + " events");
  }
  auto segment = SharedSegment::create(kRingHeaderBytes + std::size_t{capacity} * kRingEntryBytes,
                                       "tensorverbs-ring", true);
  if (!segment.ok()) return segment.status();
  return std::unique_ptr<EventRing>(new EventRing(segment.take(), capacity));
}

EventRing::EventRing(std::shared_ptr<SharedSegment> segment, std::uint32_t capacity)
    : segment_(std::move(segment)), capacity_(capacity) {
  ring_layout::Header& h = header();
  h.version.store(1, std::memory_order_relaxed);
  h.capacity.store(capacity, std::memory_order_relaxed);
  h.tail.store(0, std::memory_order_relaxed);
  h.head.store(0, std::memory_order_relaxed);
  h.producer_waiting.store(0, std::memory_order_relaxed);
  h.consumer_closed.store(0, std::memory_order_relaxed);
  h.magic.store(kRingMagic, std::memory_order_release);
}

void EventRing::close() {
  header().consumer_closed.store(1, std::memory_order_seq_cst);
  // against the producer's push (its tail, then its look at consumer_closed): either this
  // side's next look at the tail sees the event, or the producer sees the ring closed
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

ring_layout::Header& EventRing::header() const {
  return *at<ring_layout::Header>(segment_->data());
}

bool EventRing::peek(RingEvent* event, Status* error) const {
  const std::uint64_t tail = header().tail.load(std::memory_order_acquire);
  if (tail == head_) return false;
  if (tail - head_ > capacity_) {
    *error = Status(Code::kInternal, "the peer's event ring is corrupt (tail " +
                                         std::to_string(tail) + ", head " +
                                         std::to_string(head_) + ")");
    return false;
  }
  const ring_layout::Entry& e = entry_at(*segment_, capacity_, head_);
  auto decoded = decode_ring_event(e.seq.load(std::memory_order_relaxed),
                                   e.imm.load(std::memory_order_relaxed),
                                   e.byte_len.load(std::memory_order_relaxed),
                                   e.flags.load(std::memory_order_relaxed));
  if (!decoded.ok()) {
    *error = decoded.status();
    return false;
  }
  *event = decoded.value();
  return true;
}

bool EventRing::pop() {
  ++head_;
  ring_layout::Header& h = header();
  h.head.store(head_, std::memory_order_seq_cst);
  // the store of head before the load of producer_waiting (seq_cst): a producer that set
  // the flag after failing to find room either sees this head or is seen waiting
  return h.producer_waiting.load(std::memory_order_seq_cst) != 0;
}

// --------------------------------------------------------------------------- producer
Result<std::unique_ptr<EventRingProducer>> EventRingProducer::map(UniqueFd fd) {
  auto segment = SharedSegment::map_peer(std::move(fd), kRingHeaderBytes + kRingEntryBytes, true,
                                         true);
  if (!segment.ok()) return segment.status();
  const auto& h = *at<ring_layout::Header>(segment.value()->data());
  const std::uint32_t capacity = h.capacity.load(std::memory_order_relaxed);
  if (h.magic.load(std::memory_order_acquire) != kRingMagic || capacity == 0 ||
      capacity > kMaxRingCapacity || (capacity & (capacity - 1)) != 0 ||
      segment.value()->length() < kRingHeaderBytes + std::size_t{capacity} * kRingEntryBytes) {
    return Status(Code::kInvalidArgument, "the peer's event ring has no valid header");
  }
  auto producer = std::unique_ptr<EventRingProducer>(new EventRingProducer(segment.take(), capacity));
  producer->tail_ = producer->header().tail.load(std::memory_order_relaxed);
  return producer;
}

EventRingProducer::EventRingProducer(std::shared_ptr<SharedSegment> segment, std::uint32_t capacity)
    : segment_(std::move(segment)), capacity_(capacity) {}

ring_layout::Header& EventRingProducer::header() const {
  return *at<ring_layout::Header>(segment_->data());
}

EventRingProducer::Push EventRingProducer::push(const RingEvent& event) {
  ring_layout::Header& h = header();
  std::uint64_t head = h.head.load(std::memory_order_acquire);
  if (head > tail_ || tail_ - head > capacity_) return Push::kCorrupt;
  if (tail_ - head == capacity_) {
    h.producer_waiting.store(1, std::memory_order_seq_cst);
    head = h.head.load(std::memory_order_seq_cst);  // room made meanwhile?
    if (head > tail_ || tail_ - head > capacity_) return Push::kCorrupt;
    if (tail_ - head == capacity_) return Push::kFull;
  }
  ring_layout::Entry& e = entry_at(*segment_, capacity_, tail_);
  e.seq.store(event.seq, std::memory_order_relaxed);
  e.imm.store(event.imm, std::memory_order_relaxed);
  e.byte_len.store(event.byte_len, std::memory_order_relaxed);
  e.flags.store(kRingFlagImm, std::memory_order_relaxed);
  ++tail_;
  h.tail.store(tail_, std::memory_order_seq_cst);  // seq_cst: before the read of `waiting`
  return Push::kDone;
}

std::uint64_t EventRingProducer::consumed() const {
  return header().head.load(std::memory_order_seq_cst);  // (a sleeper's last look)
}

void EventRingProducer::clear_waiting() {
  header().producer_waiting.store(0, std::memory_order_relaxed);
}

bool EventRingProducer::consumer_closed() const {
  return header().consumer_closed.load(std::memory_order_seq_cst) != 0;
}

}  // namespace tensorverbs::verbs::soft
