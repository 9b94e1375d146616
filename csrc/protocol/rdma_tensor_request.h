// RdmaTensorRequest: one recv from a peer, from request to result (the receiver side).
//
// start() sends TENSOR_REQUEST with the cached meta-data and, for a tensor too large to
// come inline, a landing prepared for it (TensorLanding: the caller's destination or the
// pool) with a window that lets the peer write exactly there. The peer answers with the tensor inline (small tensors), with a write whose
// immediate is this request's index, with META_DATA_RESPONSE (first time, or the meta-data
// changed: the cache is updated, a landing allocated, TENSOR_RE_REQUEST sent; in read
// mode it carries where to read from), or with ERROR_STATUS. A request stays registered
// until such a terminal answer, even if its caller gave up (CANCEL is sent), so a landing
// is never reused while the peer may write into it; a tensor that arrives for a caller
// who gave up is kept for the next recv of its key and step. A caller whose own memory
// (its destination) is the landing hears that it gave up only once nothing can be written
// there any more: after a recv raised, its `out=` is never written.
//
// A request whose channel broke under the transport (RdmaChannel::fail, transient) is held
// (kHeld) until the channel is set up again, then asked again there by a successor, which
// takes its caller; giving the request up gives the successor up. At most kMaxAttempts.
// One whose tensor the peer may have written first waits (kDraining, keeping its index and
// landing) until the old queue pair's receives are flushed: they complete in order, so a
// write the peer saw finish was seen by then, and its tensor is handed over rather than
// asked again of a peer that has nothing left to send. One whose answer arrived (kArrived)
// is handed it whatever its channel does meanwhile: the peer counts the tensor delivered.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/status.h"
#include "protocol/pending_recv.h"
#include "protocol/rdma_message.h"
#include "protocol/rendezvous_key.h"
#include "protocol/tensor_landing.h"
#include "verbs/memory_window.h"

namespace tensorverbs {

class RdmaChannel;
class RdmaRendezvous;

class RdmaTensorRequest : public PendingRecv,
                          public std::enable_shared_from_this<RdmaTensorRequest> {
 public:
  static constexpr std::uint32_t kMaxAttempts = 8;
  // How long a request waits for its old queue pair's receives to be flushed (await_drain)
  // before it is held all the same: past it, once the completion thread has caught up with
  // its queue (what waited there was seen).
  static constexpr std::chrono::seconds kDrainBound{5};

  // A tensor that fits `destination` lands in it (see TensorLanding). `previous`: the
  // attempt this one asks again for (kept alive: its deadline and handle lead here).
  RdmaTensorRequest(RdmaRendezvous& rendezvous, std::shared_ptr<RdmaChannel> channel, StepKey key,
                    std::shared_ptr<RecvCallback> caller,
                    std::optional<RecvDestination> destination = std::nullopt,
                    std::shared_ptr<RdmaTensorRequest> previous = nullptr);
  ~RdmaTensorRequest() override;

  // Registers with the channel and sends TENSOR_REQUEST (or queues behind the requests in
  // flight, the channel sending it later); the caller is answered on failure.
  void start();
  // Sends TENSOR_REQUEST under `index` (the channel's, once it is admitted); false if the
  // request ended meanwhile (the index is then the caller's to free).
  bool send_request(std::uint32_t index);

  // -- events (the adapter's thread) ---------------------------------------------------------
  void on_message(const RdmaMessage& message);  // META_DATA_RESPONSE, TENSOR_INLINE, ERROR_STATUS
  void on_content(std::uint32_t byte_len);      // the write with our index arrived
  void on_read_done();                          // read mode: our read completed
  void on_malformed(const Status& why);         // a malformed message named this request
  // The channel failed: nothing more will come. `transient` (it broke under the transport):
  // held for the channel that replaces it, if the rendezvous recovers channels.
  void fail(const Status& why, bool transient = false);
  // The channel broke under the transport while the peer may have written our tensor, or
  // our read may still land: true if the request waits for drained() (at most kDrainBound),
  // keeping its index and landing; false if nothing can land for it (then fail() it).
  bool await_drain(const Status& why);
  // Its old queue pair's receives were flushed, or its read's completion came (a request
  // whose read is outstanding waits for that), or `waited_out` the wait's bound: a request
  // still waiting is held (or fails) as fail() decides, and leaves the old channel.
  void drained(bool waited_out = false);
  // The held request is asked again on `channel` (the peer's new channel) by a successor.
  void resume(const std::shared_ptr<RdmaChannel>& channel);
  std::int32_t peer() const { return key_.key.src; }
  // The incarnation of the peer it was asked of.
  std::uint64_t incarnation() const;

  // -- PendingRecv ---------------------------------------------------------------------------
  const StepKey& key() const override { return key_; }
  void give_up(const Status& why) override;
  std::string what() const override;
  std::string progress() const override;
  bool hand_over(TensorValue& value) override;

 private:
  // kArrived: the answer arrived (the tensor, or why not); it is being handed over
  // kRevoking: the content arrived; it is handed over once its window's invalidation ran
  // kDraining: its channel broke under the transport; waiting for the old queue pair's
  //   receives to be flushed (a write the peer finished is seen by then)
  // kHeld: its channel broke under the transport; waiting for the new one (resume)
  enum class State {
    kRequested, kReRequested, kReading, kArrived, kRevoking, kDraining, kHeld, kDone
  };

  void on_meta(const RdmaMessage& message);
  void on_inline(const RdmaMessage& message);
  Status land(const TensorMeta& meta, bool window);   // under mu_
  // Whether what was released may still be written (kept until it cannot). Under mu_.
  bool release_landing();
  void cancel_locked(std::optional<RdmaMessage>* out);  // under mu_
  // Whether the peer may still write into the caller's destination, or our read land there.
  bool destination_reachable_locked() const;             // under mu_
  // Whether our read was posted and its completion not seen yet.
  bool read_outstanding_locked() const;                  // under mu_
  void finish(Status status, std::optional<TensorValue> value, bool registered = true);
  // Why the request may not be held for a new channel now that its own broke; empty
  // when it may.
  std::string why_not_held_locked() const;               // under mu_
  std::shared_ptr<RdmaTensorRequest> successor() const;

  RdmaRendezvous& rendezvous_;
  const std::shared_ptr<RdmaChannel> channel_;
  const StepKey key_;
  const std::shared_ptr<RdmaTensorRequest> previous_;
  const std::uint32_t attempt_;  // 1 for the first
  std::uint32_t index_ = 0;
  mutable std::mutex mu_;
  State state_ = State::kRequested;
  std::shared_ptr<RecvCallback> caller_;  // null once answered
  bool sent_ = false;  // its TENSOR_REQUEST went out (index_ is its index); else none will
  bool cancel_sent_ = false;
  std::optional<TensorMeta> meta_;        // what is expected
  const std::optional<RecvDestination> destination_;
  std::shared_ptr<TensorLanding> landing_;
  std::unique_ptr<verbs::MemoryWindow> window_;
  std::optional<std::uint32_t> checksum_;  // validation mode
  // The caller gave up while the peer could still reach its destination: what it hears
  // once the request ends (a tensor that arrives meanwhile is kept for the next recv).
  std::optional<Status> deferred_;
  // Read mode: set once the completion of our read (a flush too) was seen; until then the
  // landing may still be written, so it is not reused and a caller's memory not given back.
  std::shared_ptr<std::atomic<bool>> read_seen_;
  std::optional<Status> broke_;               // kDraining, kHeld: why its channel broke
  std::weak_ptr<RdmaTensorRequest> next_;     // the attempt that took over (resume)
};

}  // namespace tensorverbs
