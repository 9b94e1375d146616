// RdmaRendezvous: the grpc+verbs protocol of one task (TensorFlow's RdmaMgr with its
// RdmaRendezvousMgr), the coordinator of its parts: the open device, the adapter, the
// registered pool and the meta-data cache (RdmaMemoryMgr: RegisteredPool, MetaDataCache),
// one channel per peer, the local table of this task's sends, the recvs in flight and the
// tensors that came late for them (RecvTracker, LateTensors), and the memory peers may
// still access (LandingQuarantine). The control plane (gRPC, in Python) exchanges channel
// descriptions through channel() and connect(); everything a tensor goes through after that
// happens here, and a peer's request is answered without entering Python. Thread-safe.
#pragma once

#include <cstddef>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/status.h"
#include "protocol/landing_quarantine.h"
#include "protocol/local_table.h"
#include "protocol/meta_data_cache.h"
#include "protocol/pending_recv.h"
#include "protocol/protocol_counters.h"
#include "protocol/rdma_adapter.h"
#include "protocol/rdma_channel.h"
#include "protocol/recv_tracker.h"
#include "protocol/registered_pool.h"
#include "protocol/rendezvous_key.h"
#include "protocol/tensor_landing.h"
#include "verbs/context.h"
#include "verbs/device.h"

namespace tensorverbs {

struct RendezvousSettings {
  std::int32_t task = 0;                 // this task's id: its position in task_names
  std::vector<std::string> task_names;   // "/job:ps/replica:0/task:0", ... by id
  verbs::VerbsConfig verbs;
  std::string listen_host;               // where peers reach this task
  bool read_mode = false;                // TENSORVERBS_RENDEZVOUS=read
  bool validate = false;                 // RDMA_VERBS_VALIDATE
  std::uint32_t slots = 16;              // TENSORVERBS_MESSAGE_SLOTS
  std::size_t pool_block = std::size_t{256} << 20;
  std::size_t pool_limit = std::size_t{16} << 30;
  // A channel that broke under the transport holds its recvs until the control plane sets
  // it up again (it learns of it from next_lost()), instead of failing them.
  bool recover = false;
  // How long a tensor whose meta-data went out waits for its receiver to ask again (write
  // mode) or release it (read mode) before it goes back to the table
  // (TENSORVERBS_HOLD_SECONDS).
  double hold_seconds = 300;
};

class RdmaRendezvous final : public ChannelOwner {
 public:
  static Result<std::unique_ptr<RdmaRendezvous>> open(RendezvousSettings settings);
  ~RdmaRendezvous() override;

  // -- the control plane ---------------------------------------------------------------------
  // This side's channel to `peer` at `incarnation`, described for the peer. A channel to an
  // earlier incarnation (the peer restarted), a failed one, or one connected to another
  // queue pair than the one the peer `offered` now (it gave that channel up) is replaced.
  Result<std::string> channel(std::int32_t peer, std::uint64_t incarnation,
                              std::string_view offered = {});
  // Connects this side's channel to the peer's description; the recvs held for the peer
  // (its channel broke under the transport) are asked again there.
  Status connect(std::int32_t peer, std::uint64_t incarnation, std::string_view remote);
  // Fails the channel to `peer` and the recvs held for it. `transient`: as if it broke under
  // the transport (its recvs are held, and next_lost() tells it). `incarnation`: only if the
  // channel is to that incarnation of the peer (a later one's is left alone).
  void fail_channel(std::int32_t peer, const Status& why, bool transient = false,
                    std::optional<std::uint64_t> incarnation = std::nullopt);
  bool ready(std::int32_t peer) const;
  // The next peer whose channel broke under the transport, to be set up again; waits up to
  // `timeout` seconds (< 0: for ever). Nothing on timeout, or once stopped.
  std::optional<std::int32_t> next_lost(double timeout);
  // next_lost() returns nothing from now on (whoever follows it ends: the process exits).
  void end_lost();

  // -- tensors -------------------------------------------------------------------------------
  Status send(std::int64_t step, std::int32_t dst, std::string name, TensorValue value);
  // Sends `value` to each of `dsts` (`tickets` one each, or empty), its bytes registered
  // (or staged into the pool) once for all peers (this task itself gets them as they are):
  // what each send did, in order.
  std::vector<Status> broadcast(std::int64_t step, const std::vector<std::int32_t>& dsts,
                                const std::string& name, TensorValue value,
                                std::vector<std::shared_ptr<SendTicket>> tickets);
  // Starts a recv (from this task's table when `src` is this task); `caller` is completed
  // exactly once. `timeout` < 0: none. A tensor from a peer that fits `destination` lands
  // there (TensorLanding). The returned handle can give the recv up.
  std::shared_ptr<PendingRecv> recv(std::int64_t step, std::int32_t src, std::string name,
                                    double timeout, std::shared_ptr<RecvCallback> caller,
                                    std::optional<RecvDestination> destination = std::nullopt);
  void abort_step(std::int64_t step, const Status& why);
  void cleanup_step(std::int64_t step);
  Result<PoolBuffer> allocate(std::size_t nbytes);

