// SoftQueuePair: creation, connection, the error state and teardown.
#include "verbs/soft/soft_queue_pair.h"

#include <sys/epoll.h>
#include <sys/random.h>

#include <cstring>

#include "verbs/soft/soft_completion_queue.h"
#include "verbs/soft/soft_context.h"
#include "verbs/soft/soft_protection_domain.h"

namespace tensorverbs::verbs::soft {
namespace {

// Bytes a salvage reads at most: more than a socket's buffers at both ends hold.
constexpr std::size_t kSalvageBytes = 64u << 20;

std::uint32_t ring_capacity(int max_recv_wr) {
  std::uint32_t capacity = 64;
  while (capacity < static_cast<std::uint32_t>(max_recv_wr) && capacity < kMaxRingCapacity) {
    capacity <<= 1;
  }
  return capacity;
}

}  // namespace

Result<std::shared_ptr<SoftQueuePair>> SoftQueuePair::create(
    std::shared_ptr<SoftContext> context, std::shared_ptr<SoftProtectionDomain> pd,
    std::shared_ptr<SoftCompletionQueue> send_cq, std::shared_ptr<SoftCompletionQueue> recv_cq,
    QpCaps caps) {
  std::shared_ptr<SoftQueuePair> qp(new SoftQueuePair(std::move(context), std::move(pd),
                                                      std::move(send_cq), std::move(recv_cq), caps));
  Status ok = qp->init();
  if (!ok.ok()) return ok;
  return qp;
}

SoftQueuePair::SoftQueuePair(std::shared_ptr<SoftContext> context,
                             std::shared_ptr<SoftProtectionDomain> pd,
                             std::shared_ptr<SoftCompletionQueue> send_cq,
                             std::shared_ptr<SoftCompletionQueue> recv_cq, QpCaps caps)
    : context_(std::move(context)),
      pd_(std::move(pd)),
      send_cq_(std::move(send_cq)),
      recv_cq_(std::move(recv_cq)),
      caps_(caps),
      qp_num_(context_->new_qp_num()),
      sends_(qp_num_, send_cq_),
      recvs_(qp_num_, recv_cq_) {}

Status SoftQueuePair::init() {
  if (::getrandom(token_.data(), token_.size(), 0) != static_cast<ssize_t>(token_.size())) {
    return Status(Code::kUnavailable, "cannot draw a random token");
  }
  auto ring = EventRing::create(ring_capacity(caps_.max_recv_wr));
  if (!ring.ok()) return ring.status();
  ring_ = ring.take();
  cookie_ = context_->add_qp(token_, weak_from_this());
  return ok_status();
}

SoftQueuePair::~SoftQueuePair() {
  context_->remove_qp(token_, cookie_);
  {  // a helper may still copy from the caller's memory into the peer's
    std::unique_lock copy_lock(copy_->mu);
    copy_->cv.wait(copy_lock, [&] { return !copy_->busy; });
  }
  std::lock_guard lock(mu_);
  if (copying_ != nullptr) KeyTableView::unpin(copy_pin_);
  send_ack_if_owed_locked();  // (see to_error)
  teardown_locked();
}

std::string SoftQueuePair::endpoint() const {
  SoftEndpoint e;
  e.qp_num = qp_num_;
  e.mtu = mtu_;
  e.token = token_;
  e.same_host = context_->same_host();
  e.tcp_host = context_->listen_host();
  e.tcp_port = context_->listener().tcp_port();
  e.unix_name = context_->listener().unix_name();
  e.links = context_->links();
  return encode_endpoint(e);
}

EndpointSummary SoftQueuePair::summary() const {
  EndpointSummary s;
  s.provider = "soft";
  s.qp_num = qp_num_;
  s.psn = 0;
  s.lid = 0;
  s.mtu = mtu_;
  return s;
}

std::string SoftQueuePair::error_detail() const {
  std::lock_guard lock(mu_);
  return detail_;
}

Status SoftQueuePair::connect(std::string_view remote_endpoint) {
  auto decoded = decode_endpoint(remote_endpoint);
  if (!decoded.ok()) {
    if (remote_endpoint.size() >= 4 && remote_endpoint.substr(0, 4) != "TVSE") {
      return Status(Code::kInvalidArgument,
                    "cannot connect a soft queue pair to an endpoint of another provider (" +
                        decoded.status().message() + ")");
    }
    return decoded.status();
  }
  const SoftEndpoint remote = decoded.take();
  if (remote.token == token_) {
    return Status(Code::kInvalidArgument, "a queue pair cannot connect to itself");
  }
  std::unique_lock lock(mu_);
  if (state_.load() != QpState::kInit || connecting_) {
    return Status(Code::kFailedPrecondition,
                  "queue pair " + std::to_string(qp_num_) + " is already connected");
  }
  peer_qp_num_ = remote.qp_num;
  if (std::memcmp(token_.data(), remote.token.data(), kTokenBytes) > 0) {
    // the peer dials: traffic may flow once (or as soon as) its dial is in
    have_remote_ = true;
    remote_token_ = remote.token;
    state_.store(QpState::kRts, std::memory_order_release);
    if (stream_) {
      if (dialer_token_ != remote.token) {
        enter_error_locked("a queue pair other than the connected one dialed in");
      } else {
        start_locked();
      }
    } else {
      context_->expect_dial(cookie_, std::chrono::steady_clock::now() + kAttachTimeout);
    }
    return ok_status();
  }
  connecting_ = true;
  LocalFds local;
  local.key_table = context_->keys().segment().fd();
  local.doorbell = context_->doorbell().fd();
  local.ring = ring_->segment().fd();
  local.pd = pd_->number();
  lock.unlock();
  auto dialed = dial(remote, token_, context_->same_host(), local);
  lock.lock();
  connecting_ = false;
  if (!dialed.ok()) return dialed.status();
  if (state_.load() != QpState::kInit) {
    return Status(Code::kFailedPrecondition, "queue pair " + std::to_string(qp_num_) +
                                                 " left the INIT state while connecting");
  }
  have_remote_ = true;
  remote_token_ = remote.token;
  const bool over_tcp = !dialed.value().is_unix;
  Status attached = attach_locked(dialed.take(), remote.token);
  if (!attached.ok()) return attached;
  state_.store(QpState::kRts, std::memory_order_release);
  start_locked();
  lock.unlock();
  if (over_tcp) dial_links(remote);
  return ok_status();
}

Result<std::unique_ptr<MemoryWindow>> SoftQueuePair::bind_window(const MemoryRegion& region,
                                                                 std::uint64_t addr,
                                                                 std::size_t length,
                                                                 std::uint32_t access) {
  return pd_->bind_window_for(qp_num_, region, addr, length, access);
}

Through SoftQueuePair::through() const { return Through{pd_->number(), qp_num_}; }

bool SoftQueuePair::prefers_allocated_memory() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peer_ != nullptr;
}

