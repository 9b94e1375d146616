#include "protocol/rdma_channel.h"

#include <algorithm>
#include <iterator>

#include "core/thread_guard.h"
#include "protocol/held_messages.h"
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
      max_requests_(std::max<std::uint32_t>(1, max_requests)), send_depth_(qp_->send_room()) {
  buffer_->count_writes(&owner_.counters().messages_sent, &owner_.counters().acks_sent);
}

RdmaChannel::~RdmaChannel() {
  fail(Status(Code::kUnavailable, name() + " was closed"));
  abandon_reads();  // the queue pair goes with the channel: nothing it read can land any more
}

void RdmaChannel::abandon_reads() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [index, read] : reads_) read.seen->store(true, std::memory_order_release);
  reads_.clear();
}

void RdmaChannel::abandon_writes() {
  std::unordered_map<std::uint32_t, std::shared_ptr<RdmaTensorResponse>> responses;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_) return;  // (a live channel's are failed with it)
    writes_.clear();
    responses = responses_.take_all();
  }
  for (auto& [index, response] : responses) response->abandon();
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
  std::vector<verbs::SendWr>& wrs = scratch_locked();
  for (auto& [message, response] : early_) {
    std::uint64_t sequence = 0;
    Status status = buffer_send_locked(message, &wrs, &sequence);
    if (!status.ok()) return status;
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

void RdmaChannel::release_held() {
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    buffer_->release();
    if (error_) return;  // (nothing it holds goes out)
    std::vector<verbs::SendWr>& wrs = scratch_locked();
    buffer_->drain(&wrs);
    if (wrs.empty()) return;
    status = post_locked(wrs);
  }
  if (!status.ok()) fail(status);
}

void RdmaChannel::send(RdmaMessage message) {
  HeldMessages* const held = held_scope();
  bool newly_held = false;
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) return;
    if (!remote_) {  // a request of the peer came before this side connected: sent then
      early_.emplace_back(std::move(message), nullptr);
      return;
    }
    if (held != nullptr) {
      buffer_->hold();
      newly_held = true;
    }
    std::uint64_t sequence = 0;
    status = send_locked(message, &sequence);
  }
  if (newly_held) held->add(shared_from_this());
  if (!status.ok()) fail(status);
}

void RdmaChannel::send_inline(RdmaMessage message, std::shared_ptr<RdmaTensorResponse> response) {
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_ && !remote_) {
      early_.emplace_back(std::move(message), std::move(response));
      return;
    }
    // failed already: only the tensor goes back (failing the channel again with its own
    // error would take a transient failure for one for good, and end the recvs it holds)
    if (!error_) {
      std::uint64_t sequence = 0;
      status = send_locked(message, &sequence);
      if (status.ok()) inline_.emplace_back(sequence, std::move(response));
    }
  }
  if (!response) return;  // (sent)
  if (!status.ok()) fail(status);
  response->abandon();  // the tensor goes back (fail() did it if it was registered)
}

HeldMessages* RdmaChannel::held_scope() {
  HeldMessages* const held = HeldMessages::current();
  if (held == nullptr || held->holds(this)) return nullptr;  // (holding from its first message)
  held->make_room();  // (the add() that follows cannot fail)
  return held;
}

Status RdmaChannel::send_locked(RdmaMessage& message, std::uint64_t* sequence) {
  std::vector<verbs::SendWr>& wrs = scratch_locked();
  Status status = buffer_send_locked(message, &wrs, sequence);
  return status.ok() ? post_locked(wrs) : status;
}

Status RdmaChannel::buffer_send_locked(RdmaMessage& message, std::vector<verbs::SendWr>* wrs,
                                       std::uint64_t* sequence) {
  bool batched = false;
  Status status = buffer_->send(message, wrs, sequence, &batched);
  if (!status.ok()) return status;
  owner_.counters().message(message.type);
  if (batched) {  // (a TENSOR_REQUESTS or TENSOR_INLINES it started)
    owner_.counters().message(message.type == MessageType::kTensorInline
                                  ? MessageType::kTensorInlines
                                  : MessageType::kTensorRequests);
  }
  return status;
}

