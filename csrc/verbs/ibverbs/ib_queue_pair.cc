#include "verbs/ibverbs/ib_queue_pair.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>

#include "verbs/ibverbs/device_selection.h"
#include "verbs/ibverbs/ib_endpoint.h"
#include "verbs/ibverbs/ib_memory_window.h"
#include "verbs/ibverbs/ib_path.h"

namespace tensorverbs::verbs::ibverbs {
namespace {

constexpr std::uint64_t kInternalWrId = ~std::uint64_t{0};
constexpr std::size_t kChunk = 16;         // requests per ibv_post_send call
constexpr int kRemoteAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                              IBV_ACCESS_REMOTE_READ;

std::uint32_t random_psn() {
  static thread_local std::mt19937 gen{std::random_device{}()};
  return static_cast<std::uint32_t>(gen()) & 0xFFFFFF;
}

// the completion opcode of each WrOpcode (numbered as IBV_WR_*)
constexpr WcOpcode kCompletionOf[] = {WcOpcode::kRdmaWrite, WcOpcode::kRdmaWrite, WcOpcode::kSend,
                                      WcOpcode::kSend, WcOpcode::kRdmaRead};
WcOpcode completion_of(WrOpcode opcode) { return kCompletionOf[static_cast<int>(opcode)]; }

const char* state_name(QpState state) {
  static const char* const names[] = {"INIT", "RTR", "RTS", "ERROR"};
  return names[static_cast<int>(state)];
}

}  // namespace

IbQueuePair::IbQueuePair(std::shared_ptr<IbContext> context,
                         std::shared_ptr<IbProtectionDomain> pd,
                         std::shared_ptr<IbCompletionQueue> send_cq,
                         std::shared_ptr<IbCompletionQueue> recv_cq, ibv_qp* qp, QpCaps caps,
                         std::size_t reserve)
    : context_(std::move(context)),
      pd_(std::move(pd)),
      send_cq_(std::move(send_cq)),
      recv_cq_(std::move(recv_cq)),
      qp_(qp),
      caps_(caps),
      psn_(random_psn()),
      ledger_(std::max(1, std::min(caps.max_send_wr, kInternalReserve) / 2)),
      reserve_(reserve) {}

IbQueuePair::~IbQueuePair() {
  send_cq_->detach(qp_->qp_num);
  recv_cq_->detach(qp_->qp_num);
  windows_.release();
  context_->lib().destroy_qp(qp_);
}

Result<std::shared_ptr<IbQueuePair>> IbQueuePair::create(
    std::shared_ptr<IbContext> context, std::shared_ptr<IbProtectionDomain> pd,
    std::shared_ptr<IbCompletionQueue> send_cq, std::shared_ptr<IbCompletionQueue> recv_cq,
    QpCaps caps) {
  const Libibverbs& lib = context->lib();
  const int hw_send = std::min(caps.max_send_wr + kInternalReserve, context->caps().max_qp_wr);
  ibv_qp_init_attr init{};
  init.send_cq = send_cq->raw();
  init.recv_cq = recv_cq->raw();
  init.cap.max_send_wr = static_cast<std::uint32_t>(hw_send);
  init.cap.max_recv_wr = static_cast<std::uint32_t>(caps.max_recv_wr);
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.qp_type = IBV_QPT_RC;
  init.sq_sig_all = 0;  // only requests marked signaled complete on success
  const std::string what = "creating an RC queue pair (" + std::to_string(caps.max_send_wr) +
                           " send, " + std::to_string(caps.max_recv_wr) +
                           " receive requests) on " + context->where();
  errno = 0;
  ibv_qp* qp = lib.create_qp(pd->raw(), &init);
  if (qp == nullptr) {
    const int error = errno != 0 ? errno : ENOMEM;
    return Status(error == ENOMEM ? Code::kResourceExhausted : Code::kUnavailable,
                  what + ": " + errno_text(error));
  }
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = static_cast<std::uint16_t>(context->config().pkey_index);
  attr.port_num = context->port().port_num;
  attr.qp_access_flags = kRemoteAccess;
  if (int rc = lib.modify_qp(qp, &attr,
                             IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
      rc != 0) {
    lib.destroy_qp(qp);
    return Status(Code::kUnavailable, what + ": RESET -> INIT: " + errno_text(rc));
  }
  std::shared_ptr<IbQueuePair> out(new IbQueuePair(
      std::move(context), std::move(pd), std::move(send_cq), std::move(recv_cq), qp, caps,
      static_cast<std::size_t>(hw_send - caps.max_send_wr)));
  out->send_cq_->attach(qp->qp_num, out.get());
  out->recv_cq_->attach(qp->qp_num, out.get());
  return out;
}

std::string IbQueuePair::name() const {
  return "queue pair " + std::to_string(qp_->qp_num) + " on " + context_->where() +
         (peer_.empty() ? "" : " to " + peer_);
}

std::string IbQueuePair::endpoint() const {
  const IbPort& port = context_->port();
  IbEndpoint e;
  e.link_layer = port.link_layer;
  e.rd_atomic = context_->caps().rd_atomic;
  e.qp_num = qp_->qp_num;
  e.psn = psn_;
  e.lid = port.lid;
  e.mtu = static_cast<std::uint16_t>(port.mtu);
  std::copy(std::begin(port.gid.raw), std::end(port.gid.raw), e.gid.begin());
  if (port.gid_index < 0) e.gid.fill(0);
  return encode_endpoint(e);
}

EndpointSummary IbQueuePair::summary() const {
  return {"ibverbs", qp_->qp_num, psn_, context_->port().lid, context_->port().mtu};
}

Status IbQueuePair::modify(ibv_qp_attr* attr, int mask, const char* what,
                           const std::string& peer) {
  const int rc = context_->lib().modify_qp(qp_, attr, mask);
  if (rc == 0) return ok_status();
  return Status(rc == EINVAL ? Code::kInvalidArgument : Code::kUnavailable,
                "connecting queue pair " + std::to_string(qp_->qp_num) + " on " +
                    context_->where() + " to " + peer + ": " + what + ": " + errno_text(rc));
}

Status IbQueuePair::connect(std::string_view remote_endpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  Result<IbEndpoint> decoded = decode_endpoint(remote_endpoint);
  if (!decoded.ok()) {
    return Status(Code::kInvalidArgument,
                  "cannot connect " + name() + ": " + decoded.status().message());
  }
  if (state_ != QpState::kInit) {
    return Status(Code::kFailedPrecondition,
                  name() + " is " + state_name(state_) + "; connect needs INIT");
  }
  Result<IbPath> path = plan_path(*context_, decoded.value(), psn_);
  if (!path.ok()) {
    return Status(path.status().code(), "cannot connect " + name() + ": " + path.status().message());
  }
  IbPath& p = path.value();
  if (Status status = modify(&p.rtr, p.rtr_mask, "INIT -> RTR", p.peer); !status.ok()) {
    return status;
  }
  state_ = QpState::kRtr;
  if (Status status = modify(&p.rts, p.rts_mask, "RTR -> RTS", p.peer); !status.ok()) {
    return status;
  }
  peer_ = p.peer;
  path_mtu_ = p.mtu;
  state_ = QpState::kRts;
  return ok_status();
}

Status IbQueuePair::post_send(const SendWr* wrs, std::size_t count) {
  const std::uint64_t max_msg = context_->caps().max_msg_sz;
  for (std::size_t i = 0; i < count; ++i) {
    if (static_cast<std::uint8_t>(wrs[i].opcode) > static_cast<std::uint8_t>(WrOpcode::kRdmaRead)) {
      return Status(Code::kInvalidArgument, "send request " + std::to_string(wrs[i].wr_id) +
                                                " has an unknown opcode");
    }
    if (max_msg != 0 && wrs[i].sge.length > max_msg) {
      return Status(Code::kInvalidArgument,
                    "send request " + std::to_string(wrs[i].wr_id) + " moves " +
                        std::to_string(wrs[i].sge.length) + " bytes; " + context_->device().name +
                        " moves at most " + std::to_string(max_msg) +
                        " in one operation (max_msg_sz): split it");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == QpState::kInit || state_ == QpState::kRtr) {
    return Status(Code::kFailedPrecondition,
                  name() + " is not connected: call connect() before post_send");
  }
  if (ledger_.caller_sends() + count > static_cast<std::size_t>(caps_.max_send_wr) ||
      ledger_.caller_sends() + ledger_.internal_sends() + count > send_slots()) {
    return Status(Code::kResourceExhausted,
                  "send queue of " + name() + " is full: " + std::to_string(ledger_.caller_sends()) +
                      " of " + std::to_string(caps_.max_send_wr) + " requests outstanding");
  }
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(kChunk, count - done);
    ibv_send_wr ib[kChunk];
    ibv_sge sge[kChunk];
    for (std::size_t i = 0; i < n; ++i) {
      const SendWr& wr = wrs[done + i];
      ib[i] = ibv_send_wr{};
      const Sge local = pd_->guard(wr.sge);  // overrunning its region: fails at once
      sge[i] = ibv_sge{local.addr, local.length, local.lkey};
      ib[i].wr_id = wr.wr_id;
      ib[i].next = i + 1 < n ? &ib[i + 1] : nullptr;
      ib[i].sg_list = &sge[i];
      ib[i].num_sge = wr.sge.length != 0 ? 1 : 0;
      ib[i].opcode = static_cast<ibv_wr_opcode>(wr.opcode);  // numbered as IBV_WR_*
      const bool signaled = ledger_.signal(wr.signaled);
      ib[i].send_flags = signaled ? IBV_SEND_SIGNALED : 0;
      if (wr.opcode == WrOpcode::kRdmaWriteWithImm || wr.opcode == WrOpcode::kSendWithImm) {
        ib[i].imm_data = htonl(wr.imm);
      }
      if (wr.opcode != WrOpcode::kSend && wr.opcode != WrOpcode::kSendWithImm) {
        ib[i].wr.rdma.remote_addr = wr.remote_addr;
        ib[i].wr.rdma.rkey = wr.rkey;
      }
      ledger_.push_send({wr.wr_id, completion_of(wr.opcode), signaled, wr.signaled, false, {}});
    }
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(qp_, ib, &bad); rc != 0) {
      const std::size_t posted = bad != nullptr ? static_cast<std::size_t>(bad - ib) : 0;
      ledger_.drop_last_sends(n - posted);
      return Status(Code::kUnavailable, "posting send requests on " + name() + " (" +
                                            std::to_string(done + posted) + " of " +
                                            std::to_string(count) + " posted): " +
                                            errno_text(rc));
    }
    done += n;
  }
  return ok_status();
}

std::size_t IbQueuePair::send_room() const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::size_t used = ledger_.caller_sends();
  const std::size_t all = used + ledger_.internal_sends();
  const auto depth = static_cast<std::size_t>(caps_.max_send_wr);
  return std::min(used < depth ? depth - used : 0, all < send_slots() ? send_slots() - all : 0);
}

