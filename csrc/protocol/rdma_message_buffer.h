// RdmaMessageBuffer: the registered slots that carry one channel's control messages.
//
// A message is encoded into a local tx slot and RDMA-written into the peer's rx slot of
// the same sequence number with immediate kImmMessage. A slot is busy until the peer has
// taken the message: every message carries how many of the peer's messages its sender has
// taken (`acked`), so the credits ride on the traffic going the other way; when nothing
// goes back, an explicit ACK (an 8-byte write of that count into the word after the
// peer's slots, immediate kImmAck) returns them. At most `slots` messages are in flight
// per direction; later ones wait, in order. TENSOR_REQUESTs without meta-data or landing
// that wait one after another travel together, as one TENSOR_REQUESTS message, and so do
// TENSOR_INLINE answers, as one TENSOR_INLINES message: a message joins the last message
// waiting if that is one of its kind and it has room (never one with messages queued
// behind it, so nothing overtakes). Not thread-safe: the channel locks it.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/block_cache.h"
#include "core/status.h"
#include "protocol/rdma_message.h"
#include "verbs/memory_region.h"
#include "verbs/protection_domain.h"
#include "verbs/work.h"

namespace tensorverbs {

class RdmaMessageBuffer {
 public:
  static Result<std::unique_ptr<RdmaMessageBuffer>> create(verbs::ProtectionDomain& pd,
                                                          std::uint32_t slots);

  std::uint32_t slots() const { return slots_; }
  // The registered bytes of a buffer of `slots` (both regions).
  static std::size_t registered_bytes(std::uint32_t slots);
  // The region the peer writes into: `slots` slots, then the ACK word.
  const verbs::MemoryRegion& rx() const { return *rx_; }
  void connect(std::uint64_t remote_addr, std::uint32_t remote_rkey);
  // Counts every message written from now on in `messages`, and every explicit ACK in
  // `acks` (relaxed; they must outlive this).
  void count_writes(std::atomic<std::uint64_t>* messages, std::atomic<std::uint64_t>* acks) {
    written_ = messages;
    acks_ = acks;
  }

  // -- sending -----------------------------------------------------------------------------
  // Encodes `message` (its `acked` set here) into the next slot and appends its write to
  // `out`, or queues it until a credit frees up (a request that may, in the TENSOR_REQUESTS
  // message waiting last; a TENSOR_INLINE as it is, its payload read when it is encoded:
  // the caller keeps it until the peer has taken the message; one that waits behind another
  // joins it in a TENSOR_INLINES message where both fit). Fails only for a message that
  // cannot be encoded (a bug);
  // `sequence` gets the number of the message it travels in (1, 2, ...); `batched` (if
  // given) whether that message is a TENSOR_REQUESTS or TENSOR_INLINES it started.
  Status send(RdmaMessage& message, std::vector<verbs::SendWr>* out, std::uint64_t* sequence,
              bool* batched = nullptr);
  // While held (hold() more often than release()), every message waits as if no slot were
  // free, requests gathering into TENSOR_REQUESTS messages as many as fit: a batch of recvs
  // asks the peer in as few messages as its requests fill. Once the last hold ends, drain()
  // appends the writes of those that fit.
  void hold() { ++holds_; }
  void release() {
    if (holds_ > 0) --holds_;
  }
  // Appends the writes of the queued messages that fit (none while held).
  void drain(std::vector<verbs::SendWr>* out);
  // Forgets the messages waiting for a credit (the channel failed: the payloads of the
  // answers among them go back with their responses, so none may be read any more).
  void drop_waiting() { queue_.clear(); }
  // The peer has taken `count` (mod 2^32) of our messages: frees their slots and appends
  // the writes of queued messages that now fit (none while held). Returns the number taken
  // so far.
  std::uint64_t credit(std::uint32_t count, std::vector<verbs::SendWr>* out);
  // The count in the ACK word the peer last wrote.
  std::uint32_t ack_word() const;
  std::uint64_t taken_by_peer() const { return peer_taken_; }
  // "sent 12, taken by the peer 10, waiting for a credit 3, received 9, taken 9, told 8"
  std::string describe() const;

  // -- receiving ---------------------------------------------------------------------------
  // The slot of the next message (in arrival order); `byte_len` from its completion.
  const std::uint8_t* next_message(std::uint32_t byte_len, std::size_t* size);
  // The message returned by next_message() has been handled: its slot is free again.
  void taken() { ++taken_; }
  // Appends an explicit ACK if messages were taken since the last count told to the peer.
  void ack_if_needed(std::vector<verbs::SendWr>* out);
  // Appends an explicit ACK of the count taken, needed or not (once connected), completing
  // with a work completion if `signaled`: stopping, its completion tells that it left.
  void ack(std::vector<verbs::SendWr>* out, bool signaled);
  // Whether messages were taken since the last count told to the peer.
  bool owes_ack() const { return connected_ && taken_ != told_; }

 private:
  RdmaMessageBuffer(std::unique_ptr<verbs::MemoryRegion> tx, std::unique_ptr<verbs::MemoryRegion> rx,
                    std::uint32_t slots)
      : tx_(std::move(tx)), rx_(std::move(rx)), slots_(slots), scratch_(kSlotBytes) {}
  // A message waiting for a credit: its encoded bytes, or the message itself: TENSOR_REQUESTS
  // being gathered, or a TENSOR_INLINE or TENSOR_INLINES (the payloads held by their
  // responses meanwhile).
  struct Waiting {
    std::string bytes;
    std::optional<RdmaMessage> message;
    std::size_t tail = 0;  // TENSOR_REQUESTS, TENSOR_INLINES: the bytes its entries take
  };

  void post(std::size_t length, std::vector<verbs::SendWr>* out);
  // Whether `message` joined (or started) the TENSOR_REQUESTS or TENSOR_INLINES waiting last.
  bool gather(const RdmaMessage& message, bool* started);
  // gather() of a TENSOR_INLINE: it joins the TENSOR_INLINES waiting last, or makes one of
  // the TENSOR_INLINE waiting last and itself, where they fit.
  bool gather_inline(const RdmaMessage& message, bool* started);

  std::unique_ptr<verbs::MemoryRegion> tx_, rx_;
  const std::uint32_t slots_;
  std::uint64_t remote_addr_ = 0;
  std::uint32_t remote_rkey_ = 0;
  bool connected_ = false;
  std::uint32_t holds_ = 0;
  std::atomic<std::uint64_t>* written_ = nullptr;
  std::atomic<std::uint64_t>* acks_ = nullptr;
  std::uint64_t sent_ = 0;        // messages written so far
  std::uint64_t peer_taken_ = 0;  // of those, taken by the peer
  std::uint64_t received_ = 0;    // messages arrived so far
  std::uint64_t taken_ = 0;       // of those, handled here
  std::uint64_t told_ = 0;        // the taken count last sent to the peer
  // messages waiting for a credit, in order (its chunks kept, as many as a batch of answers
  // left waiting: a queue of one-element chunks would allocate one for each message)
  static constexpr std::size_t kWaitingKept = 2048;
  std::deque<Waiting, BlockCacheAllocator<Waiting>> queue_{BlockCacheAllocator<Waiting>(kWaitingKept)};
  std::vector<std::uint8_t> scratch_;  // where a message that waits is encoded
};

}  // namespace tensorverbs