Status SoftQueuePair::adopt_peer_fds_locked(std::vector<UniqueFd>& fds) {
  auto peer = context_->peer_memory(std::move(fds[0]), std::move(fds[1]));
  if (!peer.ok()) return peer.status();
  auto ring = EventRingProducer::map(std::move(fds[2]));
  if (!ring.ok()) return ring.status();
  peer_ = peer.take();
  peer_ring_ = ring.take();
  return ok_status();
}

Status SoftQueuePair::attach_locked(Dialed dialed, const Token& peer) {
  if (dialed.is_unix) {
    Status adopted = adopt_peer_fds_locked(dialed.fds);
    if (!adopted.ok()) {
      return Status(Code::kUnavailable, "the peer's shared memory is unusable: " + adopted.message());
    }
  }
  peer_pd_ = dialed.peer_pd;
  dialer_token_ = peer;
  stream_ = std::make_shared<Stream>(std::move(dialed.sock), dialed.is_unix);
  return ok_status();
}

void SoftQueuePair::on_dial(const Hello& hello, UniqueFd sock, bool is_unix,
                            std::vector<UniqueFd> fds) {
  std::lock_guard lock(mu_);
  if (hello.kind == HelloKind::kLink) {
    on_link_dial_locked(hello, std::move(sock), is_unix);
    return;
  }
  Hello reply = hello;
  reply.kind = HelloKind::kReply;
  reply.fd_count = 0;
  reply.pd = pd_->number();
  if (stream_ || state_.load() == QpState::kError || connecting_ ||
      (have_remote_ && remote_token_ != hello.dialer)) {
    reply.status = state_.load() == QpState::kError ? HelloStatus::kNoQueuePair : HelloStatus::kTaken;
    (void)send_hello(sock.get(), reply, nullptr, 0);
    return;
  }
  Dialed dialed;
  dialed.sock = std::move(sock);
  dialed.is_unix = is_unix;
  dialed.fds = std::move(fds);
  dialed.peer_pd = hello.pd;
  const int sock_fd = dialed.sock.get();
  Status attached = attach_locked(std::move(dialed), hello.dialer);
  if (!attached.ok()) {
    reply.status = HelloStatus::kBadDescriptors;
    (void)send_hello(sock_fd, reply, nullptr, 0);
    stream_.reset();
    peer_.reset();
    peer_ring_.reset();
    return;
  }
  reply.status = HelloStatus::kOk;
  int mine[3] = {context_->keys().segment().fd(), context_->doorbell().fd(), ring_->segment().fd()};
  if (is_unix) reply.fd_count = kHelloFds;
  Status sent = send_hello(stream_->fd(), reply, mine, is_unix ? 3 : 0);
  tune_stream(stream_->fd(), is_unix);
  if (!sent.ok()) {
    stream_.reset();
    peer_.reset();
    peer_ring_.reset();
    return;
  }
  dialed_in_ = true;
  if (state_.load() == QpState::kRts) start_locked();
}

