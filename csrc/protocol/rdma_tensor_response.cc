#include "protocol/rdma_tensor_response.h"

#include "protocol/checksum.h"
#include "protocol/rdma_channel.h"
#include "protocol/rdma_rendezvous.h"
#include "protocol/seconds.h"
#include "protocol/work_id.h"

namespace tensorverbs {

RdmaTensorResponse::RdmaTensorResponse(RdmaRendezvous& rendezvous,
                                       std::shared_ptr<RdmaChannel> channel,
                                       const RdmaMessage& request)
    : rendezvous_(rendezvous), channel_(std::move(channel)),
      index_(static_cast<std::uint32_t>(request.request_index)), step_(request.step_id),
      key_{rendezvous.task(), channel_->peer(), request.name}, requested_meta_(request.meta),
      landing_addr_(request.remote_addr), landing_rkey_(request.rkey) {}

RdmaTensorResponse::~RdmaTensorResponse() = default;

void RdmaTensorResponse::start() {
  // The waiter holds the response: a tensor the table hands over as the channel abandons
  // the response (it was taken off the table already) reaches on_tensor, which gives it
  // back. (The response holds only the waiter's key: no cycle; the table lets the waiter go
  // once it fired, was withdrawn or its step ended.)
  LocalTable::Waiter waiter = rendezvous_.table().recv(
      step_, key_,
      [this](Status status, TensorValue value) { on_tensor(std::move(status), std::move(value)); },
      shared_from_this());
  std::unique_lock<std::mutex> lock(mu_);
  waiter_ = waiter;
  if (state_ == State::kDone && waiter.id != 0) {  // abandoned while it was asking
    lock.unlock();
    rendezvous_.table().withdraw(waiter);
  }
}

void RdmaTensorResponse::on_tensor(Status status, TensorValue value) {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ != State::kWaitingTensor) {  // cancelled or abandoned meanwhile
    lock.unlock();
    if (status.ok()) rendezvous_.table().requeue(step_, key_, std::move(value));
    return;
  }
  if (!status.ok()) {
    error(lock, status.code(), status.message());
    return;
  }
  value_ = std::move(value);
  answer(lock);
}

void RdmaTensorResponse::answer(std::unique_lock<std::mutex>& lock) {
  const TensorValue& value = *value_;
  ProtocolCounters& counters = rendezvous_.counters();
  if (value.meta.nbytes <= kMaxTailBytes) {  // eager: the tensor itself in the message
    state_ = State::kInline;
    count(1);
    RdmaMessage message{MessageType::kTensorInline, index_, key_.name, step_, 0, 0, value.meta,
                        0, ""};
    message.payload = value.data;
    message.payload_size = value.size();
    lock.unlock();
    channel_->send_inline(std::move(message), shared_from_this());
    return;
  }
  const bool read_mode = rendezvous_.read_mode();
  TensorSource::BindWindow bind;
  if (read_mode) {
    bind = [this](const verbs::MemoryRegion& region, std::uint64_t addr, std::size_t length) {
      return channel_->bind_window(region, addr, length, verbs::kRemoteRead);
    };
  }
  auto source = TensorSource::prepare(value, rendezvous_.pool(), rendezvous_.pd(), counters, bind);
  if (!source.ok()) {
    error(lock, source.status().code(),
          "preparing '" + key_.name + "' for " + channel_->peer_name() + ": " +
              source.status().message());
    return;
  }
  source_ = source.take();
  if (read_mode) {
    state_ = State::kWaitingReRequest;  // for the RELEASE
    count(1);
    RdmaMessage message{MessageType::kMetaDataResponse, index_, key_.name, step_,
                        source_->window() ? source_->window()->addr() : 0,
                        source_->window() ? source_->window()->rkey() : 0u, value.meta, 0, ""};
    lock.unlock();
    rendezvous_.add_hold(shared_from_this());
    channel_->send(std::move(message));
    return;
  }
  const bool validate = rendezvous_.validate();
  if (validate || !requested_meta_ || !(*requested_meta_ == value.meta) || !landing_rkey_) {
    state_ = State::kWaitingReRequest;
    RdmaMessage message{MessageType::kMetaDataResponse, index_, key_.name, step_,
                        validate ? crc32(value.data, value.size()) : 0, 0, value.meta, 0, ""};
    lock.unlock();
    rendezvous_.add_hold(shared_from_this());
    channel_->send(std::move(message));
    return;
  }
  write(lock, landing_addr_, landing_rkey_);
}

