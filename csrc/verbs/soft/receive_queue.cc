#include "verbs/soft/receive_queue.h"

#include <vector>

#include "verbs/soft/soft_completion_queue.h"

namespace tensorverbs::verbs::soft {

WorkCompletion ReceiveQueue::completion(std::uint64_t wr_id, WcOpcode opcode, WcStatus status) const {
  WorkCompletion wc;
  wc.wr_id = wr_id;
  wc.qp_num = qp_num_;
  wc.opcode = opcode;
  wc.status = status;
  return wc;
}

void ReceiveQueue::complete_front(WcOpcode opcode, WcStatus status, std::uint32_t byte_len,
                                  std::optional<std::uint32_t> imm) {
  WorkCompletion wc = completion(posted_.front().wr_id, opcode, status);
  wc.byte_len = byte_len;
  if (imm) {
    wc.has_imm = true;
    wc.imm = *imm;
  }
  posted_.pop_front();
  cq_->deliver(wc);
}

void ReceiveQueue::flush(std::uint64_t wr_id) const {
  cq_->deliver(completion(wr_id, WcOpcode::kRecv, WcStatus::kWrFlushErr));
}

void ReceiveQueue::flush_all() {
  std::vector<WorkCompletion> flushed;
  flushed.reserve(posted_.size());
  for (const Posted& recv : posted_) flushed.push_back(completion(recv.wr_id, WcOpcode::kRecv, WcStatus::kWrFlushErr));
  posted_.clear();
  cq_->deliver(flushed.data(), flushed.size());
}

}  // namespace tensorverbs::verbs::soft