Status IbQueuePair::post_recv(const RecvWr* wrs, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    if (wrs[i].sge.length != 0 && !pd_->fits(wrs[i].sge)) {
      return Status(Code::kInvalidArgument,
                    "receive request " + std::to_string(wrs[i].wr_id) + ": its buffer of " +
                        std::to_string(wrs[i].sge.length) + " bytes overruns its memory region");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (ledger_.recvs() + count > static_cast<std::size_t>(caps_.max_recv_wr)) {
    return Status(Code::kResourceExhausted, "receive queue of " + name() + " is full (" +
                                                std::to_string(caps_.max_recv_wr) +
                                                " requests)");
  }
  for (std::size_t done = 0; done < count;) {
    const std::size_t n = std::min(kChunk, count - done);
    ibv_recv_wr ib[kChunk];
    ibv_sge sge[kChunk];
    for (std::size_t i = 0; i < n; ++i) {
      const RecvWr& wr = wrs[done + i];
      ib[i] = ibv_recv_wr{};
      sge[i] = ibv_sge{wr.sge.addr, wr.sge.length, wr.sge.lkey};
      ib[i].wr_id = wr.wr_id;
      ib[i].next = i + 1 < n ? &ib[i + 1] : nullptr;
      ib[i].sg_list = &sge[i];
      ib[i].num_sge = wr.sge.length != 0 ? 1 : 0;
      ledger_.push_recv(wrs[done + i].wr_id);
    }
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(qp_, ib, &bad); rc != 0) {
      const std::size_t posted = bad != nullptr ? static_cast<std::size_t>(bad - ib) : 0;
      ledger_.drop_last_recvs(n - posted);
      return Status(Code::kUnavailable, "posting receive requests on " + name() + " (" +
                                            std::to_string(done + posted) + " of " +
                                            std::to_string(count) + " posted): " +
                                            errno_text(rc));
    }
    done += n;
  }
  return ok_status();
}

