// RdmaChannel: the RDMA connection to one peer task (TensorFlow's RdmaChannel).
//
// It owns the queue pair, the message buffer, this task's pending requests to the peer
// (by request index) and the peer's pending requests answered here. Incoming messages go
// to the request or response they name, a TENSOR_REQUEST to the owner; every failure of
// the connection fails all of them, once, with the reason. Thread-safe: any thread may
// send; the adapter's thread delivers completions.
//
// Flow control: any number of transfers may be in flight. At most `max_requests` requests
// to the peer are (each holds one of the receives its answer may consume; more wait here, in
// order, and are sent as earlier ones end), and the queue pair has that many receives
// posted beside those of the messages, so the peer never meets an empty receive queue.
// Work requests beyond the send queue's free entries wait in a backlog, in order, posted as
// completions free entries (after a batch; the owner's housekeeping as a fallback). The
// peer may send first (its side connects before this one): what this side sends before it
// is connected waits until connect().
//
// (Defined in rdma_channel.cc; what arrives in rdma_channel_receive.cc; the tables of
// requests and responses in rdma_channel_tables.cc.)
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/recycling_map.h"
#include "core/status.h"
#include "protocol/channel_description.h"
#include "protocol/protocol_counters.h"
#include "protocol/rdma_message.h"
#include "protocol/rdma_message_buffer.h"
#include "verbs/queue_pair.h"
#include "verbs/work.h"

namespace tensorverbs {

class HeldMessages;
class RdmaChannel;
class RdmaTensorRequest;
class RdmaTensorResponse;

// What a channel needs from the task it belongs to.
class ChannelOwner {
 public:
  virtual ~ChannelOwner() = default;
  virtual ProtocolCounters& counters() = 0;
  // A TENSOR_REQUEST from the channel's peer (in the adapter's thread).
  virtual void on_tensor_request(const std::shared_ptr<RdmaChannel>& channel,
                                 const RdmaMessage& message) = 0;
  virtual const std::string& task_name(std::int32_t task) const = 0;
  // Work waits in a channel's backlog: call drain() on it from housekeeping until it says
  // nothing is left.
  virtual void wants_housekeeping() = 0;
  // The channel to `peer` broke under the transport (see RdmaChannel::fail): it should be
  // set up again (in the adapter's thread; must not block).
  virtual void channel_lost(std::int32_t /*peer*/) {}
};

class RdmaChannel : public std::enable_shared_from_this<RdmaChannel> {
 public:
  // Receives posted for messages and ACKs (a queue pair's receive queue holds these and
  // `max_requests`).
  static std::uint32_t message_receives(std::uint32_t slots) { return 2 * slots + 64; }

  RdmaChannel(ChannelOwner& owner, std::int32_t peer, std::uint64_t incarnation,
              std::shared_ptr<verbs::QueuePair> qp, std::unique_ptr<RdmaMessageBuffer> buffer,
              std::uint64_t max_message_bytes, const std::string& provider,
              std::uint32_t max_requests);
  ~RdmaChannel();

  std::int32_t peer() const { return peer_; }
  std::uint64_t incarnation() const { return incarnation_; }
  std::uint32_t qp_num() const { return qp_->qp_num(); }
  // Whether the peer writes into the pool faster than into other memory (see QueuePair).
  bool prefers_allocated_memory() const { return qp_->prefers_allocated_memory(); }
  const std::string& peer_name() const { return peer_name_; }
  const std::string& name() const { return name_; }
  verbs::LinkStats link_stats() const { return qp_->link_stats(); }

  // -- setup -------------------------------------------------------------------------------
  // Posts the receives; call once, before the description is given out.
  Status start();
  std::string description() const;
  // Connects to the peer's side (idempotent for the same queue pair: both sides may set the
  // channel up at once).
  Status connect(const ChannelDescription& remote);
  // Whether `remote` is the queue pair this channel is connected to (or it is unconnected).
  bool accepts(const ChannelDescription& remote) const;
  bool ready() const;
  std::optional<Status> error() const;

  // -- messages ----------------------------------------------------------------------------
  // Sends `message` (in order; waits for a credit if needed). Nothing once failed. While
  // the sending thread has a HeldMessages scope, the channel holds its messages until the
  // scope ends (release_held()).
  void send(RdmaMessage message);
  // Ends a hold that send() started for a HeldMessages scope: what waits goes out.
  void release_held();
  // Sends a TENSOR_INLINE answering `response`, which finishes once the peer has taken the
  // message (so the tensor is given back if the channel fails before).
  void send_inline(RdmaMessage message, std::shared_ptr<RdmaTensorResponse> response);

