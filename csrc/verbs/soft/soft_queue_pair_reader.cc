// SoftQueuePair, reading the stream: frame headers through the stream's buffer, payloads
// straight into the memory they are for (a registered region, a receive, a read's
// destination) or into a buffer when the request is held; a write into a region checks
// on every read that the region is still registered.
#include <sys/epoll.h>

#include <cstring>

#include "verbs/soft/soft_context.h"
#include "verbs/soft/soft_protection_domain.h"
#include "verbs/soft/soft_queue_pair.h"

namespace tensorverbs::verbs::soft {
namespace {

thread_local std::uint8_t g_scratch[64 << 10];  // swallowed payloads (never read back)

}  // namespace

void SoftQueuePair::on_socket(std::uint32_t events) {
  std::lock_guard lock(mu_);
  if (!stream_ || state_.load() != QpState::kRts) return;
  if ((events & EPOLLOUT) != 0) {
    Status ok = stream_->flush();
    if (!ok.ok()) {
      send_failed_locked(ok.message());
      salvage_locked();
      return;
    }
  }
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) != 0) read_frames_locked(kPassBudget);
  after_reading_locked();
}

void SoftQueuePair::after_reading_locked() {
  if (send_broke_.load(std::memory_order_relaxed)) {  // (an answer the frames asked for)
    salvage_locked();
    return;
  }
  prune_links_locked();
  if (state_ready_locked()) drain_held_locked();  // ring events that waited for a frame
  if (!pending_.empty()) retry_pending_locked();  // (requests held back for acknowledgements)
  emit_locked();
  if (ack_owed_ && !ack_due_.load(std::memory_order_relaxed)) {
    // the answer the user posts next takes it along, or poll_memory() sends it soon
    ack_since_ = std::chrono::steady_clock::now();
    ack_due_.store(true, std::memory_order_release);
  }
}

void SoftQueuePair::stream_ended_locked(const std::string& why) {
  drain_held_locked();
  enter_error_locked(why);
}

void SoftQueuePair::read_frames_locked(std::size_t budget) {
  while (stream_ && state_.load() == QpState::kRts) {
    if (!rx_.active) {
      if (stream_->buffered() < kFrameHeaderBytes) {
        if (budget == 0) return;  // the rest is in the socket: the next pass takes it
        std::string why;
        const Stream::Io io = stream_->fill(&why);
        if (io == Stream::Io::kAgain) return;
        if (io == Stream::Io::kClosed) {
          stream_ended_locked("the peer closed the connection (it destroyed the queue pair, "
                              "moved it to the error state, or exited)");
          return;
        }
        if (io == Stream::Io::kError) {
          stream_ended_locked(why);
          return;
        }
        continue;
      }
      if (!start_frame_locked()) return;
      budget = budget > kFrameHeaderBytes ? budget - kFrameHeaderBytes : 0;  // (frames of headers only too)
      continue;
    }
    bool progress = false;
    const std::uint32_t before = rx_.left;
    payload_locked(*stream_, rx_, nullptr, &progress);
    const std::uint32_t read = before - rx_.left;
    if (rx_.active && rx_.left == 0) finish_frame_locked();
    if (!progress || !stream_) return;  // (finishing the frame may end the stream: an error)
    // Level-triggered epoll brings the next pass for what the socket still holds, but not
    // for frames the stream has buffered already: those are taken now, budget or not (else
    // they would wait for the peer's next bytes, which may never come).
    budget = read >= budget ? 0 : budget - read;
    if (budget == 0 && stream_->buffered() == 0) return;
  }
}

bool SoftQueuePair::start_frame_locked() {
  auto decoded = decode_frame(stream_->buffered_data());
  if (!decoded.ok()) {
    enter_error_locked("protocol error: " + decoded.status().message());
    return false;
  }
  stream_->consume(kFrameHeaderBytes);
  rx_ = RxFrame{};
  rx_.active = true;
  rx_.header = decoded.value();
  rx_.left = payload_bytes(rx_.header);
  rx_.sink = Sink::kDiscard;
  const FrameHeader& h = rx_.header;
  if (is_request(h.op)) {
    setup_request_sink_locked(h);
  } else if (h.op == FrameOp::kStripe) {
    setup_stripe_locked(rx_, h);
  } else if (h.op == FrameOp::kReadResp) {
    SendOp* op = nullptr;
    for (SendOp* candidate : awaiting_) {
      if (candidate->seq == h.seq) op = candidate;
    }
    if (op == nullptr || op->wr.opcode != WrOpcode::kRdmaRead || op->done ||
        op->byte_len != h.length) {
      enter_error_locked("protocol error: an unexpected read response (" + std::to_string(h.seq) + ")");
      return false;
    }
    rx_.read_op = op;
    rx_.sink = Sink::kDirect;
    rx_.dst = op->sink;
  } else if (h.op == FrameOp::kNak) {
    rx_.sink = Sink::kBuffer;
    rx_.buffer.resize(h.length);
  }
  if (rx_.left == 0) finish_frame_locked();
  return state_.load() == QpState::kRts;
}

