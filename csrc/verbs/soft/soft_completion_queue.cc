#include "verbs/soft/soft_completion_queue.h"

#include "verbs/soft/soft_context.h"

namespace tensorverbs::verbs::soft {

SoftCompletionQueue::SoftCompletionQueue(std::shared_ptr<SoftContext> context, int /*depth*/)
    : context_(std::move(context)), progress_(context_->progress()) {}

SoftCompletionQueue::~SoftCompletionQueue() = default;

int SoftCompletionQueue::pop(WorkCompletion* out, int max) {
  int n = 0;
  while (n < max && !entries_.empty()) {
    out[n++] = entries_.front();
    entries_.pop_front();
  }
  if (n > 0) changed();
  return n;
}

int SoftCompletionQueue::take(WorkCompletion* out, int max) {
  std::lock_guard lock(mu_);
  const int n = pop(out, max);
  if (n > 0 || max <= 0) return n;
  woken_ = false;
  changed();
  return 0;
}

int SoftCompletionQueue::poll(WorkCompletion* out, int max) {
  if (max <= 0) return 0;
  if (ready_.load(std::memory_order_seq_cst)) {
    std::lock_guard lock(mu_);
    if (const int n = pop(out, max); n > 0) return n;
  }
  // nothing yet: one pass of progress first
  progress_.poll();
  if (!ready_.load(std::memory_order_seq_cst)) return 0;
  std::lock_guard lock(mu_);
  return pop(out, max);
}

int SoftCompletionQueue::wait(WorkCompletion* out, int max, int timeout_ms) {
  if (max <= 0) return 0;
  const int first = poll(out, max);
  if (first > 0) return first;
  if (ready_.load(std::memory_order_seq_cst)) {
    std::lock_guard lock(mu_);
    if (woken_) {
      woken_ = false;
      changed();
      return 0;
    }
  }
  if (timeout_ms == 0) return 0;
  const auto deadline = timeout_ms < 0 ? Progress::Clock::time_point::max()
                                       : Progress::Clock::now() + std::chrono::milliseconds(timeout_ms);
  progress_.wait(*this, deadline);
  return take(out, max);
}

void SoftCompletionQueue::wake() {
  bool kick;
  {
    std::lock_guard lock(mu_);
    woken_ = true;
    changed();
    kick = armed_;
  }
  if (kick) progress_.kick();
  progress_.notify();
}

void SoftCompletionQueue::deliver(const WorkCompletion* wcs, std::size_t count) {
  if (count == 0) return;
  bool kick;
  {
    std::lock_guard lock(mu_);
    entries_.insert(entries_.end(), wcs, wcs + count);
    changed();
    kick = armed_;
  }
  if (kick) progress_.kick();
  progress_.notify();
}

bool SoftCompletionQueue::ready() { return ready_.load(std::memory_order_seq_cst); }

bool SoftCompletionQueue::arm() {
  std::lock_guard lock(mu_);
  if (!entries_.empty() || woken_) return false;
  armed_ = true;
  return true;
}

void SoftCompletionQueue::disarm() {
  std::lock_guard lock(mu_);
  armed_ = false;
}

}  // namespace tensorverbs::verbs::soft