void RdmaTensorResponse::write(std::unique_lock<std::mutex>& lock, std::uint64_t remote_addr,
                               std::uint32_t rkey) {
  state_ = State::kWriting;
  count(1);
  ProtocolCounters& counters = rendezvous_.counters();
  counters.add(counters.rdma_writes);
  counters.add(counters.bytes_written, source_->length());
  const std::uint64_t local = source_->addr(), length = source_->length();
  const std::uint32_t lkey = source_->lkey();
  lock.unlock();
  channel_->post_transfer(verbs::WrOpcode::kRdmaWriteWithImm, local, length, lkey, remote_addr,
                          rkey, work_id(WorkKind::kTensorWrite, index_), index_);
}

void RdmaTensorResponse::on_message(const RdmaMessage& message) {
  if (message.type == MessageType::kCancel) {
    cancel();
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ != State::kWaitingReRequest) return;
  if (message.type == MessageType::kRelease && rendezvous_.read_mode()) {
    finish(lock, true);
  } else if (message.type == MessageType::kTensorReRequest && !rendezvous_.read_mode()) {
    write(lock, message.remote_addr, message.rkey);
  }
}

void RdmaTensorResponse::on_written() {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ == State::kWriting) finish(lock, true);
}

void RdmaTensorResponse::on_delivered() {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ == State::kInline) finish(lock, true);
}

void RdmaTensorResponse::cancel() {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ == State::kWaitingTensor) {
    const LocalTable::Waiter waiter = waiter_;
    lock.unlock();
    rendezvous_.table().withdraw(waiter);  // if it already fired, on_tensor sees kDone
    lock.lock();
    if (state_ != State::kWaitingTensor && state_ != State::kWaitingReRequest) return;
  } else if (state_ != State::kWaitingReRequest) {
    return;  // the tensor is on its way
  }
  error(lock, Code::kCancelled, "request cancelled by its receiver");
}

void RdmaTensorResponse::expire(double timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ != State::kWaitingReRequest) return;
  error(lock, Code::kDeadlineExceeded,
        rendezvous_.task_name(rendezvous_.task()) + " held '" + key_.name + "' for " +
            channel_->peer_name() + " " + seconds(timeout) + " s, waiting for it to " +
            (rendezvous_.read_mode() ? "release it" : "ask for it again") +
            ", and took it back (TENSORVERBS_HOLD_SECONDS)");
}

void RdmaTensorResponse::abandon() {
  std::unique_lock<std::mutex> lock(mu_);
  if (state_ == State::kDone) return;
  if (state_ == State::kWaitingTensor) {
    const LocalTable::Waiter waiter = waiter_;
    state_ = State::kDone;  // a value the waiter takes now goes back (on_tensor)
    lock.unlock();
    rendezvous_.table().withdraw(waiter);
    return;
  }
  // an inline answer the peer's credit covered was taken: the failure came after it
  finish(lock, state_ == State::kInline && credited_.load(std::memory_order_acquire));
}

void RdmaTensorResponse::error(std::unique_lock<std::mutex>& lock, Code code,
                               const std::string& message) {
  RdmaMessage answer{MessageType::kErrorStatus, index_, key_.name, step_, 0, 0, std::nullopt,
                     static_cast<std::int32_t>(code), message};
  finish(lock, false);
  channel_->send(std::move(answer));
}

void RdmaTensorResponse::count(int sign) {
  if ((sign > 0) == counted_) return;
  counted_ = sign > 0;
  ProtocolCounters& counters = rendezvous_.counters();
  const std::uint64_t nbytes = value_ ? value_->meta.nbytes : 0;
  if (sign > 0) {
    counters.add(counters.tensors_sent);
    counters.add(counters.bytes_sent, nbytes);
  } else {
    counters.sub(counters.tensors_sent);
    counters.sub(counters.bytes_sent, nbytes);
  }
}

void RdmaTensorResponse::finish(std::unique_lock<std::mutex>& lock, bool delivered) {
  state_ = State::kDone;
  std::shared_ptr<const void> memory = value_ ? value_->keepalive : nullptr;
  std::optional<TensorValue> back;
  if (!delivered && value_) {
    count(-1);
    back = std::move(value_);
  } else if (value_ && value_->ticket) {
    value_->ticket->deliver();
  }
  value_.reset();
  std::shared_ptr<TensorSource> source = std::move(source_);
  lock.unlock();
  if (source && !source->revoke()) {  // a read may still be under way: keep the bytes
    rendezvous_.quarantine([source, memory] { return source->quiesced(); });
  }
  if (back) rendezvous_.table().requeue(step_, key_, std::move(*back));
  channel_->remove_response(index_);
}

}  // namespace tensorverbs
