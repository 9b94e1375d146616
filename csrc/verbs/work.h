// Work requests and work completions, numbered as libibverbs numbers them, so a reader
// who knows ibv_post_send and ibv_poll_cq knows these.
#pragma once

#include <cstdint>

namespace tensorverbs::verbs {

enum class WrOpcode : std::uint8_t {
  kRdmaWrite = 0,         // IBV_WR_RDMA_WRITE
  kRdmaWriteWithImm = 1,  // IBV_WR_RDMA_WRITE_WITH_IMM
  kSend = 2,              // IBV_WR_SEND
  kSendWithImm = 3,       // IBV_WR_SEND_WITH_IMM
  kRdmaRead = 4,          // IBV_WR_RDMA_READ
};

enum class WcOpcode : std::uint8_t {
  kSend = 0,                // IBV_WC_SEND
  kRdmaWrite = 1,           // IBV_WC_RDMA_WRITE
  kRdmaRead = 2,            // IBV_WC_RDMA_READ
  kRecv = 128,              // IBV_WC_RECV
  kRecvRdmaWithImm = 129,   // IBV_WC_RECV_RDMA_WITH_IMM
};

enum class WcStatus : std::uint8_t {
  kSuccess = 0,
  kLocLenErr = 1,
  kLocQpOpErr = 2,
  kLocProtErr = 4,
  kWrFlushErr = 5,
  kMwBindErr = 6,
  kBadRespErr = 7,
  kLocAccessErr = 8,
  kRemInvReqErr = 9,
  kRemAccessErr = 10,
  kRemOpErr = 11,
  kRetryExcErr = 12,
  kRnrRetryExcErr = 13,
  kRemAbortErr = 16,
  kFatalErr = 19,
  kRespTimeoutErr = 20,
  kGeneralErr = 21,
};

const char* to_string(WcStatus status);
// Whether a failed completion says that the connection broke rather than that the operation
// was at fault: the transport gave up retransmitting (or waiting for a posted receive), or
// the queue pair was flushed without an error of its own (the soft provider's word for "the
// peer's side was closed"). Such a connection may be set up again and used as before.
bool connection_broke(WcStatus status);
const char* to_string(WcOpcode opcode);

// Access rights of a registration (IBV_ACCESS_*).
enum Access : std::uint32_t {
  kLocalWrite = 1,
  kRemoteWrite = 2,
  kRemoteRead = 4,
};

// A scatter/gather element; length 0 means none.
struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

struct SendWr {
  std::uint64_t wr_id = 0;
  WrOpcode opcode = WrOpcode::kRdmaWrite;
  Sge sge;                         // one element is all the protocol needs
  std::uint64_t remote_addr = 0;   // RDMA operations
  std::uint32_t rkey = 0;
  std::uint32_t imm = 0;           // *_WITH_IMM, host order
  bool signaled = true;            // false: no completion unless it fails
};

struct RecvWr {
  // (a constructor, so that RecvWr{wr_id} stays warning-free with the buffer left out)
  RecvWr(std::uint64_t id = 0, Sge buffer = {}) : wr_id(id), sge(buffer) {}  // NOLINT: implicit

  std::uint64_t wr_id = 0;
  Sge sge;  // where a SEND's data lands; length 0: none (immediates only)
};

struct WorkCompletion {
  std::uint64_t wr_id = 0;
  std::uint32_t qp_num = 0;
  std::uint32_t byte_len = 0;
  std::uint32_t imm = 0;  // valid when has_imm
  WcOpcode opcode = WcOpcode::kSend;
  WcStatus status = WcStatus::kSuccess;
  bool has_imm = false;

  bool ok() const { return status == WcStatus::kSuccess; }
};

}  // namespace tensorverbs::verbs
