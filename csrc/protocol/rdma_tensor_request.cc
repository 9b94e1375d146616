#include "protocol/rdma_tensor_request.h"

#include <cstring>

#include "protocol/checksum.h"
#include "protocol/rdma_channel.h"
#include "protocol/rdma_rendezvous.h"
#include "protocol/work_id.h"

namespace tensorverbs {

namespace {

std::string hex32(std::uint32_t value) {
  static const char* digits = "0123456789abcdef";
  std::string out = "0x00000000";
  for (std::size_t i = 0; i < 8; ++i) out[9 - i] = digits[(value >> (4 * i)) & 0xF];
  return out;
}

}  // namespace

RdmaTensorRequest::RdmaTensorRequest(RdmaRendezvous& rendezvous,
                                     std::shared_ptr<RdmaChannel> channel, StepKey key,
                                     std::shared_ptr<RecvCallback> caller,
                                     std::optional<RecvDestination> destination,
                                     std::shared_ptr<RdmaTensorRequest> previous)
    : rendezvous_(rendezvous), channel_(std::move(channel)), key_(std::move(key)),
      previous_(std::move(previous)), attempt_(previous_ ? previous_->attempt_ + 1 : 1),
      caller_(std::move(caller)), destination_(std::move(destination)) {}

std::uint64_t RdmaTensorRequest::incarnation() const { return channel_->incarnation(); }

std::shared_ptr<RdmaTensorRequest> RdmaTensorRequest::successor() const {
  std::lock_guard<std::mutex> lock(mu_);
  return next_.lock();
}

RdmaTensorRequest::~RdmaTensorRequest() = default;

std::string RdmaTensorRequest::what() const {
  return "recv of '" + key_.key.name + "' from " + rendezvous_.task_name(key_.key.src) +
         " at step " + std::to_string(key_.step);
}

std::string RdmaTensorRequest::progress() const {
  if (auto next = successor()) return next->progress();
  std::unique_lock<std::mutex> lock(mu_);
  switch (state_) {
    case State::kRequested:
      if (!sent_) {
        lock.unlock();
        return "not requested yet: queued behind the requests in flight to " +
               rendezvous_.task_name(key_.key.src) + " (" +
               std::to_string(channel_->queued_requests()) + " queued)";
      }
      lock.unlock();
      {
        // (a channel that failed, or was replaced, says so: the request should have moved on)
        const std::optional<Status> broke = channel_->error();
        return "requested; " + rendezvous_.task_name(key_.key.src) + " has not answered" +
               (broke ? " (its channel failed: " + broke->message() + ")" : "");
      }
    case State::kReRequested:
      return "the meta-data arrived and the tensor was re-requested; its write has not";
    case State::kReading: return "the tensor is being read";
    case State::kArrived: return "the tensor arrived; it is being handed over";
    case State::kRevoking: return "the tensor arrived; its landing's window is being invalidated";
    case State::kDraining:
      return broke_->message() + "; waiting for the old queue pair's receives to be flushed "
             "(the tensor may have been written)";
    case State::kHeld:
      return broke_->message() + "; it is asked again once the channel is set up again (attempt " +
             std::to_string(attempt_) + " of " + std::to_string(kMaxAttempts) + ")";
    case State::kDone: break;
  }
  return "";
}

void RdmaTensorRequest::start() {
  auto admitted = channel_->add_request(shared_from_this());
  if (!admitted.ok()) {
    // the channel failed since it was chosen (a successor resumed on a channel that broke
    // at once, a recv started as it broke): held for the next one as its requests were,
    // where the task recovers channels (hold() fails it if the peer is gone for good; the
    // channel's own gone() may only say that it was replaced meanwhile)
    fail(admitted.status(), rendezvous_.recovers());
    return;
  }
  // queued behind the requests in flight: the channel sends it when one of them ends
  if (!admitted.value()) return;
  const std::uint32_t index = *admitted.value();
  // it ended first (a successor may be given up as it starts: whatever ended it, it forgot
  // it), or its channel broke first: then it is held, tracked still (a step's abort and the
  // task's stop reach it there)
  if (!send_request(index)) channel_->remove_request(index);
}

bool RdmaTensorRequest::send_request(std::uint32_t index) {
  RdmaMessage message{MessageType::kTensorRequest, 0, key_.key.name, key_.step, 0, 0,
                      std::nullopt, 0, ""};
  {
    std::unique_lock<std::mutex> lock(mu_);
    // it ended before it was asked for (given up, or handed a late tensor), or its channel broke
    if (state_ == State::kDone || state_ == State::kHeld) return false;
    index_ = index;
    sent_ = true;
    message.request_index = index_;
    meta_ = rendezvous_.cached_meta(key_.key.src, key_.key.name);
    message.meta = meta_;
    // a tensor that comes inline needs no landing; in read mode this side reads
    if (meta_ && meta_->nbytes > kMaxTailBytes && !rendezvous_.read_mode()) {
      Status landed = land(*meta_, true);
      if (!landed.ok()) {
        meta_.reset();  // ask without a landing: the peer answers with its meta-data
        message.meta.reset();
      } else if (window_) {
        message.remote_addr = window_->addr();
        message.rkey = window_->rkey();
      }
    }
  }
  channel_->send(std::move(message));
  return true;
}

Status RdmaTensorRequest::land(const TensorMeta& meta, bool window) {
  release_landing();
  if (meta.nbytes == 0) return Status();
  auto landing = TensorLanding::prepare(meta, destination_ ? &*destination_ : nullptr,
                                        channel_->prefers_allocated_memory(), rendezvous_.pool(),
                                        rendezvous_.pd(), rendezvous_.counters());
  if (!landing.ok()) return landing.status();
  landing_ = landing.take();
  if (!window) return Status();
  auto bound = channel_->bind_window(landing_->region(),
                                     reinterpret_cast<std::uint64_t>(landing_->data()),
                                     landing_->size(), verbs::kRemoteWrite);
  if (!bound.ok()) {
    landing_.reset();
    return bound.status();
  }
  window_ = bound.take();
  rendezvous_.counters().add(rendezvous_.counters().windows);
  return Status();
}

bool RdmaTensorRequest::read_outstanding_locked() const {
  return read_seen_ && !read_seen_->load(std::memory_order_acquire);
}

bool RdmaTensorRequest::release_landing() {
  bool busy = false;
  if (window_ && !window_->revoke()) {  // a write may still be under way: keep both
    std::shared_ptr<verbs::MemoryWindow> window = std::move(window_);
    std::shared_ptr<TensorLanding> landing = landing_;
    rendezvous_.quarantine([window, landing] { return window->quiesced(); });
    busy = true;
  }
  if (landing_ && read_outstanding_locked()) {  // our read may still place bytes there
    rendezvous_.quarantine([seen = read_seen_, landing = landing_] {
      return seen->load(std::memory_order_acquire);
    });
    busy = true;
  }
  window_.reset();
  landing_.reset();
  return busy;
}

void RdmaTensorRequest::on_message(const RdmaMessage& message) {
  switch (message.type) {
    case MessageType::kMetaDataResponse: on_meta(message); break;
    case MessageType::kTensorInline: on_inline(message); break;
    case MessageType::kErrorStatus: {
      std::unique_lock<std::mutex> lock(mu_);
      if (state_ == State::kHeld) return;  // from the broken channel: the successor asks again
      lock.unlock();
      finish(Status(static_cast<Code>(message.error_code),
                    rendezvous_.task_name(key_.key.src) + ": " + message.error_message),
             std::nullopt);
      break;
    }
    default: break;
  }
}

void RdmaTensorRequest::on_meta(const RdmaMessage& message) {
  std::optional<RdmaMessage> next;
  Status failed;
  bool read = false;
  std::uint64_t local = 0, length = 0;
  std::uint32_t lkey = 0;
  std::shared_ptr<std::atomic<bool>> seen;  // our read's (see RdmaChannel::post_transfer)
  {
    std::lock_guard<std::mutex> lock(mu_);
    // its ERROR_STATUS ends it; held, or waiting for the drain: from the broken channel,
    // taken before it broke (the request is asked again on the next one; a re-request here
    // would leave the drain nothing to wait for, and nobody to ask again)
    if (state_ == State::kDone || state_ == State::kHeld || state_ == State::kDraining ||
        cancel_sent_) {
      return;
    }
    rendezvous_.update_meta(key_.key.src, key_.key.name, *message.meta);
    meta_ = message.meta;
    if (rendezvous_.read_mode()) {  // the address field holds where to read from
      failed = land(*meta_, false);
      if (failed.ok()) {
        state_ = State::kReading;
        read = true;
        read_seen_ = seen = std::make_shared<std::atomic<bool>>(false);
        length = meta_->nbytes;
        if (landing_) {
          local = reinterpret_cast<std::uint64_t>(landing_->data());
          lkey = landing_->region().lkey();
        }
      } else {
        cancel_locked(&next);  // the sender holds the tensor for us: give it back
      }
    } else {
      if (rendezvous_.validate()) checksum_ = static_cast<std::uint32_t>(message.remote_addr);
      failed = land(*meta_, true);
      if (failed.ok()) {
        state_ = State::kReRequested;
        next = RdmaMessage{MessageType::kTensorReRequest, index_, key_.key.name, key_.step,
                           window_ ? window_->addr() : 0, window_ ? window_->rkey() : 0u,
                           meta_, 0, ""};
      } else {
        cancel_locked(&next);
      }
    }
  }
  if (next) channel_->send(std::move(*next));
  if (!failed.ok()) {
    give_up(failed);
    return;
  }
  if (read) {
    if (length == 0) {
      on_read_done();
      return;
    }
    rendezvous_.counters().add(rendezvous_.counters().rdma_reads);
    channel_->post_transfer(verbs::WrOpcode::kRdmaRead, local, length, lkey, message.remote_addr,
                            message.rkey, work_id(WorkKind::kTensorRead, index_), 0, seen);
  }
}

void RdmaTensorRequest::on_inline(const RdmaMessage& message) {
  std::optional<TensorValue> value;
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDone || state_ == State::kHeld) return;
    state_ = State::kArrived;  // (finish() takes the lock again: a failure between is too late)
    rendezvous_.update_meta(key_.key.src, key_.key.name, *message.meta);
    release_landing();
    const TensorMeta& meta = *message.meta;
    // into the destination only while its caller waits (one who gave up may reuse it)
    if (caller_ && !deferred_ && destination_ && destination_->fits(meta) &&
        message.payload_size == destination_->nbytes) {
      if (message.payload_size) {
        std::memcpy(destination_->data, message.payload, message.payload_size);
      }
      value = TensorValue{meta, destination_->data, destination_->keepalive, true};
    } else if (auto buffer = rendezvous_.pool().allocate(message.payload_size); buffer.ok()) {
      PoolBuffer result = buffer.take();
      if (message.payload_size) std::memcpy(result->data(), message.payload, message.payload_size);
      value = TensorValue{meta, result->data(), result};
    } else {
      status = buffer.status();
    }
  }
  finish(status, std::move(value));
}

