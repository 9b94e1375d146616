// SoftQueuePair: reliable-connected semantics in software.
//
// Requester (soft_queue_pair_requester.cc): each posted work request becomes a SendOp, in
// post order (SendQueue). A one-sided operation whose target is shared memory of a peer on this host
// is validated against the peer's key table (with the in-flight guard) and copied at
// once; a write with immediate then publishes its event in the peer's event ring (kept
// pending while the ring is full). Everything else is a request frame on the stream,
// finished by the peer's ACK, READ_RESP or NAK. Shared memory is used only while no
// stream request is outstanding, and nothing overtakes a pending request, so the peer
// sees every request in post order. Completions leave in post order; the first error
// takes the queue pair to the error state and flushes the rest.
//
// Responder (soft_queue_pair_responder.cc): requests are carried out in sequence order,
// merging the stream and the event ring; a SEND or an immediate consumes the oldest
// posted receive (ReceiveQueue), and when none is posted the request (with its payload) is
// held (HeldRequests), as hardware retries on receiver-not-ready, and everything after it
// waits behind it.
//
// Connection (soft_queue_pair.cc): see handshake.h; traffic that arrives before connect()
// waits in the socket, as packets for a verbs queue pair before RTR.
//
// Links (soft_queue_pair_links.cc): over TCP, the side that dialed opens a further stream
// per link both contexts have (TENSORVERBS_LINKS), pairing them by position. A write of
// kStripeFrom bytes or more is then sent as its frame (first) and stripes spread over every
// stream. Once the write is the next to carry out (every request before it carried out) its
// range is checked as a whole and it opens: its stripes land straight in their place (those
// that came before land then, from a buffer), and it is carried out (completed, its
// immediate delivered) once all have landed, held (HeldRequests) until then with the
// requests after it, in order. A link that breaks, or is given up (its TCP user
// timeout), is left out: its stripes of writes not acknowledged yet go again on the first
// stream (a stripe that lands twice counts once), and the queue pair carries on. The side
// that dials the links dials one left out again, in the background (kLinkRedialFirst, then
// twice as long each time it fails, up to kLinkRedialMost): once it answers, it rejoins
// and carries its share again. Its first stream breaking fails the queue pair, as without
// links.
//
// Locking: one mutex per queue pair for all of its state (payload reads and small
// shared-memory copies included), then a completion queue's, then the stream's transmit
// lock. A large copy holds none of them: its helper only raises a flag and kicks the
// progress engine, whose driver completes the operation.
#pragma once

#include <array>
#include <atomic>
#include <bitset>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "verbs/queue_pair.h"
#include "verbs/soft/event_ring.h"
#include "verbs/soft/handshake.h"
#include "verbs/soft/held_requests.h"
#include "verbs/soft/peer_memory.h"
#include "verbs/soft/receive_queue.h"
#include "verbs/soft/send_queue.h"
#include "verbs/soft/soft_endpoint.h"
#include "verbs/soft/stream.h"
#include "verbs/soft/wire.h"
#include "verbs/context.h"

