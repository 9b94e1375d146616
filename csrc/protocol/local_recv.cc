#include "protocol/local_recv.h"

#include <cstring>
#include <utility>

namespace tensorverbs {

void LocalRecv::start() {
  LocalTable::Waiter waiter = table_.recv(
      key_.step, key_.key,
      [this](Status status, TensorValue value) { on_value(std::move(status), std::move(value)); },
      shared_from_this());
  std::lock_guard<std::mutex> lock(mu_);
  waiter_ = waiter;
}

void LocalRecv::on_value(Status status, TensorValue value) {
  std::shared_ptr<RecvCallback> caller;
  {
    std::lock_guard<std::mutex> lock(mu_);
    caller.swap(caller_);
  }
  if (caller) {
    if (status.ok() && destination_ && destination_->data && destination_->fits(value.meta)) {
      if (value.size()) std::memcpy(destination_->data, value.data, value.size());
      value.data = destination_->data;
      value.keepalive = destination_->keepalive;
      value.region = nullptr;  // (the sender's bytes' registration)
      value.borrowed = true;
    }
    // this task received its own tensor; the ticket goes with its delivery (a value its
    // recv gives back, kept for another, is not delivered twice: one part of a batch's ticket)
    if (std::shared_ptr<SendTicket> ticket = std::exchange(value.ticket, nullptr)) ticket->deliver();
    caller->complete(RecvResult{std::move(status), std::move(value)});
  } else if (status.ok()) {
    table_.requeue(key_.step, key_.key, std::move(value));  // its caller gave up just before
  }
}

void LocalRecv::give_up(const Status& why) {
  std::shared_ptr<RecvCallback> caller;
  LocalTable::Waiter waiter;
  {
    std::lock_guard<std::mutex> lock(mu_);
    caller.swap(caller_);
    waiter = waiter_;
  }
  if (!caller) return;
  table_.withdraw(waiter);
  caller->complete(RecvResult{why, TensorValue{}});
}

}  // namespace tensorverbs