void IbQueuePair::record_failure(const std::string& detail, bool flush) {
  if (flush && !detail_.empty()) return;  // a flush is the consequence, not the cause
  detail_ = detail;
  detail_is_flush_ = flush;
}

void IbQueuePair::to_error(std::string_view why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ == QpState::kError) return;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  const int rc = context_->lib().modify_qp(qp_, &attr, IBV_QP_STATE);
  state_ = QpState::kError;
  windows_.release();
  std::string detail(why);
  if (rc != 0) detail += " (moving to the error state failed: " + errno_text(rc) + ")";
  if (detail_.empty() || detail_is_flush_) {
    detail_ = detail;
    detail_is_flush_ = false;
  }
}

std::string IbQueuePair::error_detail() const {
  std::lock_guard<std::mutex> lock(mu_);
  return detail_;
}

bool IbQueuePair::complete(const ibv_wc& wc, const IbCompletionQueue* cq, WorkCompletion* out) {
  std::lock_guard<std::mutex> lock(mu_);
  Translated t = ledger_.complete(wc, cq == send_cq_.get(), cq == recv_cq_.get(),
                                  context_->caps().is_rxe);
  if (!t.wc.ok()) {
    state_ = QpState::kError;  // the device took the queue pair there
    record_failure(name() + ": " + t.detail, t.wc.status == WcStatus::kWrFlushErr);
    windows_.release();
  }
  if (t.show) *out = t.wc;
  return t.show;
}