void SoftQueuePair::start_locked() {
  // the stream (and the rings) are live from now on
  const int fd = stream_->fd();
  Progress* progress = &context_->progress();
  const std::uint64_t cookie = cookie_;
  stream_->set_write_watch([progress, fd, cookie](bool on) {
    (void)progress->watch(fd, cookie, on, false);
  });
  Status watched = progress->watch(fd, cookie, false, true);
  if (!watched.ok()) {
    enter_error_locked(watched.message());
    return;
  }
  for (const auto& link : links_) {
    if (!link->watched) watch_link_locked(*link);
  }
  if (!peer_ring_ && !data_socket_) {
    data_socket_ = true;
    progress->data_sockets(+1);
  }
  context_->activate(cookie_);
  retry_pending_locked();
  emit_locked();
  // bytes that came before connect() waited in the socket: look now
  progress->kick();
}

void SoftQueuePair::dial_deadline_passed() {
  std::lock_guard lock(mu_);
  if (!stream_ && state_.load() == QpState::kRts) {
    enter_error_locked("the peer did not connect within " +
                       std::to_string(kAttachTimeout.count()) + " s");
  }
}

void SoftQueuePair::to_error(std::string_view why) {
  std::lock_guard lock(mu_);
  // what arrived is acknowledged first, as a NIC has done by now; the reason stays this
  // call's whatever the ACK meets (a broken stream)
  if (state_.load() == QpState::kRts && detail_.empty()) detail_ = why;
  send_ack_if_owed_locked();
  enter_error_locked(std::string(why));
}

void SoftQueuePair::teardown_locked() {
  close_links_locked();
  if (data_socket_) {
    data_socket_ = false;
    context_->progress().data_sockets(-1);
  }
  if (stream_) {
    context_->progress().unwatch(stream_->fd());
    stream_->shutdown();
    stream_.reset();
  }
  peer_ring_.reset();
  if (peer_) peer_->forget_requests_of(this);  // their answers would come on this stream
  peer_.reset();
  rx_ = RxFrame{};
  held_.clear();
  pending_.clear();
  awaiting_.clear();
}

void SoftQueuePair::enter_error_locked(const std::string& why) {
  if (state_.load() == QpState::kError) return;
  state_.store(QpState::kError, std::memory_order_release);
  send_broke_.store(false, std::memory_order_relaxed);
  // an ACK owed goes nowhere now: no timer for it (else the driver never sleeps)
  ack_owed_ = false;
  ack_due_.store(false, std::memory_order_relaxed);
  if (detail_.empty()) detail_ = why;
  // closed first (before anything of ours is revoked: the peer tells why its access fails),
  // then drained: a write the peer publishes from now on finds the ring closed and fails at
  // its side, so one that succeeded there is in the ring now
  if (ring_) ring_->close();
  // the writes the peer published in the ring finished at its side: their receives complete
  // before the rest is flushed, as a NIC completed those of what it acknowledged (whatever
  // broke: a stream that failed too; a failure the ring meets here is this one's)
  if (stream_) drain_ring_locked(0, false);
  teardown_locked();  // first: nothing may touch the callers' buffers after their flush
  sends_.flush_all(copying_);  // a copy under way ends first: its operation flushes then
  emit_locked();
  recvs_.flush_all();
}

void SoftQueuePair::send_frames_locked(TxItem* items, std::size_t count) {
  if (!stream_) return;
  for (std::size_t i = 0; i < count; ++i) bytes_sent_[0] += items[i].payload_len;
  Status sent = stream_->send(items, count);
  if (!sent.ok()) send_failed_locked(sent.message());
}

void SoftQueuePair::send_failed_locked(const std::string& why) {
  // not at once: the caller may be anywhere (posting, reading a frame, draining the ring),
  // where reading the socket again is not safe; what it sends from now on is dropped, and
  // its operations are flushed with the rest
  if (state_.load() != QpState::kRts || send_broke_.load(std::memory_order_relaxed)) return;
  send_broke_why_ = why;
  send_broke_.store(true, std::memory_order_release);
  context_->progress().kick();
}

void SoftQueuePair::salvage_locked() {
  if (!stream_ || state_.load() != QpState::kRts) {
    send_broke_.store(false, std::memory_order_relaxed);
    return;
  }
  // what the peer sent before it shut the stream: all a socket's buffers hold, bounded for a
  // peer that stopped reading but goes on writing
  read_frames_locked(kSalvageBytes);
  if (stream_ && state_.load() == QpState::kRts) stream_ended_locked(send_broke_why_);
}

}  // namespace tensorverbs::verbs::soft