void RdmaTensorRequest::on_content(std::uint32_t byte_len) {
  Status status;
  std::optional<TensorValue> value;
  std::shared_ptr<verbs::MemoryWindow> revoking;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDone || state_ == State::kHeld) return;
    state_ = State::kArrived;  // (as in on_inline)
    if (!meta_ || (meta_->nbytes && !landing_)) {
      status = Status(Code::kDataLoss, what() + ": content arrived before meta-data");
    } else {
      const std::uint32_t expected = channel_->last_operation_bytes(meta_->nbytes);
      const std::uint8_t* data = landing_ ? landing_->data() : nullptr;
      if (byte_len != expected) {
        status = Status(Code::kDataLoss, what() + ": " + std::to_string(byte_len) +
                                             " bytes arrived, " + std::to_string(expected) +
                                             " expected");
      } else if (checksum_ && crc32(data, meta_->nbytes) != *checksum_) {
        status = Status(Code::kDataLoss, what() + ": checksum mismatch (sender " + hex32(*checksum_) +
                                             ", received " + hex32(crc32(data, meta_->nbytes)) + ")");
      } else {
        value = TensorValue{*meta_, data, landing_, landing_ && landing_->in_destination()};
        if (window_ && !window_->revoke()) {
          // The write is complete (its immediate comes last), but the peer can reach the
          // landing until the window's invalidation has run (a type 2 window whose bind
          // completed unseen): the tensor is handed over once it has.
          revoking = std::move(window_);
          state_ = State::kRevoking;
        }
        window_.reset();
        landing_.reset();
      }
    }
  }
  if (revoking) {
    rendezvous_.quarantine([self = shared_from_this(), revoking, value = std::move(value)]() mutable {
      if (!revoking->quiesced()) return false;
      self->finish(Status(), std::move(value));
      return true;
    });
    return;
  }
  finish(status, std::move(value));
}