  // Writes (with immediate) or reads `length` bytes at `local` (under `lkey`) to or from
  // `remote_addr`, as operations of at most the channel's message size; only the last is
  // signaled (and carries the immediate). A read's `seen` is set once its completion
  // (success, error or flush) has been seen, or once nothing of it can land any more (the
  // channel failed before it was posted, the queue pair is gone): until then the read may
  // still place bytes.
  void post_transfer(verbs::WrOpcode opcode, std::uint64_t local, std::uint64_t length,
                     std::uint32_t lkey, std::uint64_t remote_addr, std::uint32_t rkey,
                     std::uint64_t wr_id, std::uint32_t imm,
                     std::shared_ptr<std::atomic<bool>> seen = nullptr);
  // The task stops (its adapter no longer takes completions): every read counts as seen.
  void abandon_reads();
  // The task stops: the responses a failure left waiting for their write's completion
  // give their tensors back.
  void abandon_writes();
  // A window over [addr, +length) of `region` that only the peer reaches (bound to the queue
  // pair; see QueuePair::bind_window for what each provider gives).
  Result<std::unique_ptr<verbs::MemoryWindow>> bind_window(const verbs::MemoryRegion& region,
                                                           std::uint64_t addr, std::size_t length,
                                                           std::uint32_t access);
  // The length of the last operation of a transfer of `nbytes` (the one the peer sees).
  std::uint32_t last_operation_bytes(std::uint64_t nbytes) const;

  // Posts what waits in the backlog as far as the send queue has room; true if some is left.
  bool drain();

  // -- requests and responses ----------------------------------------------------------------
  // Registers a request under a free index and returns it, or queues it (nothing) while
  // `max_requests` are in flight: it is then registered when one ends, and its
  // send_request(index) called. Fails (the channel's error) once failed.
  Result<std::optional<std::uint32_t>> add_request(std::shared_ptr<RdmaTensorRequest> request);
  // Ends a request's registration (its index is free again) and admits a queued one.
  void remove_request(std::uint32_t index);
  // Requests queued behind those in flight.
  std::size_t queued_requests() const;
  // Where the channel stands, for diagnostics: requests, responses, backlog, messages.
  std::string describe() const;
  // The most requests of the peer a channel answers at once: no task has more in flight
  // (its queue depth is at most this), so one past it is a peer that broke the rules.
  static constexpr std::uint32_t kMaxPeerRequests = 65536;
  // Registers `response`, the answer to the peer's `request`; false once failed (nobody is
  // left to answer), if the peer has kMaxPeerRequests answered here already (the request is
  // answered RESOURCE_EXHAUSTED, the channel goes on), or if its index is in use (then the
  // channel fails: the peer broke the rules).
  bool add_response(const RdmaMessage& request, std::shared_ptr<RdmaTensorResponse> response);
  void remove_response(std::uint32_t index);

  // -- the adapter's thread ------------------------------------------------------------------
  void on_completion(const verbs::WorkCompletion& wc);
  // After a batch of completions: an explicit ACK if messages were taken and none went back.
  void after_batch();
  // Stopping: whether all it posted has left (true once it failed, or while it is not
  // connected). If not, it posts what waits in its backlog and, unless one is on its way, a
  // fence: an explicit ACK of the messages taken, signaled (its completion frees the send
  // queue's entries of what went before it, signaled or not), so that a later call can tell.
  bool quiet();

  // The connection is gone: fails every request and response, once; true if this call did.
  // `transient`: the connection broke under the transport (it gave up retransmitting, or
  // the peer's side was closed) rather than for good, so a request may be asked again on
  // the channel that replaces this one (RdmaTensorRequest::fail); one the peer may have
  // written its tensor for stays registered until drained(). Tensors being answered go back
  // to the table either way.
  bool fail(const Status& why, bool transient = false);
  // Its queue pair's receives were flushed (or no completion is taken any more): the
  // requests that a transient failure left waiting for that (RdmaTensorRequest::await_drain)
  // are held or fail now, and the channel lets go of them. One that the failure's pass
  // reaches after the flush was seen is held there and then.
  void drained();
  // Whether it failed for good (a fail() that was not transient, even after a transient
  // one): a request of it that its transient failure would hold fails instead.
  bool gone() const { return gone_.load(std::memory_order_acquire); }
  // Why it failed for good (the first such fail()'s reason); empty while it has not.
  std::string gone_reason() const;