namespace tensorverbs::verbs::soft {

class SoftContext;
class SoftCompletionQueue;
class SoftProtectionDomain;

// Shared-memory copies from this size up leave the queue pair's mutex and the posting
// thread (a large copy would hold up every channel of the context meanwhile).
inline constexpr std::uint32_t kAsyncCopyBytes = 4 << 20;

// Writes from this size up are striped over the links; a stripe is at least kStripeBytes
// (and a write at most kMaxStripes stripes, wire.h).
inline constexpr std::uint32_t kStripeFrom = 1 << 20;
inline constexpr std::uint32_t kStripeBytes = 256 << 10;
// How far ahead of the next request to carry out a stripe's write may be numbered: as many
// requests as a queue pair may have outstanding.
inline constexpr std::uint32_t kMaxStripedAhead = 65536;

// What a queue pair with links has in flight at most (see in_flight_bytes_): a quarter of
// the peer's held-requests budget (a stripe sent again may be held twice).
inline constexpr std::uint64_t kMaxInFlightWithLinks = kMaxHeldBytes / 4;

// When a link left out is dialed again: kLinkRedialFirst after it went, then twice as long
// after each dial that fails, up to kLinkRedialMost; a link that breaks within
// kLinkRedialMost of joining carries on from its last wait (a link that flaps is not dialed
// every second).
inline constexpr std::chrono::milliseconds kLinkRedialFirst{1000};
inline constexpr std::chrono::milliseconds kLinkRedialMost{30000};

// Bytes a pass reads at most from one stream (the first one, or a link) before the driver
// turns to the others.
inline constexpr std::size_t kPassBudget = 4 << 20;

// How long an acknowledgement waits for a frame going back to ride on before it goes alone.
inline constexpr std::chrono::microseconds kAckDelay{20};

class SoftQueuePair final : public QueuePair, public std::enable_shared_from_this<SoftQueuePair> {
 public:
  static Result<std::shared_ptr<SoftQueuePair>> create(
      std::shared_ptr<SoftContext> context, std::shared_ptr<SoftProtectionDomain> pd,
      std::shared_ptr<SoftCompletionQueue> send_cq, std::shared_ptr<SoftCompletionQueue> recv_cq,
      QpCaps caps);
  ~SoftQueuePair() override;

  std::uint32_t qp_num() const override { return qp_num_; }
  QpState state() const override { return state_.load(std::memory_order_acquire); }
  std::string endpoint() const override;
  EndpointSummary summary() const override;
  std::uint32_t mtu() const override { return mtu_; }
  Status connect(std::string_view remote_endpoint) override;
  // A window that only this queue pair's peer reaches (the key table says which queue pair
  // it is bound to; a peer on this host checks that too). Made at once: no work request.
  Result<std::unique_ptr<MemoryWindow>> bind_window(const MemoryRegion& region,
                                                   std::uint64_t addr, std::size_t length,
                                                   std::uint32_t access) override;
  Status post_send(const SendWr* wrs, std::size_t count) override;
  std::size_t send_room() const override;
  Status post_recv(const RecvWr* wrs, std::size_t count) override;
  void to_error(std::string_view why) override;
  std::string error_detail() const override;
  // True once connected on one host (shared memory).
  bool prefers_allocated_memory() const override;

  // -- from the context --
  // A peer dialed in (listener thread): takes the connection, or answers why not.
  void on_dial(const Hello& hello, UniqueFd sock, bool is_unix, std::vector<UniqueFd> fds);
  void on_socket(std::uint32_t events);
  void on_link_socket(std::uint32_t link, std::uint32_t events);
  // The bytes sent so far on each stream: the first one's, then each link's (by number).
  std::vector<std::uint64_t> bytes_sent() const;
  // Why links were left out: the last reason of each that was, in the order of the links
  // ("" when none was), whether or not it rejoined since.
  std::string link_errors() const;
  LinkStats link_stats() const override;
  // Dials link `number` again (the context calls it when redial_later_locked() said; on a
  // thread of its own, without the lock).
  void redial_link(std::uint32_t number);
  bool poll_memory();
  bool memory_ready() const;
  void dial_deadline_passed();

 private:
  enum class Sink { kNone, kDiscard, kDirect, kBuffer, kRegion };
  struct RxFrame {
    bool active = false;
    FrameHeader header;
    std::uint32_t left = 0;
    Sink sink = Sink::kNone;
    std::uint8_t* dst = nullptr;
    std::uint32_t key = 0;  // kRegion: revalidated on every read
    std::vector<std::uint8_t> buffer;
    WcStatus error = WcStatus::kSuccess;  // a request to refuse once its payload is read
    std::string why;
    SendOp* read_op = nullptr;
  };

  SoftQueuePair(std::shared_ptr<SoftContext> context, std::shared_ptr<SoftProtectionDomain> pd,
                std::shared_ptr<SoftCompletionQueue> send_cq,
                std::shared_ptr<SoftCompletionQueue> recv_cq, QpCaps caps);
  Status init();

