// SendCompletion: how a passive send learns that its receiver has the tensor.
//
// A send's TensorValue carries a SendTicket. Whatever hands the tensor over marks the ticket
// delivered: the response whose write completed, whose inline message the peer took or whose
// RELEASE came, or the local recv that took it. An aborted or cleaned-up step fails it with
// the reason; a ticket dropped without either (its value was refused, or the server
// stopped) fails it as dropped. The SendCompletion, which the caller holds, tells the
// outcome; the SendLedger counts the completions not settled yet, so that a task can wait
// for all of its sends (flush). Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"

namespace tensorverbs {

class SendCompletion;
class SendTicket;

class SendLedger : public std::enable_shared_from_this<SendLedger> {
 public:
  SendLedger() = default;
  SendLedger(const SendLedger&) = delete;
  SendLedger& operator=(const SendLedger&) = delete;

  // A new, open completion for a send described by `what` ("'w' to /job:ps/... at step 3"),
  // and the ticket its value carries: of `parts` values (a batch of blocks), the send
  // delivered once each of them is.
  std::shared_ptr<SendTicket> open(std::string what, std::int64_t parts = 1);
  // Waits until every completion opened so far is settled; false if `timeout` seconds
  // (< 0: none) passed first.
  bool wait_all(double timeout);
  // How many completions are open, and the descriptions of the oldest `limit` of them.
  std::size_t open_count() const;
  std::vector<std::string> describe_open(std::size_t limit) const;
  // Settles every open completion with `why` (the server stops).
  void fail_all(const Status& why);

 private:
  friend class SendCompletion;
  bool settle(SendCompletion& completion, Status status);
  bool wait(const SendCompletion& completion, double timeout);

  mutable std::mutex mu_;
  std::condition_variable settled_;
  SendCompletion* oldest_ = nullptr;  // the open completions, a list in opening order
  SendCompletion* newest_ = nullptr;
  std::size_t open_ = 0;
};

class SendCompletion {
 public:
  SendCompletion(std::shared_ptr<SendLedger> ledger, std::string what)
      : ledger_(std::move(ledger)), what_(std::move(what)) {}
  SendCompletion(const SendCompletion&) = delete;
  SendCompletion& operator=(const SendCompletion&) = delete;

  // Settles it (first call wins): OK when the receiver has the tensor; false if settled already.
  bool settle(Status status) { return ledger_->settle(*this, std::move(status)); }
  // Waits until it is settled; false if `timeout` seconds (< 0: none) passed first.
  bool wait(double timeout) const { return ledger_->wait(*this, timeout); }
  // The outcome; nothing while it is open.
  std::optional<Status> status() const;
  const std::string& what() const { return what_; }

 private:
  friend class SendLedger;
  const std::shared_ptr<SendLedger> ledger_;
  const std::string what_;
  // under the ledger's mutex
  std::optional<Status> status_;
  SendCompletion* older_ = nullptr;
  SendCompletion* newer_ = nullptr;
};

// What a send's value carries (the values of a batch of blocks share one); settles its
// completion as delivered once each of its `parts` values was, as dropped if it goes
// unsettled.
// Shared from itself: a ticket made here and handed back from Python keeps its own
// ownership, so its last reference may go on any thread without the GIL (otherwise the
// binding's shared_ptr would release a Python object there, once per send).
class SendTicket : public std::enable_shared_from_this<SendTicket> {
 public:
  explicit SendTicket(std::shared_ptr<SendCompletion> completion, std::int64_t parts = 1)
      : completion_(std::move(completion)), left_(parts) {}
  SendTicket(const SendTicket&) = delete;
  SendTicket& operator=(const SendTicket&) = delete;
  ~SendTicket();

  // One of its values was delivered (each is, at most once).
  void deliver() {
    if (left_.fetch_sub(1, std::memory_order_acq_rel) == 1) completion_->settle(Status());
  }
  // Fails the send: "<what>: <why's message>", with why's code.
  void fail(const Status& why);
  const std::shared_ptr<SendCompletion>& completion() const { return completion_; }

 private:
  const std::shared_ptr<SendCompletion> completion_;
  std::atomic<std::int64_t> left_;  // values not delivered yet
};

}  // namespace tensorverbs
