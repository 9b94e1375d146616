#include "protocol/rdma_channel.h"

#include <algorithm>

#include "core/thread_guard.h"
#include "protocol/rdma_tensor_request.h"
#include "protocol/rdma_tensor_response.h"
#include "protocol/work_id.h"

namespace tensorverbs {

RdmaChannel::RdmaChannel(ChannelOwner& owner, std::int32_t peer, std::uint64_t incarnation,
                         std::shared_ptr<verbs::QueuePair> qp,
                         std::unique_ptr<RdmaMessageBuffer> buffer, std::uint64_t max_message_bytes,
                         const std::string& provider, std::uint32_t max_requests)
    : owner_(owner), peer_(peer), incarnation_(incarnation), qp_(std::move(qp)),
      provider_(provider), peer_name_(owner.task_name(peer)), name_("verbs channel to " + peer_name_),
      buffer_(std::move(buffer)), max_message_bytes_(max_message_bytes),
      max_requests_(std::max<std::uint32_t>(1, max_requests)) {}

RdmaChannel::~RdmaChannel() {
  fail(Status(Code::kUnavailable, name() + " was closed"));
  abandon_reads();  // the queue pair goes with the channel: nothing it read can land any more
}

void RdmaChannel::abandon_reads() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [index, seen] : reads_) seen->store(true, std::memory_order_release);
  reads_.clear();
}

void RdmaChannel::track_read(std::uint32_t index, std::shared_ptr<std::atomic<bool>> seen) {
  std::lock_guard<std::mutex> lock(mu_);
  reads_[index] = std::move(seen);
}

Status RdmaChannel::start() {
  std::vector<verbs::RecvWr> recvs(std::size_t{message_receives(buffer_->slots())} + max_requests_);
  for (std::size_t i = 0; i < recvs.size(); ++i) {
    recvs[i].wr_id = work_id(WorkKind::kRecv, static_cast<std::uint32_t>(i));
  }
  return qp_->post_recv(recvs.data(), recvs.size());
}

std::string RdmaChannel::description() const {
  std::lock_guard<std::mutex> lock(mu_);
  ChannelDescription out;
  out.provider = provider_;
  out.endpoint = qp_->endpoint();
  out.rx_addr = buffer_->rx().addr();
  out.rx_rkey = buffer_->rx().rkey();
  out.rx_length = buffer_->rx().length();
  out.slots = buffer_->slots();
  out.max_message_bytes = max_message_bytes_;
  return out.serialize();
}

bool RdmaChannel::accepts(const ChannelDescription& remote) const {
  std::lock_guard<std::mutex> lock(mu_);
  return !remote_ || (remote_->endpoint == remote.endpoint && remote_->rx_addr == remote.rx_addr &&
                      remote_->rx_rkey == remote.rx_rkey);
}

Status RdmaChannel::connect(const ChannelDescription& remote) {
  std::unique_lock<std::mutex> lock(mu_);
  // both sides may set the channel up at once: one connects, the other waits for it
  connected_.wait(lock, [this] { return !connecting_; });
  if (error_) return *error_;
  if (remote_) {
    if (remote_->endpoint != remote.endpoint) {
      return Status(Code::kUnavailable, name_ + ": the peer offered a second queue pair");
    }
    return Status();
  }
  if (remote.provider != provider_) {
    return Status(Code::kUnavailable, name() + ": the peer runs the verbs provider '" +
                                          remote.provider + "', this task '" + provider_ + "'");
  }
  if (remote.slots != buffer_->slots()) {
    return Status(Code::kInvalidArgument,
                  name() + ": the peer has " + std::to_string(remote.slots) +
                      " message slots, this task " + std::to_string(buffer_->slots()) +
                      " (TENSORVERBS_MESSAGE_SLOTS must agree)");
  }
  // dialing may take long (a slow or dead peer): nothing else of the channel waits for it
  Status flushed;
  connecting_ = true;
  lock.unlock();
  Status status = qp_->connect(remote.endpoint);
  lock.lock();
  connecting_ = false;
  if (!status.ok()) {
    status = Status(status.code(), name() + ": " + status.message());
  } else if (error_) {  // failed while dialing
    status = *error_;
  } else {
    remote_ = remote;
    max_message_bytes_ = std::min(max_message_bytes_.load(), remote.max_message_bytes);
    buffer_->connect(remote.rx_addr, remote.rx_rkey);
    flushed = send_early_locked();
  }
  lock.unlock();
  connected_.notify_all();
  if (!flushed.ok()) fail(flushed);
  return status;
}

