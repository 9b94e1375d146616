// IbQueuePair: an RC ibv_qp, created in INIT and taken to RTS by connect() with the
// attributes of ib_path.h. The PSN is random per queue pair and travels in the endpoint.
//
// Posting is serialized by one lock, so the ledger (ib_work_ledger.h) sees requests in
// send-queue order. The completion queues call complete() holding their lock; this queue
// pair never takes a completion queue's lock while it holds its own.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "verbs/ibverbs/ib_completion_queue.h"
#include "verbs/ibverbs/ib_context.h"
#include "verbs/ibverbs/ib_protection_domain.h"
#include "verbs/ibverbs/ib_window_pool.h"
#include "verbs/ibverbs/ib_work_ledger.h"
#include "verbs/queue_pair.h"

namespace tensorverbs::verbs::ibverbs {

class IbQueuePair final : public QueuePair, public std::enable_shared_from_this<IbQueuePair> {
 public:
  // Send-queue entries kept for the provider's own requests (window binds, invalidations).
  static constexpr int kInternalReserve = 32;

  static Result<std::shared_ptr<IbQueuePair>> create(std::shared_ptr<IbContext> context,
                                                    std::shared_ptr<IbProtectionDomain> pd,
                                                    std::shared_ptr<IbCompletionQueue> send_cq,
                                                    std::shared_ptr<IbCompletionQueue> recv_cq,
                                                    QpCaps caps);
  ~IbQueuePair() override;

  std::uint32_t qp_num() const override { return qp_->qp_num; }
  QpState state() const override { return state_.load(std::memory_order_acquire); }
  std::string endpoint() const override;
  EndpointSummary summary() const override;
  std::uint32_t mtu() const override { return path_mtu_.load(std::memory_order_acquire); }

  Status connect(std::string_view remote_endpoint) override;
  Status post_send(const SendWr* wrs, std::size_t count) override;
  std::size_t send_room() const override;
  Status post_recv(const RecvWr* wrs, std::size_t count) override;
  void to_error(std::string_view why) override;
  std::string error_detail() const override;
  // A type 2 window (ib_memory_window.h) where IbContext::type2_windows(), else a
  // registration of the range (ib_region_window.h).
  Result<std::unique_ptr<MemoryWindow>> bind_window(const MemoryRegion& region, std::uint64_t addr,
                                                   std::size_t length,
                                                   std::uint32_t access) override;

  // -- for the completion queues: the caller's view of `wc`; false: not shown.
  bool complete(const ibv_wc& wc, const IbCompletionQueue* cq, WorkCompletion* out);

  // -- for windows: the provider's own send requests.
  // A bind of `mw` (a type 2 window of this protection domain) to [addr, +length) of `mr`
  // under `rkey`, signaled (its completion is not shown); `retired` is set once it left the
  // send queue. kFailedPrecondition when not connected.
  Status post_bind(ibv_mw* mw, std::uint32_t rkey, ibv_mr* mr, std::uint64_t addr,
                   std::size_t length, int access, std::shared_ptr<std::atomic<bool>> retired);
  // A local invalidation of `rkey`, signaled (completes unseen); `retired` is set once it
  // left the send queue. false when it was not posted (error state, or no room).
  bool post_invalidate(std::uint32_t rkey, std::shared_ptr<std::atomic<bool>> retired);
  // A type 2 window from the pool (freed by an invalidation posted before; the send queue
  // runs it first), or a new one; nullptr with the errno on failure.
  ibv_mw* take_window(int* error);
  void return_window(ibv_mw* mw);  // after post_invalidate
  IbContext& context() const { return *context_; }
  IbProtectionDomain& pd() const { return *pd_; }

  // The path MTU as the device holds it (ibv_query_qp), in bytes; 0 if it cannot say.
  std::uint32_t queried_path_mtu() const;

 private:
  IbQueuePair(std::shared_ptr<IbContext> context, std::shared_ptr<IbProtectionDomain> pd,
              std::shared_ptr<IbCompletionQueue> send_cq,
              std::shared_ptr<IbCompletionQueue> recv_cq, ibv_qp* qp, QpCaps caps,
              std::size_t reserve);
  Status modify(ibv_qp_attr* attr, int mask, const char* what, const std::string& peer);
  void record_failure(const std::string& detail, bool flush);
  std::string name() const;
  std::size_t send_slots() const { return static_cast<std::size_t>(caps_.max_send_wr) + reserve_; }

  std::shared_ptr<IbContext> context_;
  std::shared_ptr<IbProtectionDomain> pd_;
  std::shared_ptr<IbCompletionQueue> send_cq_;
  std::shared_ptr<IbCompletionQueue> recv_cq_;
  ibv_qp* qp_;
  QpCaps caps_;
  std::uint32_t psn_;

  std::atomic<QpState> state_{QpState::kInit};
  std::atomic<std::uint32_t> path_mtu_{0};
  mutable std::mutex mu_;  // the ledger, posting, state changes, the detail
  WorkLedger ledger_;
  std::string detail_;
  bool detail_is_flush_ = false;
  WindowPool windows_;
  std::size_t reserve_;  // send-queue entries beyond caps_.max_send_wr
  std::string peer_;     // "fe80::1 qp 17", once connected
};

}  // namespace tensorverbs::verbs::ibverbs
