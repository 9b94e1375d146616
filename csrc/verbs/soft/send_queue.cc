#include "verbs/soft/send_queue.h"

#include <utility>

#include "verbs/soft/soft_completion_queue.h"

namespace tensorverbs::verbs::soft {
namespace {

WcOpcode completion_opcode(WrOpcode opcode) {
  switch (opcode) {
    case WrOpcode::kRdmaWrite:
    case WrOpcode::kRdmaWriteWithImm:
      return WcOpcode::kRdmaWrite;
    case WrOpcode::kRdmaRead:
      return WcOpcode::kRdmaRead;
    case WrOpcode::kSend:
    case WrOpcode::kSendWithImm:
      return WcOpcode::kSend;
  }
  return WcOpcode::kSend;
}

}  // namespace

void SendOp::finish(WcStatus how, std::string why) {
  if (done) return;
  done = true;
  status = how;
  detail = std::move(why);
}

SendOp& SendQueue::post(const SendWr& wr) {
  SendOp& op = ops_.emplace_back();
  op.wr = wr;
  op.opcode = completion_opcode(wr.opcode);
  op.byte_len = wr.sge.length;
  return op;
}

void SendQueue::flush_all(const SendOp* busy) {
  for (SendOp& op : ops_) {
    if (!op.done && &op != busy) {
      op.done = true;
      op.status = WcStatus::kWrFlushErr;
    }
  }
}

std::optional<std::string> SendQueue::emit() {
  WorkCompletion wcs[64];
  std::size_t n = 0;
  std::optional<std::string> failure;
  while (!ops_.empty() && ops_.front().done) {
    SendOp& op = ops_.front();
    if (flushing_ && op.status == WcStatus::kSuccess) op.status = WcStatus::kWrFlushErr;
    if (op.status != WcStatus::kSuccess) {
      if (!flushing_ && op.status != WcStatus::kWrFlushErr) {
        failure = op.detail.empty() ? std::string(to_string(op.status)) : op.detail;
      }
      flushing_ = true;
    }
    if (op.wr.signaled || op.status != WcStatus::kSuccess) {
      WorkCompletion& wc = wcs[n++];
      wc = WorkCompletion{};
      wc.wr_id = op.wr.wr_id;
      wc.qp_num = qp_num_;
      wc.byte_len = op.byte_len;
      wc.opcode = op.opcode;
      wc.status = op.status;
      if (n == 64) {
        cq_->deliver(wcs, n);
        n = 0;
      }
    }
    ops_.pop_front();
  }
  cq_->deliver(wcs, n);
  return failure;
}

}  // namespace tensorverbs::verbs::soft