Status RdmaChannel::send_early_locked() {
  std::vector<verbs::SendWr> wrs;
  for (auto& [message, response] : early_) {
    std::uint64_t sequence = 0;
    bool batched = false;
    Status status = buffer_->send(message, &wrs, &sequence, &batched);
    if (!status.ok()) return status;
    owner_.counters().message(message.type);
    if (batched) owner_.counters().message(MessageType::kTensorRequests);
    if (response) inline_.emplace_back(sequence, std::move(response));
  }
  early_.clear();
  if (took_messages_) {  // what the peer sent meanwhile is acknowledged now
    took_messages_ = false;
    buffer_->ack_if_needed(&wrs);
  }
  backlog_.insert(backlog_.begin(), wrs.begin(), wrs.end());  // before what waited there
  return drain_locked();
}

bool RdmaChannel::ready() const {
  std::lock_guard<std::mutex> lock(mu_);
  return remote_ && !error_;
}

std::optional<Status> RdmaChannel::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

Status RdmaChannel::post_locked(std::vector<verbs::SendWr>& wrs) {
  if (wrs.empty()) return Status();
  if (remote_ && backlog_.empty() && qp_->send_room() > wrs.size()) {  // room to spare: post at once
    Status status = qp_->post_send(wrs.data(), wrs.size());
    wrs.clear();
    if (status.ok()) return status;
    return Status(Code::kUnavailable, name() + " failed: " + status.message());
  }
  backlog_.insert(backlog_.end(), wrs.begin(), wrs.end());
  wrs.clear();
  return drain_locked();
}

Status RdmaChannel::drain_locked() {
  if (!remote_) return Status();  // posted once connected (send_early_locked)
  std::vector<verbs::SendWr> batch;
  while (!backlog_.empty()) {
    const std::size_t room = qp_->send_room();
    if (room == 0) break;
    const std::size_t n = std::min(room, backlog_.size());
    batch.assign(backlog_.begin(), backlog_.begin() + static_cast<std::ptrdiff_t>(n));
    // the send queue is full now: its last request's completion says when it has room again
    if (n == room) batch.back().signaled = true;
    Status status = qp_->post_send(batch.data(), batch.size());
    if (!status.ok()) {
      if (status.code() == Code::kResourceExhausted) break;  // the provider's own requests took it
      return Status(Code::kUnavailable, name() + " failed: " + status.message());
    }
    backlog_.erase(backlog_.begin(), backlog_.begin() + static_cast<std::ptrdiff_t>(n));
  }
  if (!backlog_.empty()) owner_.wants_housekeeping();
  return Status();
}

bool RdmaChannel::drain() {
  Status status;
  bool left = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) return false;
    status = drain_locked();
    left = remote_ && !backlog_.empty();  // unconnected: connect() posts it
  }
  if (!status.ok()) fail(status);
  return left && status.ok();
}

void RdmaChannel::send(RdmaMessage message) {
  std::vector<verbs::SendWr> wrs;
  std::uint64_t sequence = 0;
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) return;
    if (!remote_) {  // a request of the peer came before this side connected: sent then
      early_.emplace_back(std::move(message), nullptr);
      return;
    }
    bool batched = false;
    status = buffer_->send(message, &wrs, &sequence, &batched);
    if (status.ok()) {
      owner_.counters().message(message.type);
      if (batched) owner_.counters().message(MessageType::kTensorRequests);
      status = post_locked(wrs);
    }
  }
  if (!status.ok()) fail(status);
}

void RdmaChannel::send_inline(RdmaMessage message, std::shared_ptr<RdmaTensorResponse> response) {
  std::vector<verbs::SendWr> wrs;
  std::uint64_t sequence = 0;
  Status status(Code::kUnavailable, name() + " failed");
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_ && !remote_) {
      early_.emplace_back(std::move(message), std::move(response));
      return;
    }
    if (!error_) {
      status = buffer_->send(message, &wrs, &sequence);
      if (status.ok()) {
        owner_.counters().message(message.type);
        inline_.emplace_back(sequence, response);
        status = post_locked(wrs);
        if (status.ok()) return;
      }
    } else {
      status = *error_;
    }
  }
  fail(status);
  response->abandon();  // the tensor goes back (fail() did it if it was registered)
}