 private:
  bool flushed() const;  // whether drained() ran
  // Posts `wrs` (emptied) after what waits in the backlog, as far as there is room.
  Status post_locked(std::vector<verbs::SendWr>& wrs);
  // The sending thread's HeldMessages scope if it does not hold this channel yet (then
  // with room to add it), else nullptr.
  HeldMessages* held_scope();
  // Sends `message` and posts what it can; `sequence` as RdmaMessageBuffer::send.
  Status send_locked(RdmaMessage& message, std::uint64_t* sequence);
  // RdmaMessageBuffer::send, counted.
  Status buffer_send_locked(RdmaMessage& message, std::vector<verbs::SendWr>* wrs,
                            std::uint64_t* sequence);
  std::vector<verbs::SendWr>& scratch_locked() {
    scratch_.clear();
    return scratch_;
  }
  Status drain_locked();
  // Sends what was sent before the channel was connected (the peer may ask first: its side
  // connects before this one), then what waits in the backlog.
  Status send_early_locked();
  std::uint32_t next_index_locked();
  void admit_queued(std::unique_lock<std::mutex>& lock);
  Status credit_locked(std::uint32_t count,
                       std::vector<std::shared_ptr<RdmaTensorResponse>>* delivered);
  void on_message(std::uint32_t byte_len);
  // The message in the next slot is handled: its slot may be reused once the peer is told.
  void taken_locked();
  void bad_message(const MessageError& error);
  std::shared_ptr<RdmaTensorRequest> find_request(std::uint32_t index);
  std::shared_ptr<RdmaTensorResponse> find_response(std::uint32_t index);

  ChannelOwner& owner_;
  const std::int32_t peer_;
  const std::uint64_t incarnation_;
  const std::shared_ptr<verbs::QueuePair> qp_;
  const std::string provider_;
  const std::string peer_name_, name_;
  mutable std::mutex mu_;
  std::unique_ptr<RdmaMessageBuffer> buffer_;
  std::optional<ChannelDescription> remote_;
  bool connecting_ = false;                  // connect() is dialing, without the lock
  std::condition_variable connected_;        // it has returned
  std::optional<Status> error_;
  std::optional<Status> gone_why_;  // the first fail() that was not transient
  bool failed_ = false;  // fail() ran
  bool flushed_ = false;  // drained() ran: nothing more lands through the queue pair
  std::atomic<bool> gone_{false};
  // the smaller of both sides' once connected; read without mu_ by transfers
  std::atomic<std::uint64_t> max_message_bytes_;
  std::uint32_t next_index_ = 0;
  const std::uint32_t max_requests_;
  const std::size_t send_depth_;  // the send queue's room when nothing is posted
  bool fence_out_ = false;        // quiet()'s signaled ACK is on its way
  RecyclingMap<std::uint32_t, std::shared_ptr<RdmaTensorRequest>> requests_;
  std::deque<std::shared_ptr<RdmaTensorRequest>> queued_;  // beyond max_requests_, in order
  std::deque<verbs::SendWr> backlog_;  // work requests beyond the send queue's room, in order
  // the work requests being made to post, kept with their capacity (no allocation per
  // message): scratch_locked() hands it out cleared, with mu_ held
  std::vector<verbs::SendWr> scratch_;
  // Our reads not seen to end yet, by request index: the flag to set then, and how many
  // operations the read was posted as.
  struct Read {
    std::shared_ptr<std::atomic<bool>> seen;
    std::size_t operations = 0;
  };
  std::unordered_map<std::uint32_t, Read> reads_;
  // Responses whose write was posted, by index, until they are settled: a failure leaves
  // them registered, and the write's completion tells whether the peer has the tensor.
  // (Its nodes are kept: a write per large tensor allocates nothing.)
  RecyclingMap<std::uint32_t, bool> writes_;
  RecyclingMap<std::uint32_t, std::shared_ptr<RdmaTensorResponse>> responses_;
  // inline answers waiting for the peer to take their message: (sequence, response), in
  // the order of their sequences from inline_head_ on (those before it were delivered)
  std::vector<std::pair<std::uint64_t, std::shared_ptr<RdmaTensorResponse>>> inline_;
  std::size_t inline_head_ = 0;
  bool took_messages_ = false;  // since the last after_batch()
  // messages sent before connect(), with the response of an inline answer
  std::vector<std::pair<RdmaMessage, std::shared_ptr<RdmaTensorResponse>>> early_;
};

}  // namespace tensorverbs