  std::vector<std::pair<std::string, std::uint64_t>> stats() const;
  // Each channel's state, a line each (RdmaChannel::describe), for diagnostics.
  std::string describe_channels() const;
  std::pair<std::size_t, std::size_t> pending() const { return table_.pending(); }
  std::size_t table_steps() const { return table_.steps(); }
  const verbs::DeviceAttr& device() const { return context_->device(); }
  const std::string& provider() const { return provider_; }
  // Fails every recv in flight (Cancelled), closes the channels, stops the adapter.
  void stop();

  // -- for requests and responses -------------------------------------------------------------
  std::int32_t task() const { return settings_.task; }
  bool read_mode() const { return settings_.read_mode; }
  bool validate() const { return settings_.validate; }
  LocalTable& table() { return table_; }
  RegisteredPool& pool() { return *pool_; }
  verbs::ProtectionDomain& pd() { return *pd_; }
  std::optional<TensorMeta> cached_meta(std::int32_t peer, const std::string& name) const {
    return meta_cache_.find(peer, name);
  }
  void update_meta(std::int32_t peer, const std::string& name, const TensorMeta& meta) {
    meta_cache_.update(peer, name, meta);
  }
  // Keeps what a peer may still access until `quiesced` says it cannot (retried by the
  // adapter's thread).
  void quarantine(std::function<bool()> quiesced);
  // A tensor whose caller gave up as it arrived (or refused it): handed to the next recv of
  // its key and step; this task's own tensor goes back to the table. Bytes borrowed from a
  // caller's destination are copied first: into the pool, or the heap when the pool is full.
  void keep_late(const StepKey& key, TensorValue value);
  void forget(const PendingRecv* recv) { recvs_.forget(recv); }
  bool recovers() const { return settings_.recover; }
  // The adapter's count of times it caught up with its completion queue (see RdmaAdapter).
  std::uint64_t completions_caught_up() const { return adapter_->caught_up(); }
  // Holds `request` (its channel broke) until the peer's channel is set up again, or asks
  // again at once if it is; false when the rendezvous does not recover channels, stopped,
  // or the peer's channel failed for good (`why_not`, when given, says which).
  bool hold(const std::shared_ptr<RdmaTensorRequest>& request, std::string* why_not = nullptr);
  // `response` expires after the hold time unless it ended before.
  void add_hold(const std::shared_ptr<RdmaTensorResponse>& response);
  double hold_seconds() const { return settings_.hold_seconds; }
  // Tracks and starts `request` (a late tensor of its key answers it instead).
  void start_request(const std::shared_ptr<RdmaTensorRequest>& request);

  // -- ChannelOwner ----------------------------------------------------------------------------
  ProtocolCounters& counters() override { return counters_; }
  void on_tensor_request(const std::shared_ptr<RdmaChannel>& channel,
                         const RdmaMessage& message) override;
  const std::string& task_name(std::int32_t task) const override;
  void wants_housekeeping() override;
  void channel_lost(std::int32_t peer) override;

 private:
  explicit RdmaRendezvous(RendezvousSettings settings) : settings_(std::move(settings)) {}
  std::shared_ptr<RdmaChannel> find_channel(std::int32_t peer) const;
  // A copy of `value` this rendezvous owns (nothing only when no memory is left at all).
  std::optional<TensorValue> copy_of(const TensorValue& value);
  // The adapter's housekeeping: quarantined landings, then the channels' backlogs; true
  // while anything is left.
  bool housekeeping();
  // Gives `recv` up with DeadlineExceeded after `timeout` seconds (none when < 0).
  void add_deadline(double timeout, const std::shared_ptr<PendingRecv>& recv);
  // The recvs held for `peer`, no longer held.
  std::vector<std::shared_ptr<RdmaTensorRequest>> take_held(std::int32_t peer);
  // Asks `request` (held) again on `channel`, or gives it up if that is another incarnation's.
  void resume(const std::shared_ptr<RdmaTensorRequest>& request,
              const std::shared_ptr<RdmaChannel>& channel);

  const RendezvousSettings settings_;
  std::string provider_;
  std::shared_ptr<verbs::Context> context_;
  std::shared_ptr<verbs::ProtectionDomain> pd_;
  std::shared_ptr<verbs::CompletionQueue> cq_;
  std::shared_ptr<RegisteredPool> pool_;
  std::unique_ptr<RdmaAdapter> adapter_;
  std::uint64_t max_message_bytes_ = 0;
  ProtocolCounters counters_;
  LocalTable table_;
  MetaDataCache meta_cache_;
  RecvTracker recvs_;
  LandingQuarantine quarantine_;

  mutable std::mutex mu_;
  bool stopped_ = false;
  std::unordered_map<std::int32_t, std::shared_ptr<RdmaChannel>> channels_;
  // recvs whose channel broke, by peer, until it is set up again
  std::unordered_map<std::int32_t, std::vector<std::shared_ptr<RdmaTensorRequest>>> held_;
  std::deque<std::int32_t> lost_;  // peers to set up again (next_lost), each once
  bool lost_ended_ = false;        // end_lost() was called
  std::condition_variable lost_ready_;
};

}  // namespace tensorverbs
