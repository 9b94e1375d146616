// What arrives on a channel (TensorFlow's RdmaChannel's receive side): each completion of
// its queue pair, the messages they bring (each dispatched to its request or response, a
// malformed one failing only what it names where it can), and the acknowledgement of the
// messages taken once a batch of completions is handled (and, stopping, until they left).
#include <memory>
#include <vector>

#include "protocol/rdma_channel.h"
#include "protocol/rdma_tensor_request.h"
#include "protocol/rdma_tensor_response.h"
#include "protocol/work_id.h"

namespace tensorverbs {

namespace {

// The responses a credit delivered. The list's memory serves the thread's next credit (a
// handling nested in a callback finds none and makes its own).
using Delivered = std::vector<std::shared_ptr<RdmaTensorResponse>>;
thread_local Delivered spare_delivered;

Delivered take_spare() {
  Delivered delivered;
  delivered.swap(spare_delivered);
  return delivered;
}

// Tells each response its inline answer was taken; the list's memory is kept.
void on_delivered(Delivered& delivered) {
  for (auto& response : delivered) response->on_delivered();
  delivered.clear();
  if (delivered.capacity() > spare_delivered.capacity()) spare_delivered.swap(delivered);
}

}  // namespace

void RdmaChannel::on_completion(const verbs::WorkCompletion& wc) {
  const WorkKind kind = work_kind(wc.wr_id);
  if (kind == WorkKind::kTensorRead) {  // whatever its status, the read is over
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reads_.find(work_value(wc.wr_id));
    if (it != reads_.end()) {
      it->second.seen->store(true, std::memory_order_release);
      reads_.erase(it);
    }
  }
  if (!wc.ok()) {
    std::string detail = qp_->error_detail();
    const bool transient = verbs::connection_broke(wc.status);
    if (fail(Status(Code::kUnavailable, name() + " failed: " + verbs::to_string(wc.status) + " on " +
                                            verbs::to_string(wc.opcode) +
                                            (detail.empty() ? "" : " (" + detail + ")")),
             transient) &&
        transient) {
      owner_.channel_lost(peer_);
    }
    // a write a failure left registered: not done, its tensor goes back
    if (kind == WorkKind::kTensorWrite) {
      if (auto response = find_response(work_value(wc.wr_id))) response->abandon();
    }
    // the receive queue completes in order: every write with immediate that reached it came first
    if (kind == WorkKind::kRecv) drained();
    return;
  }
  if (kind == WorkKind::kRecv) {
    const verbs::RecvWr again{wc.wr_id};
    if (!error()) {
      Status status = qp_->post_recv(&again, 1);
      if (!status.ok()) fail(Status(Code::kUnavailable, name() + " failed: " + status.message()));
    }
    if (!wc.has_imm) return;
    if (wc.imm == kImmMessage) {
      on_message(wc.byte_len);
    } else if (wc.imm == kImmAck) {
      Delivered delivered = take_spare();
      Status status;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (error_) return;
        status = credit_locked(buffer_->ack_word(), &delivered);
      }
      if (!status.ok()) fail(status);
      on_delivered(delivered);
    } else if (auto request = find_request(wc.imm)) {
      request->on_content(wc.byte_len);
    }
  } else if (kind == WorkKind::kTensorWrite) {
    if (auto response = find_response(work_value(wc.wr_id))) response->on_written();
  } else if (kind == WorkKind::kTensorRead) {
    if (auto request = find_request(work_value(wc.wr_id))) request->on_read_done();
  } else if (kind == WorkKind::kAck) {  // (only a stopping channel's fence is signaled)
    std::lock_guard<std::mutex> lock(mu_);
    fence_out_ = false;
  }
}