  // A further stream to the peer, over one of the context's links.
  struct Link {
    std::uint32_t number = 0;  // from 1: the context's link it leaves from
    std::shared_ptr<Stream> stream;
    RxFrame rx;
    std::uint64_t cookie = 0;
    bool watched = false;
    bool broken = false;  // left out: dropped by prune_links_locked()
    std::chrono::steady_clock::time_point joined = std::chrono::steady_clock::now();
  };
  // The stripes of a write that were read so far (by the write's number), and the first
  // reason one could not land.
  struct Early {  // a stripe that came before its write was the next to carry out
    FrameHeader header;
    std::vector<std::uint8_t> payload;  // (its bytes taken from held_'s budget)
  };
  struct Tally {
    std::bitset<kMaxStripes> landed;  // by stripe index (a stripe sent again counts once)
    std::vector<Early> early;  // held until the write opens
    WcStatus error = WcStatus::kSuccess;
    std::string why;
  };

  // connection (soft_queue_pair.cc)
  Status attach_locked(Dialed dialed, const Token& peer);
  Status adopt_peer_fds_locked(std::vector<UniqueFd>& fds);
  void start_locked();
  void enter_error_locked(const std::string& why);
  // The peer's stream ended (closed, reset, or broke as this side wrote): what it published
  // in the event ring before is carried out first, as the requests it sent before (an ACK
  // written as it stopped), then the error state.
  void stream_ended_locked(const std::string& why);
  void teardown_locked();
  // Sends, or notes that the stream broke as this side wrote (send_failed_locked).
  void send_frames_locked(TxItem* items, std::size_t count);
  // The stream broke as this side wrote (the peer shut it: it went to the error state or
  // exited): the driver's next pass salvages, or this side's reader when it is the caller.
  void send_failed_locked(const std::string& why);
  // What the peer sent before it shut the stream is taken, as a NIC processed the ACKs it
  // received before the link went (a write the peer took stays done), then the error state.
  void salvage_locked();
  void send_frame_locked(const FrameHeader& header) {
    TxItem item = frame_item(stamp_ack_locked(header));
    send_frames_locked(&item, 1);
  }

  // links (soft_queue_pair_links.cc)
  // Dials the peer's links (without the lock; the caller's connect() returned).
  void dial_links(const SoftEndpoint& remote);
  void on_link_dial_locked(const Hello& hello, UniqueFd sock, bool is_unix);
  void add_link_locked(std::uint32_t number, UniqueFd sock);
  void watch_link_locked(Link& link);
  void close_links_locked();
  // The live link `number` (nullptr when it broke, or never opened).
  Link* find_link_locked(std::uint32_t number);
  // A link broke (or the peer closed it): it is left out, and the stripes sent on it of
  // writes not acknowledged yet go again on the first stream; it is dialed again later.
  void link_broke_locked(Link& link, const std::string& why);
  // Drops the links that broke (when no reference to one is held).
  void prune_links_locked();
  // Sends the write `h` (numbered, stamped on sending) as stripes of `payload` spread over
  // the streams, then `h` itself, striped, on the first one.
  void send_striped_locked(FrameHeader h, const std::uint8_t* payload);
  // A stripe's header was read (from any stream): where its payload goes (its place when
  // its write is open, else a buffer).
  void setup_stripe_locked(RxFrame& rx, const FrameHeader& h);
  // A stripe was read whole: counted (kept if it came early); its write is carried out if
  // it was the last.
  void stripe_landed_locked(RxFrame& rx);
  // The striped write `h` is the next to carry out: its range is checked as a whole (else
  // it is refused: false), the stripes that came early land, and those that come from now
  // on land in their place.
  bool open_striped_locked(const FrameHeader& h);
  // Lands a stripe that came early in the open write (false: outside it; the queue pair
  // failed); a region gone since counts in `tally` as the write's error.
  bool land_early_locked(const Early& early, Tally& tally);
  // Whether the stripe `h` lies in the open write (same key, inside its range); if not,
  // the queue pair fails (a protocol error).
  bool in_open_write_locked(const FrameHeader& h);
  // Keeps why link `number` was left out (link_errors()).
  void note_link_error_locked(std::uint32_t number, const std::string& why);
  // Has link `number` dialed again later (redial_link()) if this side dials the links and
  // it is not due already.
  void redial_later_locked(std::uint32_t number);
  // Whether every stripe of the striped write `h` has landed (it is held until then).
  bool stripes_landed_locked(const FrameHeader& h) const;
  // A striped write is carried out: takes its tally, and stops any copy of one of its
  // stripes still arriving on a link; false when it cannot be carried out (then refused,
  // or the queue pair failed).
  bool take_stripes_locked(const FrameHeader& h);
  void read_link_locked(Link& link);
  // What follows reading frames from any stream: salvage, held requests, completions, ACKs.
  void after_reading_locked();

