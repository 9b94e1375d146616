// A request whose channel fails: held for the channel that replaces it (or failed, saying
// why not), after waiting for what its old queue pair may still land (the peer's write, our
// read), and asked again there by a successor.
#include <chrono>
#include <cstdint>
#include <optional>

#include "protocol/rdma_channel.h"
#include "protocol/rdma_rendezvous.h"
#include "protocol/rdma_tensor_request.h"

namespace tensorverbs {

std::string RdmaTensorRequest::why_not_held_locked() const {
  if (!rendezvous_.recovers()) return "this task does not recover channels";
  if (attempt_ >= kMaxAttempts) return "it was asked " + std::to_string(attempt_) + " times";
  if (!caller_) return "its caller left";
  if (deferred_) return "it ends with " + deferred_->message();
  if (state_ == State::kRequested || state_ == State::kReRequested || state_ == State::kDraining ||
      (state_ == State::kReading && !read_outstanding_locked())) {
    return "";
  }
  return state_ == State::kReading ? "its read may still be landing" : "the tensor was on its way";
}

void RdmaTensorRequest::fail(const Status& why, bool transient) {
  bool held = false;
  std::string why_not;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // the answer is here: it is handed over (a successor would ask for a tensor that the
    // peer counts delivered, and wait for ever)
    if (state_ == State::kArrived || state_ == State::kRevoking) return;
    if (state_ == State::kHeld) return;      // (drained() and its bound may both come)
    if (transient) why_not = why_not_held_locked();
    if (transient && why_not.empty()) {
      // Its queue pair is in the error state: nothing new lands there. A copy into the
      // caller's memory that may still be finishing (the soft provider's) ends the recv
      // as before instead: the successor would land there too.
      const bool in_destination = landing_ && landing_->in_destination();
      if (in_destination && read_outstanding_locked()) {
        // the landing stays for finish(), which tells the caller once the read is seen to end
        why_not = "its read into the destination may still be landing";
      } else if (!release_landing() || !in_destination) {
        state_ = State::kHeld;
        sent_ = false;  // nothing is asked for until the successor asks
        broke_ = why;
        held = true;
      } else {
        why_not = "the tensor was being copied into its destination";
      }
    }
  }
  if (held && rendezvous_.hold(shared_from_this(), &why_not)) return;
  // a transient failure that does not ask again says why not (else a user cannot tell)
  if (!why_not.empty()) {
    finish(Status(why.code(), what() + ": " + why.message() + "; not asked again: " + why_not),
           std::nullopt, false);
    return;
  }
  finish(why, std::nullopt, false);
}

bool RdmaTensorRequest::await_drain(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    // a write lands only in the window of a request asked for; our read, where it was posted
    const bool written =
        sent_ && window_ && (state_ == State::kRequested || state_ == State::kReRequested);
    const bool reading = state_ == State::kReading && read_outstanding_locked();
    if (!written && !reading) return false;
    state_ = State::kDraining;
    broke_ = why;
  }
  rendezvous_.quarantine([self = shared_from_this(),
                          until = std::chrono::steady_clock::now() + kDrainBound,
                          caught_up = std::optional<std::uint64_t>()]() mutable {
    bool read_over = false;
    {
      std::lock_guard<std::mutex> lock(self->mu_);
      if (self->state_ != State::kDraining) return true;
      read_over = self->read_seen_ && !self->read_outstanding_locked();
    }
    // waited out once the bound passed and the completion thread caught up with its queue
    // after that: held meanwhile (a callback of its took long), it has not seen the write
    // or the flush that may wait there
    bool waited_out = false;
    if (std::chrono::steady_clock::now() >= until) {
      const std::uint64_t now = self->rendezvous_.completions_caught_up();
      if (!caught_up) caught_up = now;
      waited_out = now > *caught_up;
    }
    if (!read_over && !waited_out) return false;
    // the read's completion came; or no flush came: held as if nothing could have landed
    self->drained(waited_out);
    return true;
  });
  return true;
}

void RdmaTensorRequest::drained(bool waited_out) {
  Status why;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kDraining) return;  // its tensor arrived, or it ended otherwise
    // the receive queue's flush says nothing of our read (on the send queue): its own
    // completion does (the quarantine above sees it)
    if (read_outstanding_locked() && !waited_out) return;
    why = *broke_;
  }
  channel_->remove_request(index_);
  // It broke under the transport (only such a failure waits for the drain): held, or asked
  // again at once on the channel set up meanwhile, as hold() finds the peer's channel now.
  // (Not the old channel's gone(): its replacement marks it so, once it has failed.)
  fail(why, true);
}

void RdmaTensorRequest::resume(const std::shared_ptr<RdmaChannel>& channel) {
  std::shared_ptr<RdmaTensorRequest> next;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (state_ != State::kHeld) return;  // given up, or handed a late tensor, meanwhile
    state_ = State::kDone;
    next = std::make_shared<RdmaTensorRequest>(rendezvous_, channel, key_, std::move(caller_),
                                               destination_, shared_from_this());
    caller_.reset();
    next_ = next;
  }
  rendezvous_.start_request(next);  // tracked before this one is forgotten
  rendezvous_.forget(this);
}

}  // namespace tensorverbs