Result<std::unique_ptr<MemoryWindow>> IbQueuePair::bind_window(const MemoryRegion& region,
                                                               std::uint64_t addr,
                                                               std::size_t length,
                                                               std::uint32_t access) {
  if (!context_->type2_windows()) return pd_->bind_window(region, addr, length, access);
  return IbMemoryWindow::bind(shared_from_this(), region, addr, length, access);
}

Status IbQueuePair::post_bind(ibv_mw* mw, std::uint32_t rkey, ibv_mr* mr, std::uint64_t addr,
                              std::size_t length, int access,
                              std::shared_ptr<std::atomic<bool>> retired) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != QpState::kRts) {
    return Status(Code::kFailedPrecondition,
                  name() + " is " + state_name(state_) +
                      ": a window binds on a connected queue pair (RTS)");
  }
  // half the reserve for binds: the other half keeps room for their invalidations
  if (ledger_.internal_sends() >= reserve_ / 2 ||
      ledger_.caller_sends() + ledger_.internal_sends() >= send_slots()) {
    return Status(Code::kResourceExhausted, "too many windows being bound or revoked at once on " +
                                                name() + " (" + std::to_string(reserve_ / 2) +
                                                ")");
  }
  ibv_send_wr wr{};
  wr.wr_id = kInternalWrId;
  wr.opcode = IBV_WR_BIND_MW;
  // signaled (its completion is not shown): once it is seen, revoking the window is a
  // deallocation, done at once, not an invalidation waiting its turn in the send queue
  const bool signaled = ledger_.signal(true);
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info.mr = mr;
  wr.bind_mw.bind_info.addr = addr;
  wr.bind_mw.bind_info.length = length;
  wr.bind_mw.bind_info.mw_access_flags = static_cast<unsigned int>(access);
  ledger_.push_send({kInternalWrId, WcOpcode::kSend, signaled, false, true, std::move(retired)});
  ibv_send_wr* bad = nullptr;
  if (int rc = ibv_post_send(qp_, &wr, &bad); rc != 0) {
    ledger_.drop_last_sends(1);
    return Status(rc == EINVAL ? Code::kInvalidArgument : Code::kUnavailable,
                  "binding a window on " + name() + ": " + errno_text(rc));
  }
  return ok_status();
}

bool IbQueuePair::post_invalidate(std::uint32_t rkey, std::shared_ptr<std::atomic<bool>> retired) {
  std::lock_guard<std::mutex> lock(mu_);
  if (state_ != QpState::kRts ||
      ledger_.caller_sends() + ledger_.internal_sends() >= send_slots()) {
    return false;
  }
  ibv_send_wr wr{};
  wr.wr_id = kInternalWrId;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  ledger_.signal(true);
  ledger_.push_send({kInternalWrId, WcOpcode::kSend, true, false, true, std::move(retired)});
  ibv_send_wr* bad = nullptr;
  if (ibv_post_send(qp_, &wr, &bad) != 0) {
    ledger_.drop_last_sends(1);
    return false;
  }
  return true;
}

ibv_mw* IbQueuePair::take_window(int* error) { return windows_.take(pd_->raw(), error); }

void IbQueuePair::return_window(ibv_mw* mw) { windows_.give(mw); }

std::uint32_t IbQueuePair::queried_path_mtu() const {
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  if (context_->lib().query_qp(qp_, &attr, IBV_QP_PATH_MTU, &init) != 0) return 0;
  return static_cast<std::uint32_t>(mtu_bytes(attr.path_mtu));
}

}  // namespace tensorverbs::verbs::ibverbs
