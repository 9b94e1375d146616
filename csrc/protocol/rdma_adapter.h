// RdmaAdapter: the completion queue every channel of a task shares, and the thread that
// drains it (TensorFlow's RdmaAdapter). The thread waits on the queue (a bounded spin,
// then sleep: no busy polling at idle), hands each completion to its channel, sends the
// ACKs a batch calls for, fires deadlines (recvs' timeouts, responses' holds), and retries what waits for a peer's
// access to end (quarantine). Stopping, it lingers until what the channels posted has left
// (the ACKs of the messages taken last, so that their senders learn the tensors arrived).
// Whatever a handler throws fails the channel whose completion it handled (its recvs fail
// naming the peer), never the thread or the other channels.
// Waiting on the queue throws nothing: a provider that makes progress there (soft) fails
// the queue pair whose traffic threw.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "protocol/expiring.h"
#include "protocol/rdma_channel.h"
#include "verbs/completion_queue.h"

namespace tensorverbs {

class RdmaAdapter {
 public:
  using Clock = std::chrono::steady_clock;

  // `housekeeping` runs after every batch while wants_housekeeping() was called since it
  // last reported it has nothing left (it returns whether anything is left).
  RdmaAdapter(std::shared_ptr<verbs::CompletionQueue> cq, std::function<bool()> housekeeping);
  ~RdmaAdapter();

  // Hands `channel` the completions of its queue pair for as long as it lives, even once
  // another channel to its peer replaced it: the flush of a read it posted says that the read
  // can no longer land.
  void attach(const std::shared_ptr<RdmaChannel>& channel);
  // The channels attached that are alive (replaced ones among them).
  std::vector<std::shared_ptr<RdmaChannel>> channels();
  // `what` expires at `when` (`timeout` seconds after now) unless it is gone by then.
  void add_deadline(Clock::time_point when, double timeout, std::weak_ptr<Expiring> what);
  void wants_housekeeping();
  // How many times the thread took every completion the queue held and handled them: a
  // completion queued before this count was read has been handled once it has grown.
  // (Time passing says nothing of it: the thread may have been held meanwhile.)
  std::uint64_t caught_up() const { return caught_up_.load(std::memory_order_acquire); }
  void start();
  // Waits (at most `bound`) until every channel has acknowledged the messages it took and
  // what it posted has left (RdmaChannel::quiet), the completion thread going on meanwhile.
  // Call before failing the channels to stop (not from the adapter's thread, which returns
  // at once).
  void linger(std::chrono::milliseconds bound);
  void stop();

 private:
  struct Deadline {
    Clock::time_point when;
    double timeout;
    std::weak_ptr<Expiring> what;
    bool operator>(const Deadline& other) const { return when > other.when; }
  };

  void run();
  int wait_ms();
  void expire();
  // While lingering: whether every channel is quiet (then the lingering ends).
  void check_quiet();

  const std::shared_ptr<verbs::CompletionQueue> cq_;
  const std::function<bool()> housekeeping_;
  std::mutex mu_;
  std::unordered_map<std::uint32_t, std::weak_ptr<RdmaChannel>> channels_;
  std::vector<Deadline> deadlines_;  // a min-heap (std::greater)
  std::size_t sweep_at_ = 1024;      // drop deadlines of finished recvs at this size
  std::atomic<bool> stopping_{false};
  std::atomic<bool> housekeeping_wanted_{false};
  std::atomic<bool> lingering_{false};
  std::atomic<std::uint64_t> caught_up_{0};
  std::condition_variable quiet_;  // lingering_ ended (with mu_)
  std::thread thread_;
};

}  // namespace tensorverbs
