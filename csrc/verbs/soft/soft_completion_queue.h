// SoftCompletionQueue: completions in delivery order. poll() makes one progress pass of
// the context without blocking; wait() drives the context (see progress.h) until a
// completion arrives, wake() is called, or the timeout passes. The queue grows past its
// depth rather than lose a completion.
#pragma once

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>

#include "verbs/completion_queue.h"
#include "verbs/soft/progress.h"
#include "verbs/work.h"

namespace tensorverbs::verbs::soft {

class SoftContext;

class SoftCompletionQueue final : public CompletionQueue, private Progress::Waiter {
 public:
  SoftCompletionQueue(std::shared_ptr<SoftContext> context, int depth);
  ~SoftCompletionQueue() override;

  int poll(WorkCompletion* out, int max) override;
  int wait(WorkCompletion* out, int max, int timeout_ms) override;
  void wake() override;

  // Adds completions (any thread) and wakes whoever waits for them.
  void deliver(const WorkCompletion* wcs, std::size_t count);
  void deliver(const WorkCompletion& wc) { deliver(&wc, 1); }
  const SoftContext* context() const { return context_.get(); }

 private:
  // Lock-free: the progress loop asks on every turn of its spin.
  bool ready() override;
  bool arm() override;
  void disarm() override;
  int take(WorkCompletion* out, int max);
  // Moves up to `max` entries to `out` (mu_ held).
  int pop(WorkCompletion* out, int max);
  // After entries_ or woken_ changed (mu_ held): what ready() tells from now on.
  void changed() { ready_.store(!entries_.empty() || woken_, std::memory_order_seq_cst); }

  std::shared_ptr<SoftContext> context_;
  Progress& progress_;
  std::mutex mu_;
  std::deque<WorkCompletion> entries_;
  bool woken_ = false;
  bool armed_ = false;
  // !entries_.empty() || woken_, kept by changed(); seq_cst: a waiter about to sleep reads
  // it after counting itself a sleeper, deliver() writes it before looking for sleepers
  std::atomic<bool> ready_{false};
};

}  // namespace tensorverbs::verbs::soft
