#include "verbs/work.h"

namespace tensorverbs::verbs {

bool connection_broke(WcStatus status) {
  return status == WcStatus::kRetryExcErr || status == WcStatus::kRnrRetryExcErr ||
         status == WcStatus::kWrFlushErr;
}

const char* to_string(WcStatus status) {
  switch (status) {
    case WcStatus::kSuccess: return "SUCCESS";
    case WcStatus::kLocLenErr: return "LOC_LEN_ERR";
    case WcStatus::kLocQpOpErr: return "LOC_QP_OP_ERR";
    case WcStatus::kLocProtErr: return "LOC_PROT_ERR";
    case WcStatus::kWrFlushErr: return "WR_FLUSH_ERR";
    case WcStatus::kMwBindErr: return "MW_BIND_ERR";
    case WcStatus::kBadRespErr: return "BAD_RESP_ERR";
    case WcStatus::kLocAccessErr: return "LOC_ACCESS_ERR";
    case WcStatus::kRemInvReqErr: return "REM_INV_REQ_ERR";
    case WcStatus::kRemAccessErr: return "REM_ACCESS_ERR";
    case WcStatus::kRemOpErr: return "REM_OP_ERR";
    case WcStatus::kRetryExcErr: return "RETRY_EXC_ERR";
    case WcStatus::kRnrRetryExcErr: return "RNR_RETRY_EXC_ERR";
    case WcStatus::kRemAbortErr: return "REM_ABORT_ERR";
    case WcStatus::kRespTimeoutErr: return "RESP_TIMEOUT_ERR";
    case WcStatus::kFatalErr: return "FATAL_ERR";
    case WcStatus::kGeneralErr: return "GENERAL_ERR";
  }
  return "UNKNOWN_STATUS";
}

const char* to_string(WcOpcode opcode) {
  switch (opcode) {
    case WcOpcode::kSend: return "SEND";
    case WcOpcode::kRdmaWrite: return "RDMA_WRITE";
    case WcOpcode::kRdmaRead: return "RDMA_READ";
    case WcOpcode::kRecv: return "RECV";
    case WcOpcode::kRecvRdmaWithImm: return "RECV_RDMA_WITH_IMM";
  }
  return "UNKNOWN_OPCODE";
}

}  // namespace tensorverbs::verbs
