// How a Python caller waits for a recv's answer: BlockingRecv (the calling thread waits with
// the GIL released, woken directly by the thread that finished the recv) or BatchRecv (one
// wait for every entry of a recv_many); and the Python form of an answer. A future's recv is
// FutureRecv (future_recv.h).
#pragma once

#include <nanobind/nanobind.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "protocol/pending_recv.h"
#include "protocol/rdma_rendezvous.h"

namespace tensorverbs::binding {

// Waits for `done` spinning for at most the spin time (most answers on one host come
// sooner); whether it is set.
bool spin_for(const std::atomic<bool>& done);

// The Python form of a result: (code, message, dtype, shape, is_dead, payload), payload the
// sender's own object (a local recv) or a ByteView of the received bytes (which shares
// their keepalive; also when they are the caller's destination). Needs the GIL.
nanobind::tuple to_python(const RecvResult& result);

// A Python caller's callback. It holds what the caller lends the recv (the object of its
// `out`, the recv's destination; the destination's keepalive is the callback), so that
// the Python reference is dropped where the callback's last reference is: with the GIL, as
// a rule, rather than in the core's threads (where releasing it wakes a thread for the GIL).
class PyRecvCallback : public RecvCallback {
 public:
  void lend(std::shared_ptr<const void> object) { lent_ = std::move(object); }

 private:
  std::shared_ptr<const void> lent_;
};

class BlockingRecv final : public PyRecvCallback {
 public:
  void complete(RecvResult result) override;
  // Waits up to `slice` for the answer (spinning briefly the first time: most answers on
  // one host come sooner); true once it is in. Call without the GIL, from one thread.
  bool wait_for(std::chrono::nanoseconds slice);
  // Waits for the answer and takes it (call without the GIL).
  RecvResult wait();

 private:
  std::atomic<bool> done_{false};
  bool spun_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  RecvResult result_;
};

// The entries of a batch of recvs (recv_many): entry(i) is entry i's callback; the calling
// thread waits, the GIL released, until every entry has its answer, woken once by the last.
class BatchRecv : public std::enable_shared_from_this<BatchRecv> {
 public:
  explicit BatchRecv(std::size_t entries) : results_(entries), left_(entries) {}
  std::shared_ptr<RecvCallback> entry(std::size_t index);
  // Waits up to `slice` (spinning briefly the first time); true once every entry is in.
  bool wait_for(std::chrono::nanoseconds slice);
  void wait();
  // The answers, in entry order (once every entry is in).
  std::vector<RecvResult> take() { return std::move(results_); }

 private:
  class Entry;
  void complete(std::size_t index, RecvResult result);

  std::mutex mu_;
  std::condition_variable all_in_;
  std::vector<RecvResult> results_;
  std::size_t left_;
  std::atomic<bool> done_{false};
  bool spun_ = false;
};

}  // namespace tensorverbs::binding