void RdmaChannel::post_transfer(verbs::WrOpcode opcode, std::uint64_t local,
                                std::uint64_t total, std::uint32_t lkey,
                                std::uint64_t remote_addr, std::uint32_t rkey,
                                std::uint64_t wr_id, std::uint32_t imm) {
  const std::uint64_t step = std::min<std::uint64_t>(max_message_bytes_.load(), 1u << 30);
  std::vector<verbs::SendWr> wrs;
  std::uint64_t offset = 0;
  do {
    const std::uint64_t length = std::min(step, total - offset);
    const bool last = offset + length >= total;
    verbs::SendWr wr;
    wr.wr_id = last ? wr_id : 0;
    wr.opcode = last || opcode == verbs::WrOpcode::kRdmaRead ? opcode : verbs::WrOpcode::kRdmaWrite;
    wr.sge = {local + offset, static_cast<std::uint32_t>(length), lkey};
    wr.remote_addr = remote_addr + offset;
    wr.rkey = rkey;
    wr.imm = imm;
    wr.signaled = last;
    wrs.push_back(wr);
    offset += length;
  } while (offset < total);
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) return;  // fail() ended whatever this was for
    status = post_locked(wrs);
  }
  if (!status.ok()) fail(status);
}

Result<std::unique_ptr<verbs::MemoryWindow>> RdmaChannel::bind_window(
    const verbs::MemoryRegion& region, std::uint64_t addr, std::size_t length,
    std::uint32_t access) {
  return qp_->bind_window(region, addr, length, access);
}

std::uint32_t RdmaChannel::last_operation_bytes(std::uint64_t nbytes) const {
  if (nbytes == 0) return 0;
  const std::uint64_t step = std::min<std::uint64_t>(max_message_bytes_.load(), 1u << 30);
  const std::uint64_t rest = nbytes % step;
  return static_cast<std::uint32_t>(rest ? rest : step);
}

std::uint32_t RdmaChannel::next_index_locked() {
  // indices run 0..kMaxRequestIndex and wrap; those of live requests are skipped
  const auto next = [](std::uint32_t i) { return i >= kMaxRequestIndex ? 0u : i + 1; };
  while (requests_.count(next_index_)) next_index_ = next(next_index_);
  const std::uint32_t index = next_index_;
  next_index_ = next(next_index_);
  return index;
}

Result<std::optional<std::uint32_t>> RdmaChannel::add_request(
    std::shared_ptr<RdmaTensorRequest> request) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) return *error_;
  if (requests_.size() >= max_requests_ || !queued_.empty()) {
    queued_.push_back(std::move(request));
    return std::optional<std::uint32_t>();
  }
  const std::uint32_t index = next_index_locked();
  requests_.emplace(index, std::move(request));
  return std::optional<std::uint32_t>(index);
}

void RdmaChannel::remove_request(std::uint32_t index) {
  std::unique_lock<std::mutex> lock(mu_);
  requests_.erase(index);
  admit_queued(lock);
}

void RdmaChannel::admit_queued(std::unique_lock<std::mutex>& lock) {
  while (!error_ && requests_.size() < max_requests_ && !queued_.empty()) {
    std::shared_ptr<RdmaTensorRequest> request = std::move(queued_.front());
    queued_.pop_front();
    const std::uint32_t index = next_index_locked();
    requests_.emplace(index, request);
    lock.unlock();
    const bool sent = request->send_request(index);  // false: it ended while queued
    lock.lock();
    if (!sent) requests_.erase(index);
  }
}

std::string RdmaChannel::describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  return name_ + ": " + (error_ ? "failed (" + error_->message() + ")" : remote_ ? "ready" : "not connected") +
         "; requests in flight " + std::to_string(requests_.size()) + " of " +
         std::to_string(max_requests_) + ", queued " + std::to_string(queued_.size()) +
         "; responses " + std::to_string(responses_.size()) + ", inline " +
         std::to_string(inline_.size()) + "; reads " + std::to_string(reads_.size()) +
         "; backlog " + std::to_string(backlog_.size()) +
         ", send room " + std::to_string(qp_->send_room()) + "; " + buffer_->describe();
}

std::size_t RdmaChannel::queued_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_.size();
}

