// RdmaTensorResponse: one answer to a peer's TENSOR_REQUEST (the sender side).
//
// start() asks the local table for the tensor (waiting if it is not sent yet). A tensor
// small enough goes back inline, in a TENSOR_INLINE message; a larger one is written
// straight from its memory into the requester's landing (immediate: the request index)
// when the request's meta-data matches, else META_DATA_RESPONSE goes back and the write
// follows the TENSOR_RE_REQUEST. In read mode the answer carries the tensor's address and
// a window's key, and the requester's RELEASE ends it. An aborted step answers with
// ERROR_STATUS. The tensor counts as sent when it is handed to the transport; if the
// requester cancels, or the channel fails, before it was delivered (the write completed,
// the inline message was taken, the RELEASE came), it goes back to the table, uncounted:
// nothing is lost. Delivered, its send's completion is settled. Thread-safe.
#pragma once

#include <cstdint>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>

#include "core/status.h"
#include "protocol/expiring.h"
#include "protocol/local_table.h"
#include "protocol/rdma_message.h"
#include "protocol/rendezvous_key.h"
#include "protocol/tensor_source.h"
#include "protocol/tensor_value.h"

namespace tensorverbs {

class RdmaChannel;
class RdmaRendezvous;

class RdmaTensorResponse : public Expiring,
                           public std::enable_shared_from_this<RdmaTensorResponse> {
 public:
  RdmaTensorResponse(RdmaRendezvous& rendezvous, std::shared_ptr<RdmaChannel> channel,
                     const RdmaMessage& request);
  ~RdmaTensorResponse();

  void start();
  void on_message(const RdmaMessage& message);  // TENSOR_RE_REQUEST, RELEASE, CANCEL
  void on_written();    // the content write completed
  void on_delivered();  // the peer took the inline message
  // The peer's credit covered the inline message (the channel marks it under its lock):
  // the tensor is delivered, whatever befalls the channel before on_delivered() runs.
  void credited() { credited_.store(true, std::memory_order_release); }
  void abandon();       // the channel failed (idempotent)
  // The hold passed: a tensor still waiting for its receiver's re-request or release goes
  // back to the table, and the request is answered DEADLINE_EXCEEDED.
  void expire(double timeout) override;

 private:
  enum class State { kWaitingTensor, kWaitingReRequest, kWriting, kInline, kDone };

  void on_tensor(Status status, TensorValue value);
  void answer(std::unique_lock<std::mutex>& lock);
  void write(std::unique_lock<std::mutex>& lock, std::uint64_t remote_addr, std::uint32_t rkey);
  void cancel();
  void error(std::unique_lock<std::mutex>& lock, Code code, const std::string& message);
  void count(int sign);
  // Ends the response (under the lock, which it releases); gives the tensor back unless
  // `delivered`.
  void finish(std::unique_lock<std::mutex>& lock, bool delivered);

  RdmaRendezvous& rendezvous_;
  const std::shared_ptr<RdmaChannel> channel_;
  const std::uint32_t index_;
  const std::int64_t step_;
  const RendezvousKey key_;
  const std::optional<TensorMeta> requested_meta_;
  const std::uint64_t landing_addr_;
  const std::uint32_t landing_rkey_;
  std::mutex mu_;
  State state_ = State::kWaitingTensor;
  LocalTable::Waiter waiter_;
  std::optional<TensorValue> value_;
  std::unique_ptr<TensorSource> source_;
  bool counted_ = false;
  std::atomic<bool> credited_{false};
};

}  // namespace tensorverbs