// Where a request's payload goes; held requests buffer it.
void SoftQueuePair::setup_request_sink_locked(const FrameHeader& h) {
  if (nak_sent_) return;  // discarded: the requester fails anyway
  if (!blocked_locked() && h.seq != rx_next_) {
    if (!drain_ring_locked(h.seq, true) && state_.load() == QpState::kRts) {
      // an earlier event waits for a receive: this request waits behind it
    }
  }
  if (state_.load() != QpState::kRts) return;
  const bool striped = (h.flags & kFlagStriped) != 0;  // (a write whose data comes as stripes)
  const bool must_hold = blocked_locked() || h.seq != rx_next_ ||
                         (h.op == FrameOp::kSend && recvs_.empty());
  if (striped && !must_hold) {  // its turn: it opens, and waits for its stripes if need be
    if (!open_striped_locked(h) || (stripes_landed_locked(h) && !take_stripes_locked(h))) return;
    if (open_seq_ == h.seq) rx_.sink = Sink::kBuffer;  // (held, 0 bytes, until they landed)
    return;
  }
  if (must_hold) {
    const std::uint32_t bytes = payload_bytes(h);
    if (!held_.reserve(bytes)) {
      // the peer is told why (its request fails, and its queue pair with it); what it sends
      // meanwhile is discarded, and this queue pair fails once it closes the connection
      // (closed now, the connection would be reset under the refusal before it is read).
      // What was held goes at once: the peer fails those requests too
      detail_ = "the peer sent more than " + std::to_string(kMaxHeldBytes >> 20) +
                " MiB ahead of the receives posted";
      held_.clear();
      refuse_locked(h, WcStatus::kRemOpErr, detail_);
      return;
    }
    rx_.sink = Sink::kBuffer;
    rx_.buffer.resize(bytes);
    return;
  }
  if (h.op == FrameOp::kWrite && h.length > 0) {
    context_->keys().with_region(h.rkey, [&](const RegionInfo* region) {
      const std::string why = check_remote(region, h.rkey, through(), h.addr, h.length, kRemoteWrite);
      if (!why.empty()) {
        rx_.error = WcStatus::kRemAccessErr;
        rx_.why = why;
        return;
      }
      rx_.sink = Sink::kRegion;
      rx_.key = h.rkey;
      rx_.dst = region->data + (h.addr - region->addr);
    });
  } else if (h.op == FrameOp::kSend) {
    const ReceiveQueue::Posted& recv = recvs_.front();
    if (!recv.error.empty()) {
      rx_.error = WcStatus::kLocProtErr;
      rx_.why = recv.error;
    } else if (h.length > recv.length) {
      rx_.error = WcStatus::kLocLenErr;
      rx_.why = "a " + std::to_string(h.length) + "-byte message does not fit the " +
                std::to_string(recv.length) + "-byte receive";
    } else {
      rx_.sink = Sink::kDirect;
      rx_.dst = recv.data;
    }
  }
}

void SoftQueuePair::payload_locked(Stream& stream, RxFrame& rx, Link* link, bool* progress) {
  while (rx.left > 0) {
    std::uint8_t* dst = g_scratch;
    std::size_t room = rx.left;
    const std::size_t done = (rx.sink == Sink::kBuffer ? rx.buffer.size() - rx.left : 0);
    switch (rx.sink) {
      case Sink::kDirect:
      case Sink::kRegion:
        dst = rx.dst;
        break;
      case Sink::kBuffer:
        dst = rx.buffer.data() + done;
        break;
      default:
        room = room < sizeof(g_scratch) ? room : sizeof(g_scratch);
        break;
    }
    std::size_t got = 0;
    auto receive = [&]() -> Stream::Io {
      if (stream.buffered() > 0) {
        got = room < stream.buffered() ? room : stream.buffered();
        std::memcpy(dst, stream.buffered_data(), got);
        stream.consume(got);
        return Stream::Io::kOk;
      }
      std::string why;
      const Stream::Io io = stream.read_into(dst, room, &got, &why);
      if (io == Stream::Io::kError) rx.why = why;
      return io;
    };
    Stream::Io io;
    if (rx.sink == Sink::kRegion) {
      bool valid = false;
      io = context_->keys().with_region(rx.key, [&](const RegionInfo* region) {
        valid = region != nullptr;
        return valid ? receive() : Stream::Io::kOk;
      });
      if (!valid) {  // deregistered meanwhile: the rest is swallowed, the write refused
        rx.sink = Sink::kDiscard;
        rx.error = WcStatus::kRemAccessErr;
        rx.why = "the target region was deregistered during the write";
        continue;
      }
    } else {
      io = receive();
    }
    if (io == Stream::Io::kAgain) return;
    if (io == Stream::Io::kClosed || io == Stream::Io::kError) {
      const std::string why = io == Stream::Io::kError ? rx.why
                                                        : "the peer closed the connection (in the middle of a frame)";
      if (link != nullptr) {
        link_broke_locked(*link, why);
      } else {
        enter_error_locked(why);
      }
      return;
    }
    *progress = true;
    rx.left -= static_cast<std::uint32_t>(got);
    if (rx.sink == Sink::kDirect || rx.sink == Sink::kRegion) rx.dst += got;
    if (got < room && stream.buffered() == 0 && got < (64u << 10)) return;  // drained
  }
}

void SoftQueuePair::handle_segment_locked(const FrameHeader& h) {
  if (h.op == FrameOp::kSegReq) {
    FrameHeader r;
    r.op = FrameOp::kSeg;
    r.rkey = h.rkey;
    std::shared_ptr<SharedSegment> segment;
    if (stream_->is_unix()) segment = context_->keys().find_segment(h.rkey);
    r.status = segment ? 0 : 1;
    TxItem item = frame_item(stamp_ack_locked(r));
    if (segment) {
      item.fd = segment->fd();
      item.keep = segment;
    }
    send_frames_locked(&item, 1);
    return;
  }
  if (h.status != 0) {
    if (peer_) peer_->forget_request(h.rkey);
    return;
  }
  UniqueFd fd = stream_->take_fd();
  if (!fd.valid()) {
    enter_error_locked("protocol error: a segment came without its descriptor");
    return;
  }
  if (peer_) (void)peer_->add_segment(h.rkey, std::move(fd));  // unusable: the stream it is
}

}  // namespace tensorverbs::verbs::soft