std::shared_ptr<RdmaTensorResponse> RdmaChannel::add_response(
    std::uint32_t index, const std::function<std::shared_ptr<RdmaTensorResponse>()>& make) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) return nullptr;
    if (!responses_.count(index)) return responses_[index] = make();
  }
  fail(Status(Code::kInternal, name() + ": the peer reused request index " + std::to_string(index)));
  return nullptr;
}

void RdmaChannel::remove_response(std::uint32_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  responses_.erase(index);
}

std::shared_ptr<RdmaTensorRequest> RdmaChannel::find_request(std::uint32_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = requests_.find(index);
  return it == requests_.end() ? nullptr : it->second;
}

std::shared_ptr<RdmaTensorResponse> RdmaChannel::find_response(std::uint32_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = responses_.find(index);
  return it == responses_.end() ? nullptr : it->second;
}

Status RdmaChannel::credit_locked(std::uint32_t count,
                                  std::vector<std::shared_ptr<RdmaTensorResponse>>* delivered) {
  std::vector<verbs::SendWr> wrs;
  const std::uint64_t taken = buffer_->credit(count, &wrs);
  auto done = std::partition(inline_.begin(), inline_.end(),
                             [taken](const auto& entry) { return entry.first > taken; });
  for (auto it = done; it != inline_.end(); ++it) delivered->push_back(std::move(it->second));
  inline_.erase(done, inline_.end());
  return post_locked(wrs);
}

void RdmaChannel::on_completion(const verbs::WorkCompletion& wc) {
  const WorkKind kind = work_kind(wc.wr_id);
  if (kind == WorkKind::kTensorRead) {  // whatever its status, the read is over
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reads_.find(work_value(wc.wr_id));
    if (it != reads_.end()) {
      it->second->store(true, std::memory_order_release);
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
      std::vector<std::shared_ptr<RdmaTensorResponse>> delivered;
      Status status;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (error_) return;
        status = credit_locked(buffer_->ack_word(), &delivered);
      }
      if (!status.ok()) fail(status);
      for (auto& response : delivered) response->on_delivered();
    } else if (auto request = find_request(wc.imm)) {
      request->on_content(wc.byte_len);
    }
  } else if (kind == WorkKind::kTensorWrite) {
    if (auto response = find_response(work_value(wc.wr_id))) response->on_written();
  } else if (kind == WorkKind::kTensorRead) {
    if (auto request = find_request(work_value(wc.wr_id))) request->on_read_done();
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
  std::vector<std::shared_ptr<RdmaTensorResponse>> delivered;
  if (decoded.message) {
    const RdmaMessage& message = *decoded.message;
    Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      owner_.counters().message(message.type);
      status = credit_locked(message.acked, &delivered);
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    buffer_->taken();
    took_messages_ = true;
  }
  for (auto& response : delivered) response->on_delivered();
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
  std::vector<verbs::SendWr> wrs;
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) return;
    if (took_messages_ && remote_) {  // before it is connected, connect() acknowledges
      took_messages_ = false;
      buffer_->ack_if_needed(&wrs);
    }
    status = wrs.empty() ? drain_locked() : post_locked(wrs);
  }
  if (!status.ok()) fail(status);
}

bool RdmaChannel::fail(const Status& why, bool transient) {
  std::unordered_map<std::uint32_t, std::shared_ptr<RdmaTensorRequest>> requests;
  std::deque<std::shared_ptr<RdmaTensorRequest>> queued;
  std::unordered_map<std::uint32_t, std::shared_ptr<RdmaTensorResponse>> responses;
  std::vector<std::pair<std::uint64_t, std::shared_ptr<RdmaTensorResponse>>> waiting;
  Status failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return false;
    failed_ = true;
    if (!error_) error_ = why;
    failed = *error_;
    requests.swap(requests_);
    queued.swap(queued_);
    responses.swap(responses_);
    waiting.swap(inline_);
    for (auto& [message, response] : early_) {
      if (response) waiting.emplace_back(0, std::move(response));
    }
    early_.clear();
    backlog_.clear();
  }
  qp_->to_error(failed.message());
  // what a caller throws as its recv fails is the caller's: the other recvs fail all the same
  for (auto& entry : requests) {
    run_guarded([&] { entry.second->fail(failed, transient); }, [](const char*) {});
  }
  for (auto& request : queued) {
    run_guarded([&] { request->fail(failed, transient); }, [](const char*) {});
  }
  for (auto& [index, response] : responses) response->abandon();
  for (auto& [sequence, response] : waiting) response->abandon();
  return true;
}

}  // namespace tensorverbs