void RdmaTensorRequest::on_read_done() {
  std::optional<TensorValue> value;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // (draining: its channel broke after the read landed, a read the peer can no longer
    // be told of; the tensor it gave back to its table goes with the step)
    if ((state_ != State::kReading && state_ != State::kDraining) || !meta_) return;
    state_ = State::kArrived;  // (as in on_inline)
    value = TensorValue{*meta_, landing_ ? landing_->data() : nullptr, landing_,
                        landing_ && landing_->in_destination()};
    landing_.reset();
  }
  channel_->send(RdmaMessage{MessageType::kRelease, index_, key_.key.name, key_.step, 0, 0,
                             std::nullopt, 0, ""});
  finish(Status(), std::move(value));
}

void RdmaTensorRequest::on_malformed(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kHeld) return;
  }
  finish(why, std::nullopt);
}

void RdmaTensorRequest::cancel_locked(std::optional<RdmaMessage>* out) {
  if (cancel_sent_ || state_ == State::kReading || state_ == State::kArrived ||
      state_ == State::kRevoking || state_ == State::kDone) {
    return;
  }
  if (!sent_) {  // nothing was asked for (index_ is nobody's): nothing will come
    state_ = State::kDone;
    return;
  }
  cancel_sent_ = true;
  *out = RdmaMessage{MessageType::kCancel, index_, key_.key.name, key_.step, 0, 0,
                     std::nullopt, 0, ""};
}

