// SendQueue: the send work requests posted to a soft queue pair (SendOp), in post order,
// until their completions leave for the send completion queue, in post order too: an
// unsignaled success leaves none, and the first error flushes every request after it.
// Not locked: its queue pair's mutex guards it. References to its requests stay valid
// until their completions leave.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "core/block_cache.h"
#include "verbs/work.h"

namespace tensorverbs::verbs::soft {

class SoftCompletionQueue;

struct SendOp {
  SendWr wr;
  WcOpcode opcode = WcOpcode::kSend;
  std::uint32_t byte_len = 0;
  WcStatus status = WcStatus::kSuccess;
  bool done = false;
  bool copied = false;           // shared memory: data in place, event not yet published
  std::uint32_t seq = 0;         // stream request number
  std::uint8_t* sink = nullptr;  // RDMA READ: where the data lands
  std::string detail;

  // Done with `status` (a request done already stays as it is).
  void finish(WcStatus how, std::string why = "");
};

class SendQueue {
 public:
  SendQueue(std::uint32_t qp_num, std::shared_ptr<SoftCompletionQueue> cq)
      : qp_num_(qp_num), cq_(std::move(cq)) {}

  std::size_t size() const { return ops_.size(); }
  SendOp& post(const SendWr& wr);
  // Every request not done yet but `busy` is done, flushed (the queue pair failed).
  void flush_all(const SendOp* busy = nullptr);
  // Delivers the completions of the done requests at the front, in post order; the
  // detail of the first error among them, if one failed (the queue pair fails with it).
  std::optional<std::string> emit();

 private:
  const std::uint32_t qp_num_;
  const std::shared_ptr<SoftCompletionQueue> cq_;
  // posted, not yet completed, in post order (the chunks it frees serve its next requests)
  std::deque<SendOp, BlockCacheAllocator<SendOp>> ops_;
  bool flushing_ = false;
};

}  // namespace tensorverbs::verbs::soft
