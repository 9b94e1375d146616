// A channel's tables: the requests in flight by their index (and those waiting for one,
// past max_requests), and the responses to the peer's requests by the peer's index.
#include "protocol/rdma_channel.h"
#include "protocol/rdma_tensor_request.h"
#include "protocol/rdma_tensor_response.h"

namespace tensorverbs {

std::uint32_t RdmaChannel::next_index_locked() {
  // indices run 0..kMaxRequestIndex and wrap; those of live requests are skipped
  const auto next = [](std::uint32_t i) { return i >= kMaxRequestIndex ? 0u : i + 1; };
  while (requests_.contains(next_index_)) next_index_ = next(next_index_);
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
  requests_.insert(index, std::move(request));
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
    requests_.insert(index, request);
    lock.unlock();
    const bool sent = request->send_request(index);  // false: it ended while queued
    lock.lock();
    if (!sent) requests_.erase(index);
  }
}

bool RdmaChannel::add_response(const RdmaMessage& request,
                               std::shared_ptr<RdmaTensorResponse> response) {
  const auto index = static_cast<std::uint32_t>(request.request_index);
  bool reused = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (error_) return false;
    reused = responses_.contains(index);
    if (!reused && responses_.size() < kMaxPeerRequests) {
      responses_.insert(index, std::move(response));
      return true;
    }
  }
  if (reused) {
    fail(Status(Code::kInternal, name() + ": the peer reused request index " + std::to_string(index)));
    return false;
  }
  send(RdmaMessage{MessageType::kErrorStatus, index, request.name, request.step_id, 0, 0,
                   std::nullopt, static_cast<std::int32_t>(Code::kResourceExhausted),
                   owner_.task_name(peer_) + " has " + std::to_string(kMaxPeerRequests) +
                       " requests in flight on its channel here already, the most a task may "
                       "have (RDMA_QUEUE_DEPTH is at most that): request " +
                       std::to_string(index) + " is refused"});
  return false;
}

void RdmaChannel::remove_response(std::uint32_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  responses_.erase(index);
  writes_.erase(index);  // (settled: a failure from now on has nothing of it to keep)
}

std::shared_ptr<RdmaTensorRequest> RdmaChannel::find_request(std::uint32_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::shared_ptr<RdmaTensorRequest>* request = requests_.find(index);
  return request ? *request : nullptr;
}

std::shared_ptr<RdmaTensorResponse> RdmaChannel::find_response(std::uint32_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::shared_ptr<RdmaTensorResponse>* response = responses_.find(index);
  return response ? *response : nullptr;
}

}  // namespace tensorverbs