  // requester (soft_queue_pair_requester.cc)
  bool execute_locked(SendOp& op);
  bool execute_shm_locked(SendOp& op, std::uint8_t* local, bool* used);
  // Pins the peer's memory `wr` reaches, with the access its opcode needs.
  Status pin_remote_locked(const SendWr& wr, KeyTableView::Pinned* pinned);
  // Asks the peer for segment `id` (once, until it comes) unless it is mapped already.
  void ask_for_segment_locked(std::uint32_t id);
  // Asks for the segment `wr` reaches: an operation that takes the stream behind others
  // still readies the shared-memory path for the next ones.
  void ask_ahead_locked(const SendWr& wr);
  void stream_request_locked(SendOp& op, FrameOp code, const std::uint8_t* payload,
                             std::uint32_t length);
  bool publish_event_locked(SendOp& op);
  bool complete_copied_locked(SendOp& op);
  void land_copy_locked();
  void retry_pending_locked();
  // Whether `op` waits (pending) for earlier ones to be acknowledged: see in_flight_bytes_.
  bool throttled_locked(const SendOp& op) const;
  void finish_locked(SendOp& op, WcStatus status, std::string detail = "") {
    op.finish(status, std::move(detail));
  }
  void emit_locked();
  void acked_locked(std::uint32_t ack);
  Status local_buffer(const Sge& sge, std::uint32_t need, std::uint8_t** out) const;

  // responder (soft_queue_pair_responder.cc)
  // Reads and carries out frames until the socket is empty or about `budget` bytes (headers
  // and payloads) were read; frames the stream buffered already are carried out regardless.
  void read_frames_locked(std::size_t budget);
  bool start_frame_locked();
  // Reads `rx`'s payload from `stream` (a link's when `link` is set).
  void payload_locked(Stream& stream, RxFrame& rx, Link* link, bool* progress);
  void finish_frame_locked();
  void execute_request_locked(const FrameHeader& h, std::vector<std::uint8_t>* payload,
                              bool applied);
  void setup_request_sink_locked(const FrameHeader& h);
  void refuse_locked(const FrameHeader& h, WcStatus status, const std::string& why);
  bool drain_ring_locked(std::uint32_t until_seq, bool until_given);
  void drain_held_locked();
  bool deliver_recv_locked(const FrameHeader& h, const std::vector<std::uint8_t>* data);
  void handle_segment_locked(const FrameHeader& h);
  FrameHeader stamp_ack_locked(FrameHeader h);
  void send_ack_if_owed_locked();
  // What a peer's one-sided access to this context comes through: this queue pair.
  Through through() const;
  bool blocked_locked() const { return !held_.empty(); }
  bool state_ready_locked() const;

  const std::shared_ptr<SoftContext> context_;
  const std::shared_ptr<SoftProtectionDomain> pd_;
  const std::shared_ptr<SoftCompletionQueue> send_cq_, recv_cq_;
  const QpCaps caps_;
  const std::uint32_t qp_num_;
  const std::uint32_t mtu_ = 4096;
  Token token_{};
  std::uint64_t cookie_ = 0;
  std::unique_ptr<EventRing> ring_;  // inbound events (this side consumes)

