// FutureRecv: the recv of a concurrent.futures.Future. Its answer is kept in the FutureRecv
// until the future is looked at, when nothing waits for it; settled by the settler thread,
// which takes the GIL once for a batch of answers, when a callback or a waiter needs it
// settled as it comes; or, while a thread waits for that future's result, by that thread,
// woken directly as a blocking recv is. A value whose future was cancelled as it arrived
// goes back to the core. ArrivalGroup: one wait for many of them.
#pragma once

#include <nanobind/nanobind.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "binding/recv_callbacks.h"
#include "protocol/rdma_rendezvous.h"
#include "protocol/rendezvous_key.h"

namespace tensorverbs::binding {

// A thread waiting for many recvs' futures at once (wait, as_completed): each recv tells
// its index in the group as its answer comes, and the thread wakes once for as many as it
// waits for, the GIL released.
class ArrivalGroup {
 public:
  // Index `index`'s answer came (or must be looked at: see FutureRecv::join).
  void arrived(std::size_t index);
  // Waits (call without the GIL) until `count` indices came since the last call or `slice`
  // passed; the indices that came (maybe fewer, maybe more).
  std::vector<std::size_t> wait(std::size_t count, std::chrono::nanoseconds slice);

 private:
  std::mutex mu_;
  std::condition_variable came_;
  std::vector<std::size_t> arrived_;
};

class FutureRecv final : public PyRecvCallback, public std::enable_shared_from_this<FutureRecv> {
 public:
  // `settle(call, code, message, dtype, shape, is_dead, payload)` is called with the
  // answer (in the settler thread, with the GIL); it returns False when the recv was
  // cancelled already or the tensor is refused (recv into out of another shape or dtype),
  // and then a tensor goes back to `rendezvous` for the next recv. `call.done()` tells
  // whether the recv's future is settled. (One settle for every recv and the recv's own
  // `call`: no object made per recv to bind them.) With `call` None the recv is parked: its
  // answer stays here until the future settles itself with it (settle_parked()), or until
  // eager() gives it the call and settle to settle it as it comes.
  FutureRecv(std::weak_ptr<RdmaRendezvous> rendezvous, StepKey key, nanobind::object call,
             nanobind::object settle);
  ~FutureRecv() override;
  void complete(RecvResult result) override;
  // The settler thread: with the GIL held (what Python raises is reported as unraisable).
  void settle(RecvResult& result);

  // What wait_here() did.
  enum class Waited { kNotYet = 0, kSettledHere = 1, kElsewhere = 2, kParked = 3 };
  // Called with the GIL by a thread that waits for the future: waits up to `seconds` (the
  // GIL released) for the answer and settles the future itself (kSettledHere), without the
  // settler thread's hand-off; kParked when the answer is parked here (settle_parked() it);
  // kElsewhere when the answer went to the settler already or another thread waits here
  // (the future is settled by them: wait on it).
  Waited wait_here(double seconds);

  // With the GIL: if the answer is parked here, settles the future with it in this thread,
  // `settle(call, code, message, dtype, shape, is_dead, payload, arrived)` (`arrived`: when
  // it came, as Python's time.monotonic()); whether it was parked. What Python raises is
  // thrown, the answer handed to the settler thread first unless `call` is done.
  bool settle_parked(nanobind::handle call, nanobind::handle settle);
  // With the GIL: from now on the answer is settled as it comes, by `settle(call, ...)`, in
  // the settler thread (also one parked here already): something waits for the future
  // without asking for the answer. A no-op once it has a call and a settle, except that a
  // descriptor on its way to the settler by settle_variants_of()'s weak reference then
  // holds `call` (the future) until settled: its caller may drop it, the callback stays.
  void eager(nanobind::object call, nanobind::object settle);
  // With the GIL, for a parked recv of `future`, before it starts: an answer of DataType
  // DT_VARIANT (a descriptor the future must act on as it comes, such as a relay's) is
  // settled as it comes, by set_variant_settle()'s `settle(weakref(future), ...)` in the
  // settler thread; any other stays parked. A no-op before set_variant_settle().
  void settle_variants_of(nanobind::handle future);
  // A parked recv's future will not take the answer (it was cancelled, or never got its
  // handle): a tensor parked here, or parked yet, goes to the next recv of its key and step
  // (by the settler thread). A no-op for a recv that settles its future itself.
  void abandon();
  // Tell `group` `index` as the answer comes; at once if it came already, or if another
  // group waits for this recv (the caller then waits for its future as it would without one).
  void join(const std::shared_ptr<ArrivalGroup>& group, std::size_t index);
  // Stop telling `group` (if it is the one told).
  void leave(const std::shared_ptr<ArrivalGroup>& group);

 private:
  // kArrived: the answer is in result_, for the waiter; kParked: for settle_parked()
  enum class State { kPending, kWaited, kArrived, kParked, kGone };

  // Calls the settle callback with the answer (the GIL held); a value not taken goes back to
  // the rendezvous. What Python raises is thrown.
  void settle_here(RecvResult& result);
  // What Python raised as this thread settled `result` (a signal's handler: Ctrl-C): unless
  // the future is settled, the settler thread settles it with `result`, by `call` and
  // `settle` (with the GIL).
  void hand_to_settler(nanobind::handle call, nanobind::handle settle, RecvResult& result);
  // A tensor not taken goes back to the rendezvous for the next recv of its key and step.
  void keep_late(RecvResult& result);
  // Drops the Python references once the future is settled (with the GIL): the future holds
  // this recv's handle, which holds this.
  void release_python();

  std::weak_ptr<RdmaRendezvous> rendezvous_;
  StepKey key_;
  PyObject* call_;    // guarded by mu_ while the answer may come; none: parked
  PyObject* settle_;
  PyObject* variant_call_ = nullptr;  // (guarded by mu_) settle_variants_of()'s
  PyObject* variant_settle_ = nullptr;
  bool variant_taken_ = false;  // (guarded by mu_) the answer went to the settler by those
  PyObject* kept_ = nullptr;    // (guarded by mu_) the future, held for the settler: see eager()
  std::mutex mu_;
  std::condition_variable arrived_;
  State state_ = State::kPending;
  std::atomic<bool> ready_{false};  // state_ is kArrived or kParked (read while spinning)
  RecvResult result_;
  std::chrono::steady_clock::time_point arrived_at_;  // (kParked)
  bool abandoned_ = false;  // (guarded by mu_)
  std::shared_ptr<ArrivalGroup> group_;  // told group_index_ as the answer comes
  std::size_t group_index_ = 0;
};

// Ends the settler thread (at interpreter exit).
void stop_settler();
// How a parked recv's DT_VARIANT answer settles its future: `settle(weakref(future), code,
// message, dtype, shape, is_dead, payload)` (with the GIL; the recvs started since hold it).
void set_variant_settle(nanobind::object settle);

}  // namespace tensorverbs::binding
