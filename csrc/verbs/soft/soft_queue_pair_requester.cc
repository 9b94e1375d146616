// SoftQueuePair, requester half: posting, carrying out and completing send work requests.
#include <algorithm>
#include <cstring>

#include "verbs/soft/soft_completion_queue.h"
#include "verbs/soft/soft_context.h"
#include "verbs/soft/soft_protection_domain.h"
#include "verbs/soft/soft_queue_pair.h"

namespace tensorverbs::verbs::soft {
namespace {

bool known_opcode(WrOpcode opcode) {
  return static_cast<std::uint8_t>(opcode) <= static_cast<std::uint8_t>(WrOpcode::kRdmaRead);
}

// Whether sequence number a comes after b (wrapping).
bool after(std::uint32_t a, std::uint32_t b) { return static_cast<std::int32_t>(a - b) > 0; }

}  // namespace

Status SoftQueuePair::post_send(const SendWr* wrs, std::size_t count) {
  std::lock_guard lock(mu_);
  if (state_.load() == QpState::kInit) {
    return Status(Code::kFailedPrecondition,
                  "queue pair " + std::to_string(qp_num_) + " is not connected");
  }
  if (sends_.size() + count > static_cast<std::size_t>(caps_.max_send_wr)) {
    return Status(Code::kResourceExhausted,
                  "queue pair " + std::to_string(qp_num_) + ": more than max_send_wr (" +
                      std::to_string(caps_.max_send_wr) + ") send requests outstanding");
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (!known_opcode(wrs[i].opcode)) {
      return Status(Code::kInvalidArgument,
                    "unknown work request opcode " + std::to_string(static_cast<int>(wrs[i].opcode)));
    }
  }
  for (std::size_t i = 0; i < count; ++i) {
    SendOp& op = sends_.post(wrs[i]);
    if (state_.load() == QpState::kError) {
      op.done = true;
      op.status = WcStatus::kWrFlushErr;
    } else if (!pending_.empty() || !stream_ || !state_ready_locked() ||
               send_broke_.load(std::memory_order_relaxed) ||  // (flushed by the salvage)
               throttled_locked(op)) {
      pending_.push_back(&op);
    } else if (!execute_locked(op)) {
      pending_.push_back(&op);
    }
  }
  if (ring_doorbell_ && peer_) {
    ring_doorbell_ = false;
    peer_->doorbell().ring_if_sleeping();
  }
  emit_locked();
  return ok_status();
}

std::size_t SoftQueuePair::send_room() const {
  std::lock_guard lock(mu_);
  const auto depth = static_cast<std::size_t>(caps_.max_send_wr);
  return sends_.size() < depth ? depth - sends_.size() : 0;
}

bool SoftQueuePair::state_ready_locked() const {
  return state_.load() == QpState::kRts && stream_ != nullptr;
}

Status SoftQueuePair::local_buffer(const Sge& sge, std::uint32_t need, std::uint8_t** out) const {
  const std::uint32_t pd = pd_->number();
  return context_->keys().with_region(sge.lkey, [&](const RegionInfo* region) -> Status {
    if (region == nullptr || region->pd != pd) {
      return Status(Code::kPermissionDenied, "lkey " + std::to_string(sge.lkey) +
                                                 " is not a region of this protection domain");
    }
    std::string why = check_access(*region, sge.lkey, sge.addr, sge.length, need);
    if (!why.empty()) return Status(Code::kPermissionDenied, why);
    *out = region->data + (sge.addr - region->addr);
    return ok_status();
  });
}

bool SoftQueuePair::execute_locked(SendOp& op) {
  const SendWr& wr = op.wr;
  const bool is_read = wr.opcode == WrOpcode::kRdmaRead;
  std::uint8_t* local = nullptr;
  if (wr.sge.length > 0) {
    Status ok = local_buffer(wr.sge, is_read ? std::uint32_t{kLocalWrite} : 0u, &local);
    if (!ok.ok()) {
      finish_locked(op, WcStatus::kLocProtErr, ok.message());
      return true;
    }
  }
  if (wr.opcode == WrOpcode::kSend || wr.opcode == WrOpcode::kSendWithImm) {
    stream_request_locked(op, FrameOp::kSend, local, wr.sge.length);
    return true;
  }
  if (peer_ && awaiting_.empty()) {
    bool used = false;
    const bool finished = execute_shm_locked(op, local, &used);
    if (used) return finished;
  } else if (peer_ && wr.sge.length > 0) {  // behind the stream, to stay in order
    ask_ahead_locked(wr);
  }
  if (is_read) {
    op.sink = local;
    stream_request_locked(op, FrameOp::kReadReq, nullptr, wr.sge.length);
  } else {
    stream_request_locked(op, FrameOp::kWrite, local, wr.sge.length);
  }
  return true;
}

void SoftQueuePair::ask_for_segment_locked(std::uint32_t id) {
  if (!peer_->should_request(id, this)) return;
  FrameHeader h;
  h.op = FrameOp::kSegReq;
  h.rkey = id;
  send_frame_locked(h);
}

Status SoftQueuePair::pin_remote_locked(const SendWr& wr, KeyTableView::Pinned* pinned) {
  const bool is_read = wr.opcode == WrOpcode::kRdmaRead;
  return peer_->table().pin(wr.rkey, Through{peer_pd_, peer_qp_num_}, wr.remote_addr, wr.sge.length,
                            is_read ? std::uint32_t{kRemoteRead} : std::uint32_t{kRemoteWrite}, pinned);
}

void SoftQueuePair::ask_ahead_locked(const SendWr& wr) {
  KeyTableView::Pinned pinned;
  if (!pin_remote_locked(wr, &pinned).ok()) return;  // the stream's answer tells what is wrong
  KeyTableView::unpin(pinned);
  if (pinned.segment_id != 0) ask_for_segment_locked(pinned.segment_id);
}

// The shared-memory path; *used is false when the operation must take the stream.
bool SoftQueuePair::execute_shm_locked(SendOp& op, std::uint8_t* local, bool* used) {
  const SendWr& wr = op.wr;
  const bool is_read = wr.opcode == WrOpcode::kRdmaRead;
  const std::uint32_t length = wr.sge.length;
  if (length > 0) {
    KeyTableView::Pinned pinned;
    Status ok = pin_remote_locked(wr, &pinned);
    if (!ok.ok()) {
      *used = true;
      if (peer_ring_ && peer_ring_->consumer_closed()) {
        // revoked as the peer's queue pair failed, or after: no queue pair answers, as a
        // NIC's retransmissions would find none (the connection broke; no access error)
        finish_locked(op, WcStatus::kRetryExcErr,
                      "the peer's queue pair is in the error state (" + ok.message() + ")");
      } else {
        finish_locked(op, WcStatus::kRemAccessErr, ok.message());
      }
      return true;
    }
    std::shared_ptr<SharedSegment> segment;
    if (pinned.segment_id != 0) segment = peer_->segment(pinned.segment_id);
    if (!segment) {
      KeyTableView::unpin(pinned);
      if (pinned.segment_id != 0) ask_for_segment_locked(pinned.segment_id);
      return true;  // *used stays false: through the stream this time
    }
    if (pinned.segment_offset > segment->length() ||
        length > segment->length() - pinned.segment_offset) {
      KeyTableView::unpin(pinned);
      *used = true;
      finish_locked(op, WcStatus::kRemAccessErr,
                    "the peer's key table places rkey " + std::to_string(wr.rkey) +
                        " outside its segment");
      return true;
    }
    std::uint8_t* remote = segment->data() + pinned.segment_offset;
    std::uint8_t* dst = is_read ? local : remote;
    const std::uint8_t* src = is_read ? remote : local;
    *used = true;
    if (length >= kAsyncCopyBytes) {
      copying_ = &op;
      copy_pin_ = pinned;
      copy_peer_ = peer_;  // (which keeps every segment it mapped)
      {
        std::lock_guard copy_lock(copy_->mu);
        copy_->busy = true;
      }
      context_->copier().copy_async(dst, src, length,
                                    [copy = copy_, progress = &context_->progress()] {
                                      copy->landed.store(true, std::memory_order_release);
                                      progress->kick();
                                      std::lock_guard copy_lock(copy->mu);
                                      copy->busy = false;
                                      copy->cv.notify_all();
                                    });
      return false;  // pending until the copy landed
    }
    std::memmove(dst, src, length);
    KeyTableView::unpin(pinned);
  }
  *used = true;
  op.copied = true;
  return complete_copied_locked(op);
}

// Completes an operation whose data is in place; false when it must wait (a full ring).
bool SoftQueuePair::complete_copied_locked(SendOp& op) {
  if (op.wr.opcode == WrOpcode::kRdmaWriteWithImm) return publish_event_locked(op);
  finish_locked(op, WcStatus::kSuccess);
  return true;
}

// The copy handed to the helpers landed: its operation completes (flushed, if the queue
// pair failed meanwhile), and what was posted after it goes on.
void SoftQueuePair::land_copy_locked() {
  if (copying_ == nullptr || !copy_->landed.exchange(false, std::memory_order_acquire)) return;
  KeyTableView::unpin(copy_pin_);
  copy_peer_.reset();
  SendOp& op = *copying_;
  copying_ = nullptr;
  op.copied = true;
  if (state_.load() == QpState::kError) {
    finish_locked(op, WcStatus::kWrFlushErr);
  } else {
    retry_pending_locked();  // (it is the first pending)
  }
  emit_locked();
}

// Publishes the immediate of a write whose data is in place; false when the ring is full.
bool SoftQueuePair::publish_event_locked(SendOp& op) {
  RingEvent event;
  event.seq = tx_seq_ + 1;
  if (event.seq == 0) event.seq = 1;
  event.imm = op.wr.imm;
  event.byte_len = op.wr.sge.length;
  switch (peer_ring_->push(event)) {
    case EventRingProducer::Push::kDone:
      tx_seq_ = event.seq;
      ring_doorbell_ = true;
      if (peer_ring_->consumer_closed()) {
        // its queue pair entered the error state as the event went in: whether it took the
        // write is unknown, so it is not reported done (as a NIC whose retransmissions found
        // no queue pair); the peer completes what it took, this side fails the rest
        finish_locked(op, WcStatus::kRetryExcErr,
                      "the peer's queue pair entered the error state as the write completed");
        return true;
      }
      finish_locked(op, WcStatus::kSuccess);
      return true;
    case EventRingProducer::Push::kFull:
      pending_seen_head_.store(peer_ring_->head_when_full(), std::memory_order_relaxed);
      pending_on_ring_.store(true, std::memory_order_release);
      return false;
    case EventRingProducer::Push::kCorrupt:
      break;
  }
  enter_error_locked("the peer's event ring is corrupt");
  return true;
}

void SoftQueuePair::stream_request_locked(SendOp& op, FrameOp code, const std::uint8_t* payload,
                                          std::uint32_t length) {
  FrameHeader h;
  h.op = code;
  tx_seq_ += 1;
  if (tx_seq_ == 0) tx_seq_ = 1;
  h.seq = tx_seq_;
  h.length = length;
  if (code != FrameOp::kSend) {
    h.rkey = op.wr.rkey;
    h.addr = op.wr.remote_addr;
  }
  if (op.wr.opcode == WrOpcode::kRdmaWriteWithImm || op.wr.opcode == WrOpcode::kSendWithImm) {
    h.flags = kFlagImm;
    h.imm = op.wr.imm;
  }
  op.seq = h.seq;
  awaiting_.push_back(&op);
  if (code != FrameOp::kReadReq) in_flight_bytes_ += length;
  if (code == FrameOp::kWrite && length >= kStripeFrom && !links_.empty()) {
    send_striped_locked(h, payload);
    return;
  }
  TxItem item = frame_item(stamp_ack_locked(h));
  if (code != FrameOp::kReadReq) {
    item.payload = payload;
    item.payload_len = length;
  }
  send_frames_locked(&item, 1);
}

void SoftQueuePair::retry_pending_locked() {
  while (!pending_.empty() && state_ready_locked() && copying_ == nullptr &&
         !send_broke_.load(std::memory_order_relaxed)) {
    SendOp& op = *pending_.front();
    if (!op.copied && throttled_locked(op)) break;  // (until acknowledgements come)
    const bool finished = op.copied ? complete_copied_locked(op) : execute_locked(op);
    if (!finished) break;
    if (!pending_.empty()) pending_.pop_front();  // (the error state clears it)
  }
  if (pending_.empty() && pending_on_ring_.load(std::memory_order_relaxed)) {
    pending_on_ring_.store(false, std::memory_order_relaxed);
    if (peer_ring_) peer_ring_->clear_waiting();
  }
  if (ring_doorbell_ && peer_) {
    ring_doorbell_ = false;
    peer_->doorbell().ring_if_sleeping();
  }
}

bool SoftQueuePair::throttled_locked(const SendOp& op) const {
  return !links_.empty() && in_flight_bytes_ > 0 && op.wr.opcode != WrOpcode::kRdmaRead &&
         in_flight_bytes_ + op.wr.sge.length > kMaxInFlightWithLinks;
}

void SoftQueuePair::emit_locked() {
  if (std::optional<std::string> failure = sends_.emit()) {
    detail_ = *failure;
    enter_error_locked(*failure);
  }
}

void SoftQueuePair::acked_locked(std::uint32_t ack) {
  if (after(ack, acked_) || acked_ == 0) acked_ = ack;
  while (!sent_stripes_.empty() && !after(sent_stripes_.front().seq, acked_)) sent_stripes_.pop_front();
  while (!awaiting_.empty()) {
    SendOp& op = *awaiting_.front();
    if (after(op.seq, acked_)) break;
    if (op.wr.opcode == WrOpcode::kRdmaRead && !op.done) break;  // its data comes first
    finish_locked(op, WcStatus::kSuccess);
    awaiting_.pop_front();
    if (op.wr.opcode != WrOpcode::kRdmaRead) in_flight_bytes_ -= std::min<std::uint64_t>(in_flight_bytes_, op.wr.sge.length);
  }
}

}  // namespace tensorverbs::verbs::soft