void RdmaChannel::on_message(std::uint32_t byte_len) {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) return;  // its requests and responses are gone, and so is its peer
    data = buffer_->next_message(byte_len, &size);
  }
  DecodeResult decoded = decode(data, size);
  Delivered delivered = take_spare();
  // A message decoded into copies is taken before it is handled, so that what handling it
  // sends (a request's answer) carries its credit and no ACK of its own is needed; an
  // inline tensor's payload lies in the slot until it is handled.
  const bool copied = decoded.message && decoded.message->type != MessageType::kTensorInline &&
                      decoded.message->type != MessageType::kTensorInlines;
  if (decoded.message) {
    const RdmaMessage& message = *decoded.message;
    Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      owner_.counters().message(message.type);
      if (!error_) status = credit_locked(message.acked, &delivered);  // (failed meanwhile)
      if (copied) taken_locked();
    }
    if (!status.ok()) fail(status);
    const std::uint32_t index = static_cast<std::uint32_t>(message.request_index);
    switch (message.type) {
      case MessageType::kTensorRequest:
        owner_.on_tensor_request(shared_from_this(), message);
        break;
      case MessageType::kTensorRequests:  // each as if it had come alone
        for (const RequestEntry& entry : message.requests) {
          const RdmaMessage request{MessageType::kTensorRequest, entry.index, entry.name,
                                    entry.step_id, 0, 0, std::nullopt, 0, ""};
          owner_.counters().message(request.type);
          owner_.on_tensor_request(shared_from_this(), request);
        }
        break;
      case MessageType::kTensorInlines:  // each as if it had come alone
        for (const InlineEntry& entry : message.inlines) {
          RdmaMessage answer{MessageType::kTensorInline, entry.index, "", 0, 0, 0, entry.meta,
                             0, ""};
          answer.payload = entry.payload;
          answer.payload_size = entry.meta.nbytes;
          owner_.counters().message(answer.type);
          if (auto request = find_request(entry.index)) request->on_message(answer);
        }
        break;
      case MessageType::kTensorReRequest:
      case MessageType::kRelease:
      case MessageType::kCancel:
        if (auto response = find_response(index)) response->on_message(message);
        break;
      case MessageType::kMetaDataResponse:
      case MessageType::kTensorInline:
      case MessageType::kErrorStatus:
        if (auto request = find_request(index)) request->on_message(message);
        break;
    }
  } else {
    bad_message(decoded.error);
  }
  if (!copied) {
    std::lock_guard<std::mutex> lock(mu_);
    taken_locked();
  }
  on_delivered(delivered);
}

void RdmaChannel::taken_locked() {
  buffer_->taken();
  took_messages_ = true;
}

void RdmaChannel::bad_message(const MessageError& error) {
  const Status why(Code::kInternal, name() + ": " + error.message);
  if (error.type && error.request_index) {
    const auto index = static_cast<std::uint32_t>(*error.request_index);
    const MessageType type = *error.type;
    if (type == MessageType::kMetaDataResponse || type == MessageType::kErrorStatus ||
        type == MessageType::kTensorInline) {
      if (auto request = find_request(index)) {
        request->on_malformed(why);  // the sender sends nothing more for it
        return;
      }
    } else if (!find_response(index)) {
      RdmaMessage answer{MessageType::kErrorStatus, index, "", 0, 0, 0, std::nullopt,
                         static_cast<std::int32_t>(Code::kInternal), error.message};
      send(std::move(answer));
      return;
    }
  }
  fail(why);
}

void RdmaChannel::after_batch() {
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) return;
    std::vector<verbs::SendWr>& wrs = scratch_locked();
    if (took_messages_ && remote_) {  // before it is connected, connect() acknowledges
      took_messages_ = false;
      buffer_->ack_if_needed(&wrs);
    }
    status = wrs.empty() ? drain_locked() : post_locked(wrs);
  }
  if (!status.ok()) fail(status);
}

bool RdmaChannel::quiet() {
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_ || !remote_) return true;
    if (!buffer_->owes_ack() && backlog_.empty() && qp_->send_room() >= send_depth_) return true;
    if (fence_out_) {
      status = drain_locked();
    } else {
      fence_out_ = true;
      std::vector<verbs::SendWr>& wrs = scratch_locked();
      buffer_->ack(&wrs, true);
      status = post_locked(wrs);
    }
  }
  if (!status.ok()) {
    fail(status);
    return true;
  }
  return false;
}

}  // namespace tensorverbs
