// SoftQueuePair, responder half: receives, incoming frames and events, acknowledgements.
#include <sys/epoll.h>

#include <cstring>

#include "verbs/soft/soft_completion_queue.h"
#include "verbs/soft/soft_context.h"
#include "verbs/soft/soft_protection_domain.h"
#include "verbs/soft/soft_queue_pair.h"

namespace tensorverbs::verbs::soft {
namespace {


std::uint32_t next_seq(std::uint32_t seq) { return seq + 1 == 0 ? 1 : seq + 1; }

}  // namespace

Status SoftQueuePair::post_recv(const RecvWr* wrs, std::size_t count) {
  std::lock_guard lock(mu_);
  if (recvs_.size() + count > static_cast<std::size_t>(caps_.max_recv_wr)) {
    return Status(Code::kResourceExhausted,
                  "queue pair " + std::to_string(qp_num_) + ": more than max_recv_wr (" +
                      std::to_string(caps_.max_recv_wr) + ") receives outstanding");
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (state_.load() == QpState::kError) {
      recvs_.flush(wrs[i].wr_id);
      continue;
    }
    ReceiveQueue::Posted recv;
    recv.wr_id = wrs[i].wr_id;
    recv.length = wrs[i].sge.length;
    if (recv.length > 0) {
      Status ok = local_buffer(wrs[i].sge, kLocalWrite, &recv.data);
      if (!ok.ok()) recv.error = ok.message();
    }
    recvs_.push(std::move(recv));
  }
  if (state_ready_locked() && stream_ && (!held_.empty() || ring_->has_events())) {
    drain_held_locked();
    send_ack_if_owed_locked();
  }
  return ok_status();
}

// ----------------------------------------------------------------- memory (the driver)
bool SoftQueuePair::memory_ready() const {
  if (send_broke_.load(std::memory_order_acquire)) return true;
  if (copy_->landed.load(std::memory_order_acquire)) return true;
  if (ring_->published() != ring_seen_tail_.load(std::memory_order_relaxed)) return true;
  if (ack_due_.load(std::memory_order_acquire)) return true;
  if (pending_on_ring_.load(std::memory_order_acquire)) {
    std::lock_guard lock(mu_);
    return peer_ring_ && peer_ring_->consumed() != pending_seen_head_.load(std::memory_order_relaxed);
  }
  return false;
}

bool SoftQueuePair::poll_memory() {
  if (!memory_ready()) return false;
  std::lock_guard lock(mu_);
  land_copy_locked();
  if (send_broke_.load(std::memory_order_relaxed)) {
    salvage_locked();
    return true;
  }
  if (!state_ready_locked()) {
    ring_seen_tail_.store(ring_->published(), std::memory_order_relaxed);
    return false;
  }
  drain_held_locked();
  if (!pending_.empty()) retry_pending_locked();
  emit_locked();
  if (ack_due_.load(std::memory_order_relaxed)) {
    if (!ack_owed_) {
      ack_due_.store(false, std::memory_order_relaxed);
    } else if (std::chrono::steady_clock::now() - ack_since_ >= kAckDelay) {
      send_ack_if_owed_locked();
    }
    return false;  // waiting for the delay is no work done
  }
  return true;
}

// Carries out the events of the ring in order, up to (not including) `until_seq` when
// `until_given`; false when one is blocked (no receive) or missing.
bool SoftQueuePair::drain_ring_locked(std::uint32_t until_seq, bool until_given) {
  for (;;) {
    if (until_given && rx_next_ == until_seq) return true;
    RingEvent event;
    Status error;
    const std::uint64_t tail = ring_->published();
    if (!ring_->peek(&event, &error)) {
      ring_seen_tail_.store(tail, std::memory_order_relaxed);
      if (!error.ok()) {
        enter_error_locked("protocol error: " + error.message());
        return false;
      }
      if (until_given) {
        enter_error_locked("protocol error: request " + std::to_string(until_seq) + " arrived, " +
                           std::to_string(rx_next_) + " expected");
      }
      return !until_given;
    }
    if (event.seq != rx_next_) {
      ring_seen_tail_.store(tail, std::memory_order_relaxed);
      if (until_given || static_cast<std::int32_t>(event.seq - rx_next_) < 0) {
        enter_error_locked("protocol error: event " + std::to_string(event.seq) + " in the ring, " +
                           std::to_string(rx_next_) + " expected");
      }
      return false;  // the request before it is still on the stream
    }
    if (nak_sent_) return false;  // the requester fails: leave its events
    if (recvs_.empty()) {
      ring_seen_tail_.store(tail, std::memory_order_relaxed);
      return false;
    }
    FrameHeader h;
    h.op = FrameOp::kWrite;
    h.flags = kFlagImm;
    h.imm = event.imm;
    h.seq = event.seq;
    h.length = event.byte_len;
    deliver_recv_locked(h, nullptr);
    if (ring_->pop() && peer_) peer_->doorbell().ring_if_sleeping();
    rx_done_ = event.seq;
    rx_next_ = next_seq(event.seq);
  }
}

// Carries out what waits, in sequence order: held stream requests and ring events.
void SoftQueuePair::drain_held_locked() {
  while (state_ready_locked()) {
    if (held_.empty()) {
      drain_ring_locked(0, false);
      return;
    }
    const HeldRequests::Held& first = held_.front();
    if (first.header.seq != rx_next_) {
      if (!drain_ring_locked(first.header.seq, true)) return;
      continue;
    }
    const bool needs_recv = first.header.op == FrameOp::kSend ||
                            (first.header.op == FrameOp::kWrite && (first.header.flags & kFlagImm));
    if (needs_recv && recvs_.empty()) return;
    // (a striped write held again only for a receive has its data in place: applied)
    const bool striped = (first.header.flags & kFlagStriped) != 0 && !first.applied;
    if (striped && open_seq_ != first.header.seq && (nak_sent_ || !open_striped_locked(first.header))) return;
    if (striped && !stripes_landed_locked(first.header)) return;  // (drained again as one lands)
    HeldRequests::Held held = held_.pop_front();
    if (striped && !take_stripes_locked(held.header)) return;  // refused, or the queue pair failed
    execute_request_locked(held.header, &held.payload, held.applied);
  }
}

void SoftQueuePair::finish_frame_locked() {
  RxFrame frame = std::move(rx_);
  rx_ = RxFrame{};
  const FrameHeader& h = frame.header;
  switch (h.op) {
    case FrameOp::kWrite:
    case FrameOp::kSend:
    case FrameOp::kReadReq:
      if (nak_sent_) break;
      if (frame.sink == Sink::kBuffer) {
        held_.push_back(HeldRequests::Held{h, std::move(frame.buffer), false});
        drain_held_locked();  // it may be next already (an event before it was waited for)
      } else if (frame.error != WcStatus::kSuccess) {
        refuse_locked(h, frame.error, frame.why);
      } else {
        execute_request_locked(h, nullptr, true);
      }
      break;
    case FrameOp::kReadResp:
      if (frame.read_op != nullptr) finish_locked(*frame.read_op, WcStatus::kSuccess);
      acked_locked(h.seq);
      break;
    case FrameOp::kNak: {
      const std::string why = "the peer refused: " + std::string(frame.buffer.begin(), frame.buffer.end());
      for (SendOp* op : awaiting_) {
        if (op->seq == h.seq) finish_locked(*op, static_cast<WcStatus>(h.status), why);
      }
      // the requests it acknowledges (an ACK owed rides on the refusal) are done; the rest
      // fail, at once: a refusal ends the connection (as on a NIC), and a request held by
      // the peer for a receive would otherwise keep it from being reported in order
      if ((h.flags & kFlagAck) != 0) acked_locked(h.ack);
      enter_error_locked(why);
      break;
    }
    case FrameOp::kAck:
      break;
    case FrameOp::kStripe:
      stripe_landed_locked(frame);
      break;
    case FrameOp::kSegReq:
    case FrameOp::kSeg:
      handle_segment_locked(h);
      break;
  }
  if ((h.flags & kFlagAck) != 0 && state_.load() == QpState::kRts) acked_locked(h.ack);
}

void SoftQueuePair::execute_request_locked(const FrameHeader& h, std::vector<std::uint8_t>* payload,
                                           bool applied) {
  switch (h.op) {
    case FrameOp::kWrite: {
      if (!applied && payload_bytes(h) > 0) {  // a held write: its data lands now
        std::string why;
        context_->keys().with_region(h.rkey, [&](const RegionInfo* region) {
          why = check_remote(region, h.rkey, through(), h.addr, h.length, kRemoteWrite);
          if (why.empty()) std::memcpy(region->data + (h.addr - region->addr), payload->data(), h.length);
        });
        if (!why.empty()) {
          refuse_locked(h, WcStatus::kRemAccessErr, why);
          return;
        }
      }
      if ((h.flags & kFlagImm) != 0) {
        if (recvs_.empty()) {  // (then nothing is held: this one waits first in line)
          held_.push_front(HeldRequests::Held{h, {}, true});
          return;
        }
        if (!deliver_recv_locked(h, nullptr)) return;
      }
      break;
    }
    case FrameOp::kSend:
      if (recvs_.empty()) {  // (only from the stream directly: held ones wait for one)
        held_.push_front(HeldRequests::Held{h, payload ? std::move(*payload) : std::vector<std::uint8_t>{}, false});
        return;
      }
      if (!deliver_recv_locked(h, payload)) return;
      break;
    case FrameOp::kReadReq: {
      FrameHeader r;
      r.op = FrameOp::kReadResp;
      r.seq = h.seq;
      r.length = h.length;
      std::string why;
      bool sent = false;
      // sent while the region is known registered; caller memory not taken by the socket
      // now is copied (deregistration may free it), a shared segment is kept mapped
      context_->keys().with_region(h.rkey, [&](const RegionInfo* region) {
        const std::uint8_t* data = nullptr;
        if (h.length > 0) {
          why = check_remote(region, h.rkey, through(), h.addr, h.length, kRemoteRead);
          if (!why.empty()) return;
          data = region->data + (h.addr - region->addr);
        }
        rx_done_ = h.seq;
        rx_next_ = next_seq(h.seq);
        TxItem item = frame_item(stamp_ack_locked(r));
        item.payload = data;
        item.payload_len = h.length;
        if (h.length > 0) {
          item.keep = region->segment;
          item.copy_if_queued = region->segment == nullptr;
        }
        send_frames_locked(&item, 1);
        sent = true;
      });
      if (!sent) refuse_locked(h, WcStatus::kRemAccessErr, why);
      return;
    }
    default:
      return;
  }
  rx_done_ = h.seq;
  rx_next_ = next_seq(h.seq);
  ack_owed_ = true;
}

bool SoftQueuePair::deliver_recv_locked(const FrameHeader& h, const std::vector<std::uint8_t>* data) {
  const ReceiveQueue::Posted& recv = recvs_.front();
  const bool is_send = h.op == FrameOp::kSend;
  if (is_send && data != nullptr) {
    if (!recv.error.empty()) {
      refuse_locked(h, WcStatus::kLocProtErr, recv.error);
      return false;
    }
    if (h.length > recv.length) {
      refuse_locked(h, WcStatus::kLocLenErr,
                    "a " + std::to_string(h.length) + "-byte message does not fit the " +
                        std::to_string(recv.length) + "-byte receive");
      return false;
    }
    if (h.length > 0) std::memcpy(recv.data, data->data(), h.length);
  }
  recvs_.complete_front(is_send ? WcOpcode::kRecv : WcOpcode::kRecvRdmaWithImm, WcStatus::kSuccess,
                        h.length, (h.flags & kFlagImm) != 0 ? std::optional<std::uint32_t>(h.imm) : std::nullopt);
  return true;
}

void SoftQueuePair::refuse_locked(const FrameHeader& h, WcStatus status, const std::string& why) {
  WcStatus nak = status;
  bool fail_here = false;
  if (status == WcStatus::kLocLenErr || status == WcStatus::kLocProtErr) {
    // the receive cannot take the message: it fails here, and so does this queue pair
    recvs_.complete_front(WcOpcode::kRecv, status, h.length);
    detail_ = why;
    nak = status == WcStatus::kLocLenErr ? WcStatus::kRemInvReqErr : WcStatus::kRemOpErr;
    fail_here = true;
  }
  std::string reason = why.substr(0, kMaxNakDetail);
  FrameHeader n;
  n.op = FrameOp::kNak;
  n.status = static_cast<std::uint8_t>(nak);
  n.seq = h.seq;
  n.length = static_cast<std::uint32_t>(reason.size());
  TxItem item = frame_item(stamp_ack_locked(n));
  item.owned = std::move(reason);
  nak_sent_ = true;
  send_frames_locked(&item, 1);
  if (fail_here) enter_error_locked(why);
}

FrameHeader SoftQueuePair::stamp_ack_locked(FrameHeader h) {
  if (!nak_sent_ && rx_done_ != ack_sent_) {
    h.flags = static_cast<std::uint16_t>(h.flags | kFlagAck);
    h.ack = rx_done_;
    ack_sent_ = rx_done_;
    ack_owed_ = false;
    ack_due_.store(false, std::memory_order_relaxed);
  }
  return h;
}

void SoftQueuePair::send_ack_if_owed_locked() {
  if (!ack_owed_ || !stream_ || nak_sent_ || state_.load() != QpState::kRts) return;
  FrameHeader h;
  h.op = FrameOp::kAck;
  send_frame_locked(h);
}

}  // namespace tensorverbs::verbs::soft
