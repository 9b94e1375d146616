#include "protocol/send_completion.h"

#include <chrono>

namespace tensorverbs {

namespace {

// Waits on `cv` until `done()`, for `timeout` seconds (< 0: none); what done() returns then.
template <typename Done>
bool wait_for(std::condition_variable& cv, std::unique_lock<std::mutex>& lock, double timeout,
              Done done) {
  if (timeout < 0) {
    cv.wait(lock, done);
    return true;
  }
  return cv.wait_for(lock, std::chrono::duration<double>(timeout), done);
}

}  // namespace

std::shared_ptr<SendTicket> SendLedger::open(std::string what, std::int64_t parts) {
  auto completion = std::make_shared<SendCompletion>(shared_from_this(), std::move(what));
  {
    std::lock_guard<std::mutex> lock(mu_);
    completion->older_ = newest_;
    (newest_ ? newest_->newer_ : oldest_) = completion.get();
    newest_ = completion.get();
    ++open_;
  }
  return std::make_shared<SendTicket>(std::move(completion), parts);
}

bool SendLedger::settle(SendCompletion& completion, Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (completion.status_) return false;
    completion.status_ = std::move(status);
    (completion.older_ ? completion.older_->newer_ : oldest_) = completion.newer_;
    (completion.newer_ ? completion.newer_->older_ : newest_) = completion.older_;
    completion.older_ = completion.newer_ = nullptr;
    --open_;
  }
  settled_.notify_all();
  return true;
}

bool SendLedger::wait(const SendCompletion& completion, double timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return wait_for(settled_, lock, timeout, [&] { return completion.status_.has_value(); });
}

bool SendLedger::wait_all(double timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return wait_for(settled_, lock, timeout, [&] { return open_ == 0; });
}

std::size_t SendLedger::open_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

std::vector<std::string> SendLedger::describe_open(std::size_t limit) const {
  std::vector<std::string> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const SendCompletion* c = oldest_; c && out.size() < limit; c = c->newer_) {
    out.push_back(c->what_);
  }
  return out;
}

void SendLedger::fail_all(const Status& why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (SendCompletion* c = oldest_) {
      c->status_ = Status(why.code(), c->what_ + ": " + why.message());
      oldest_ = c->newer_;
      c->older_ = c->newer_ = nullptr;
    }
    newest_ = nullptr;
    open_ = 0;
  }
  settled_.notify_all();
}

std::optional<Status> SendCompletion::status() const {
  std::lock_guard<std::mutex> lock(ledger_->mu_);
  return status_;
}

void SendTicket::fail(const Status& why) {
  completion_->settle(Status(why.code(), completion_->what() + ": " + why.message()));
}

SendTicket::~SendTicket() {
  completion_->settle(Status(Code::kCancelled,
                             completion_->what() + " was dropped before its receiver took it"));
}

}  // namespace tensorverbs