void RdmaChannel::post_transfer(verbs::WrOpcode opcode, std::uint64_t local,
                                std::uint64_t total, std::uint32_t lkey,
                                std::uint64_t remote_addr, std::uint32_t rkey,
                                std::uint64_t wr_id, std::uint32_t imm,
                                std::shared_ptr<std::atomic<bool>> seen) {
  const std::uint64_t step = std::min<std::uint64_t>(max_message_bytes_.load(), 1u << 30);
  Status status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) {  // fail() ended whatever this was for: nothing is read
      if (seen) seen->store(true, std::memory_order_release);
      return;
    }
    std::vector<verbs::SendWr>& wrs = scratch_locked();
    std::uint64_t offset = 0;
    do {
      const std::uint64_t length = std::min(step, total - offset);
      const bool last = offset + length >= total;
      verbs::SendWr wr;
      wr.wr_id = last ? wr_id : 0;
      wr.opcode =
          last || opcode == verbs::WrOpcode::kRdmaRead ? opcode : verbs::WrOpcode::kRdmaWrite;
      wr.sge = {local + offset, static_cast<std::uint32_t>(length), lkey};
      wr.remote_addr = remote_addr + offset;
      wr.rkey = rkey;
      wr.imm = imm;
      wr.signaled = last;
      wrs.push_back(wr);
      offset += length;
    } while (offset < total);
    if (seen) reads_[work_value(wr_id)] = Read{std::move(seen), wrs.size()};
    // (until its response is settled: its completion may wait behind others as a failure
    // comes, and says then whether the peer has the tensor)
    const bool write = work_kind(wr_id) == WorkKind::kTensorWrite;
    if (write) writes_.insert(work_value(wr_id), true);
    status = post_locked(wrs);
    if (!status.ok() && write) writes_.erase(work_value(wr_id));  // (its last was not posted)
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

std::string RdmaChannel::describe() const {
  std::lock_guard<std::mutex> lock(mu_);
  return name_ + ": " + (error_ ? "failed (" + error_->message() + ")" : remote_ ? "ready" : "not connected") +
         "; requests in flight " + std::to_string(requests_.size()) + " of " +
         std::to_string(max_requests_) + ", queued " + std::to_string(queued_.size()) +
         "; responses " + std::to_string(responses_.size()) + ", inline " +
         std::to_string(inline_.size() - inline_head_) + "; reads " + std::to_string(reads_.size()) +
         "; backlog " + std::to_string(backlog_.size()) +
         ", send room " + std::to_string(qp_->send_room()) + "; " + buffer_->describe();
}

std::size_t RdmaChannel::queued_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queued_.size();
}

Status RdmaChannel::credit_locked(std::uint32_t count,
                                  std::vector<std::shared_ptr<RdmaTensorResponse>>* delivered) {
  std::vector<verbs::SendWr>& wrs = scratch_locked();
  const std::uint64_t taken = buffer_->credit(count, &wrs);
  // (in the order of their sequences, which only grow: those taken are at the front)
  while (inline_head_ < inline_.size() && inline_[inline_head_].first <= taken) {
    inline_[inline_head_].second->credited();  // (a fail() after this lock delivers it too)
    delivered->push_back(std::move(inline_[inline_head_++].second));
  }
  if (inline_head_ == inline_.size()) {
    inline_.clear();
    inline_head_ = 0;
  } else if (inline_head_ >= 64 && 2 * inline_head_ >= inline_.size()) {
    inline_.erase(inline_.begin(), inline_.begin() + static_cast<std::ptrdiff_t>(inline_head_));
    inline_head_ = 0;
  }
  return post_locked(wrs);
}

std::string RdmaChannel::gone_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return gone_why_ ? gone_why_->message() : std::string();
}