  mutable std::mutex mu_;
  std::atomic<QpState> state_{QpState::kInit};
  bool connecting_ = false;
  bool have_remote_ = false;
  Token remote_token_{};
  std::string detail_;
  // the stream broke as this side wrote, why: salvage_locked() is due
  std::atomic<bool> send_broke_{false};
  std::string send_broke_why_;
  // connection
  std::shared_ptr<Stream> stream_;
  bool data_socket_ = false;  // its stream carries the data (no rings), counted by Progress
  bool dialed_in_ = false;  // the stream came from the peer's dial (before or after connect)
  Token dialer_token_{};
  std::shared_ptr<PeerMemory> peer_;
  std::unique_ptr<EventRingProducer> peer_ring_;
  std::uint32_t peer_pd_ = 0;  // the PD number of the peer's queue pair
  std::uint32_t peer_qp_num_ = 0;  // its number (from its endpoint)
  // requester
  SendQueue sends_;               // posted, not yet completed, in post order
  std::deque<SendOp*> pending_;   // not carried out yet, in order
  std::deque<SendOp*> awaiting_;  // on the stream, awaiting the peer's answer
  std::uint32_t tx_seq_ = 0;
  std::uint32_t acked_ = 0;
  bool ring_doorbell_ = false;
  std::atomic<bool> pending_on_ring_{false};
  // the large shared-memory copy under way off the mutex (one at a time)
  struct CopyInFlight {  // shared with the helper that copies
    std::atomic<bool> landed{false};
    std::mutex mu;
    std::condition_variable cv;
    bool busy = false;  // until the helper is done with this queue pair
  };
  const std::shared_ptr<CopyInFlight> copy_ = std::make_shared<CopyInFlight>();
  SendOp* copying_ = nullptr;  // its operation (at the front of pending_)
  KeyTableView::Pinned copy_pin_;
  std::shared_ptr<PeerMemory> copy_peer_;  // keeps the pinned key table and the segment mapped
  std::atomic<std::uint64_t> pending_seen_head_{0};
  // responder
  ReceiveQueue recvs_;
  HeldRequests held_;
  std::uint32_t rx_next_ = 1;  // the next request to carry out
  std::uint32_t rx_done_ = 0;  // the last one carried out
  std::uint32_t ack_sent_ = 0;
  bool ack_owed_ = false;
  std::atomic<bool> ack_due_{false};  // a bare ACK goes if no frame takes it along soon
  std::chrono::steady_clock::time_point ack_since_;
  bool nak_sent_ = false;
  RxFrame rx_;
  std::atomic<std::uint64_t> ring_seen_tail_{0};
  // links
  std::vector<std::unique_ptr<Link>> links_;  // open, in the order they opened
  std::unordered_map<std::uint32_t, Tally> stripes_;  // writes not carried out yet
  std::uint32_t open_seq_ = 0;  // the striped write whose stripes land in place (0: none)
  FrameHeader open_;            // its frame
  // the stripes this side sent on links, of writes not acknowledged yet, in order: sent
  // again on the first stream if their link breaks
  struct SentStripe {
    std::uint32_t seq = 0;
    std::uint32_t index = 0;
    std::uint32_t link = 0;
    FrameHeader header;
    const std::uint8_t* payload = nullptr;
  };
  std::deque<SentStripe> sent_stripes_;
  // the payload bytes of the writes and sends on the stream not acknowledged yet: with
  // links, at most kMaxInFlightWithLinks (past it new requests wait, pending), so that what
  // the peer holds for them (stripes that came early, requests behind a write waiting for
  // a slow link) stays within its budget
  std::uint64_t in_flight_bytes_ = 0;
  std::array<std::string, kMaxLinks + 1> link_errors_;  // per link, the last reason
  std::vector<SoftLinkAddress> remote_links_;  // the peer's (this side dials them)
  std::bitset<kMaxLinks + 1> redial_due_;        // a redial_link() is scheduled
  std::bitset<kMaxLinks + 1> joined_;            // links that joined once (then: rejoins)
  LinkStats link_counts_;                        // (breaks and rejoins)
  std::array<std::chrono::milliseconds, kMaxLinks + 1> redial_after_{};  // the last wait
  std::array<std::uint64_t, kMaxLinks + 1> bytes_sent_{};  // per stream, as bytes_sent()
};

}  // namespace tensorverbs::verbs::soft
