// LocalRecv: a recv of a tensor this task sent itself, served by the local table.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "protocol/local_table.h"
#include "protocol/pending_recv.h"
#include "protocol/tensor_landing.h"

namespace tensorverbs {

class LocalRecv : public PendingRecv, public std::enable_shared_from_this<LocalRecv> {
 public:
  // A tensor that fits `destination` is copied there before its send counts as delivered:
  // the sender may reuse its bytes once it does.
  LocalRecv(LocalTable& table, StepKey key, std::string what, std::shared_ptr<RecvCallback> caller,
            std::optional<RecvDestination> destination = std::nullopt)
      : table_(table), key_(std::move(key)), what_(std::move(what)), caller_(std::move(caller)),
        destination_(std::move(destination)) {}

  // Asks the table; the caller is answered now if the tensor (or the step's abort) is there.
  void start();

  const StepKey& key() const override { return key_; }
  // A tensor that arrives after the caller gave up goes back to the table.
  void give_up(const Status& why) override;
  std::string what() const override { return what_; }
  std::string progress() const override { return "this task has not sent it"; }
  // Its tensors never come from a peer, so none comes late.
  bool hand_over(TensorValue&) override { return false; }

 private:
  void on_value(Status status, TensorValue value);

  LocalTable& table_;
  const StepKey key_;
  const std::string what_;
  std::mutex mu_;
  std::shared_ptr<RecvCallback> caller_;
  LocalTable::Waiter waiter_;
  const std::optional<RecvDestination> destination_;
};

}  // namespace tensorverbs