bool RdmaChannel::fail(const Status& why, bool transient) {
  std::unordered_map<std::uint32_t, std::shared_ptr<RdmaTensorRequest>> requests;
  std::deque<std::shared_ptr<RdmaTensorRequest>> queued;
  std::unordered_map<std::uint32_t, std::shared_ptr<RdmaTensorResponse>> responses;
  std::vector<std::pair<std::uint64_t, std::shared_ptr<RdmaTensorResponse>>> waiting;
  std::vector<std::shared_ptr<std::atomic<bool>>> unposted;
  Status failed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // (before the look at failed_: a transient failure's pass may still be holding the
    // requests it took, after this fail's rendezvous has given up those held so far; the
    // reason first, for whoever sees gone_)
    if (!transient) {
      if (!gone_why_) gone_why_ = why;
      gone_.store(true, std::memory_order_release);
    }
    if (failed_) return false;
    failed_ = true;
    if (!error_) error_ = why;
    failed = *error_;
    if (transient) {  // (those that wait for the receives' flush stay registered: see below)
      for (auto& entry : requests_) requests.insert(entry);
    } else {
      requests = requests_.take_all();
    }
    queued.swap(queued_);
    responses = responses_.take_all();
    // reads none of whose operations was posted never are: nothing of them lands (a read's
    // operations went to the backlog together, in order, and those posted left its front);
    // a write whose signaled operation waits there is never done either
    for (std::size_t at = 0; at < backlog_.size(); ++at) {
      const verbs::SendWr& wr = backlog_[at];
      if (!wr.signaled) continue;
      if (work_kind(wr.wr_id) == WorkKind::kTensorWrite) {
        writes_.erase(work_value(wr.wr_id));
        continue;
      }
      if (work_kind(wr.wr_id) != WorkKind::kTensorRead) continue;
      auto read = reads_.find(work_value(wr.wr_id));
      if (read == reads_.end() || at + 1 < read->second.operations) continue;
      unposted.push_back(std::move(read->second.seen));
      reads_.erase(read);
    }
    backlog_.clear();
    // a posted write's completion tells whether the peer has the tensor (a flush: it goes
    // back); its response stays registered until then
    for (const auto& [index, posted] : writes_) {
      auto written = responses.find(index);
      if (written == responses.end()) continue;
      responses_.insert(index, std::move(written->second));
      responses.erase(written);
    }
    waiting.assign(std::make_move_iterator(inline_.begin() + static_cast<std::ptrdiff_t>(inline_head_)),
                   std::make_move_iterator(inline_.end()));
    inline_.clear();
    inline_head_ = 0;
    for (auto& [message, response] : early_) {
      if (response) waiting.emplace_back(0, std::move(response));
    }
    early_.clear();
    buffer_->drop_waiting();  // (answers among them: their responses are abandoned below)
  }
  qp_->to_error(failed.message());
  for (auto& seen : unposted) seen->store(true, std::memory_order_release);
  // what a caller throws as its recv fails is the caller's: the other recvs fail all the same
  for (auto& entry : requests) {  // (no structured bindings: a lambda captures none in C++17)
    const std::uint32_t index = entry.first;
    const std::shared_ptr<RdmaTensorRequest>& request = entry.second;
    run_guarded(
        [&] {
          // the peer's write may have reached the queue pair unseen: its completion comes
          // before the receives' flush (drained()), unless the flush was seen already (the
          // completion thread took it while this pass was held up in an earlier request's
          // caller; drained() let go of this one then, as it was not waiting yet)
          if (transient && request->await_drain(failed)) {
            if (flushed()) request->drained();
            return;
          }
          if (transient) remove_request(index);
          request->fail(failed, transient);
        },
        [](const char*) {});
  }
  for (auto& request : queued) {
    run_guarded([&] { request->fail(failed, transient); }, [](const char*) {});
  }
  for (auto& [index, response] : responses) response->abandon();
  for (auto& [sequence, response] : waiting) response->abandon();
  return true;
}

bool RdmaChannel::flushed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return flushed_;
}

void RdmaChannel::drained() {
  std::unordered_map<std::uint32_t, std::shared_ptr<RdmaTensorRequest>> requests;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!failed_) return;
    flushed_ = true;
    requests = requests_.take_all();
  }
  for (auto& entry : requests) {
    const std::shared_ptr<RdmaTensorRequest>& request = entry.second;
    run_guarded([&] { request->drained(); }, [](const char*) {});
  }
}

}  // namespace tensorverbs
