#include "verbs/ibverbs/ib_completion_queue.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>

#include "core/bounded_spin.h"
#include "verbs/ibverbs/ib_queue_pair.h"
#include "verbs/ibverbs/ib_work_ledger.h"

namespace tensorverbs::verbs::ibverbs {
namespace {

constexpr int kBatch = 16;
constexpr unsigned int kAckBatch = 64;
// room for the provider's own requests (window binds and invalidations) and their flushes,
// beyond what the caller sized the queue for (every request of its queue pairs, signaled
// or not: a failure flushes them all)
constexpr int kSlack = 64;

}  // namespace

IbCompletionQueue::IbCompletionQueue(std::shared_ptr<IbContext> context,
                                     ibv_comp_channel* channel, ibv_cq* cq, int wake_fd)
    : context_(std::move(context)), channel_(channel), cq_(cq), wake_fd_(wake_fd) {}

IbCompletionQueue::~IbCompletionQueue() {
  const Libibverbs& lib = context_->lib();
  {
    std::lock_guard<std::mutex> lock(events_mu_);
    if (unacked_ > 0) lib.ack_cq_events(cq_, unacked_);
    unacked_ = 0;
  }
  lib.destroy_cq(cq_);
  lib.destroy_comp_channel(channel_);
  close(wake_fd_);
}

Result<std::shared_ptr<IbCompletionQueue>> IbCompletionQueue::create(
    std::shared_ptr<IbContext> context, int depth) {
  const IbCaps& caps = context->caps();
  if (depth < 1 || depth > caps.max_cqe) {
    return Status(Code::kInvalidArgument, "completion queue depth " + std::to_string(depth) +
                                              " is outside [1, " + std::to_string(caps.max_cqe) +
                                              "] (max_cqe of " + context->device().name + ")");
  }
  const Libibverbs& lib = context->lib();
  const std::string where = context->where();
  errno = 0;
  ibv_comp_channel* channel = lib.create_comp_channel(context->raw());
  if (channel == nullptr) {
    return Status(Code::kResourceExhausted,
                  "creating a completion channel on " + where + ": " + errno_text(errno));
  }
  const int flags = fcntl(channel->fd, F_GETFL);
  if (flags < 0 || fcntl(channel->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
    const int error = errno;
    lib.destroy_comp_channel(channel);
    return Status(Code::kInternal, "making the completion channel of " + where +
                                       " non-blocking: " + errno_text(error));
  }
  errno = 0;
  ibv_cq* cq = lib.create_cq(context->raw(), std::min(depth + kSlack, caps.max_cqe), nullptr,
                             channel, 0);
  if (cq == nullptr) {
    const int error = errno != 0 ? errno : ENOMEM;
    lib.destroy_comp_channel(channel);
    return Status(error == ENOMEM ? Code::kResourceExhausted : Code::kUnavailable,
                  "creating a completion queue of " + std::to_string(depth) + " entries on " +
                      where + ": " + errno_text(error));
  }
  const int wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd < 0) {
    const int error = errno;
    lib.destroy_cq(cq);
    lib.destroy_comp_channel(channel);
    return Status(Code::kResourceExhausted, "creating an eventfd: " + errno_text(error));
  }
  return std::shared_ptr<IbCompletionQueue>(
      new IbCompletionQueue(std::move(context), channel, cq, wake_fd));
}

void IbCompletionQueue::attach(std::uint32_t qp_num, IbQueuePair* qp) {
  std::lock_guard<std::mutex> lock(poll_mu_);
  qps_[qp_num] = qp;
}

void IbCompletionQueue::detach(std::uint32_t qp_num) {
  std::lock_guard<std::mutex> lock(poll_mu_);
  qps_.erase(qp_num);
}

int IbCompletionQueue::poll(WorkCompletion* out, int max) {
  if (max <= 0) return 0;
  std::lock_guard<std::mutex> lock(poll_mu_);
  int n = 0;
  ibv_wc wcs[kBatch];
  while (n < max) {
    const int want = std::min(max - n, kBatch);
    const int got = ibv_poll_cq(cq_, want, wcs);
    if (got <= 0) break;
    for (int i = 0; i < got; ++i) {
      auto it = qps_.find(wcs[i].qp_num);
      if (it != qps_.end()) {
        if (it->second->complete(wcs[i], this, &out[n])) ++n;
        continue;
      }
      // a queue pair destroyed meanwhile: shown as it came, but for its own requests
      if (wcs[i].status == IBV_WC_SUCCESS &&
          (wcs[i].opcode == IBV_WC_BIND_MW || wcs[i].opcode == IBV_WC_LOCAL_INV)) {
        continue;
      }
      WorkLedger orphan(1);
      out[n++] = orphan.complete(wcs[i], true, true, context_->caps().is_rxe).wc;
    }
    if (got < want) break;
  }
  return n;
}

void IbCompletionQueue::take_events() {
  std::lock_guard<std::mutex> lock(events_mu_);
  for (;;) {
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    if (context_->lib().get_cq_event(channel_, &cq, &cq_context) != 0) break;  // EAGAIN
    if (++unacked_ >= kAckBatch) {
      context_->lib().ack_cq_events(cq_, unacked_);
      unacked_ = 0;
    }
  }
}

bool IbCompletionQueue::take_wake() {
  std::uint64_t count = 0;
  return read(wake_fd_, &count, sizeof(count)) == static_cast<ssize_t>(sizeof(count));
}

int IbCompletionQueue::wait(WorkCompletion* out, int max, int timeout_ms) {
  using namespace std::chrono;
  if (max <= 0) return 0;
  const auto start = steady_clock::now();
  const bool forever = timeout_ms < 0;
  const auto deadline = start + milliseconds(forever ? 0 : timeout_ms);
  BoundedSpin spin{microseconds(kSpinMicros)};
  for (;;) {  // a bounded spin: completions often follow within microseconds
    const int n = poll(out, max);
    if (n > 0) return n;
    if ((!forever && steady_clock::now() >= deadline) || !spin.turn()) break;
  }
  for (;;) {
    ibv_req_notify_cq(cq_, 0);
    if (const int n = poll(out, max); n > 0) return n;  // came before the arming
    int sleep_ms = -1;
    if (!forever) {
      const auto left = deadline - steady_clock::now();
      if (left <= nanoseconds(0)) return 0;
      sleep_ms = static_cast<int>(duration_cast<milliseconds>(left + microseconds(999)).count());
    }
    pollfd fds[2] = {{channel_->fd, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    const int ready = ::poll(fds, 2, sleep_ms);
    if (ready < 0 && errno != EINTR) return 0;
    if ((fds[1].revents & POLLIN) != 0) {
      take_wake();
      return poll(out, max);
    }
    if ((fds[0].revents & POLLIN) != 0) take_events();
  }
}

void IbCompletionQueue::wake() {
  const std::uint64_t one = 1;
  // EAGAIN: the counter is full, a wake-up is pending anyway
  [[maybe_unused]] const ssize_t written = write(wake_fd_, &one, sizeof(one));
}

}  // namespace tensorverbs::verbs::ibverbs