bool RdmaTensorRequest::hand_over(TensorValue& value) {
  std::shared_ptr<RecvCallback> caller;
  std::optional<RdmaMessage> cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDone || !caller_ || deferred_) return false;
    caller.swap(caller_);
    cancel_locked(&cancel);  // what the peer sends for it anyway comes late in turn
  }
  if (cancel) channel_->send(std::move(*cancel));
  rendezvous_.forget(this);
  caller->complete(RecvResult{Status(), std::move(value)});
  return true;
}

bool RdmaTensorRequest::destination_reachable_locked() const {
  if (!sent_ || !landing_ || !landing_->in_destination()) return false;
  return state_ == State::kRequested || state_ == State::kReRequested ||
         state_ == State::kReading || state_ == State::kArrived || state_ == State::kRevoking ||
         state_ == State::kDraining;
}

void RdmaTensorRequest::give_up(const Status& why) {
  std::shared_ptr<RdmaTensorRequest> next;
  std::shared_ptr<RecvCallback> caller;
  std::optional<RdmaMessage> cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // asked again on a new channel, that one is the recv now: looked at under the lock that
    // resume() hands the caller over under, so that no give-up falls between the two
    next = next_.lock();
    if (!next) {
      if (state_ == State::kDone || deferred_) return;
      cancel_locked(&cancel);
      if (destination_reachable_locked()) {
        // the peer may still write (or our read still land) in the caller's memory: the
        // caller hears `why` from finish(), once nothing can
        deferred_ = why;
      } else {
        caller.swap(caller_);
      }
    }
  }
  if (next) {
    next->give_up(why);
    return;
  }
  if (cancel) channel_->send(std::move(*cancel));
  rendezvous_.forget(this);
  if (caller) caller->complete(RecvResult{why, TensorValue{}});
}

void RdmaTensorRequest::finish(Status status, std::optional<TensorValue> value, bool registered) {
  std::shared_ptr<RecvCallback> caller;
  std::optional<Status> deferred;
  std::shared_ptr<std::atomic<bool>> read_seen;  // the caller hears once our read is over
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ == State::kDone) return;
    state_ = State::kDone;
    caller.swap(caller_);
    deferred.swap(deferred_);
    if (landing_ && landing_->in_destination() && read_outstanding_locked()) read_seen = read_seen_;
    release_landing();
    registered = registered && sent_;  // a queued request holds no index
  }
  if (registered) channel_->remove_request(index_);
  const bool arrived = status.ok() && value;
  if (arrived) {
    auto& counters = rendezvous_.counters();
    counters.add(counters.tensors_received);
    counters.add(counters.bytes_received, value->meta.nbytes);
  }
  rendezvous_.forget(this);
  if (caller && read_seen) {  // the channel failed under a read into the caller's memory
    rendezvous_.quarantine([caller, read_seen, why = deferred.value_or(status)] {
      if (!read_seen->load(std::memory_order_acquire)) return false;
      caller->complete(RecvResult{why, TensorValue{}});
      return true;
    });
    return;
  }
  if (caller && !deferred) {
    caller->complete(RecvResult{std::move(status), value ? std::move(*value) : TensorValue{}});
    return;
  }
  // its caller gave up: the tensor is kept for the next recv (a copy, if it is in the
  // caller's memory, made before the caller hears)
  if (arrived) rendezvous_.keep_late(key_, std::move(*value));
  if (caller) caller->complete(RecvResult{*deferred, TensorValue{}});
}

}  // namespace tensorverbs
