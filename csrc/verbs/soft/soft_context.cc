#include "verbs/soft/soft_context.h"

#include <sys/stat.h>

#include <string>
#include <system_error>
#include <thread>

#include "core/thread_guard.h"
#include "verbs/soft/soft_completion_queue.h"
#include "verbs/soft/soft_protection_domain.h"
#include "verbs/soft/soft_provider_attr.h"
#include "verbs/soft/soft_queue_pair.h"

namespace tensorverbs::verbs::soft {
namespace {

// Runs fn() (the handling of `qp`'s traffic, in a thread of this context); what it throws
// takes `qp` to the error state, which flushes its work and tells its peer, and goes no
// further.
template <typename Fn>
void guarded(SoftQueuePair& qp, Fn&& fn) {
  run_guarded(fn, [&qp](const char* what) {
    qp.to_error(std::string("the soft provider failed: ") + what);
  });
}

}  // namespace

Result<std::shared_ptr<SoftContext>> SoftContext::open(const VerbsConfig& config,
                                                       const std::string& listen_host) {
  std::shared_ptr<SoftContext> context(new SoftContext());
  Status ok = context->init(config, listen_host);
  if (!ok.ok()) return ok;
  return context;
}

Status SoftContext::init(const VerbsConfig& config, const std::string& listen_host) {
  device_ = soft_device_attr();
  auto same_host = parse_same_host(config.same_host);
  if (!same_host.ok()) return same_host.status();
  same_host_ = same_host.value();
  listen_host_ = listen_host.empty() ? "127.0.0.1" : listen_host;
  auto keys = KeyTable::create();
  if (!keys.ok()) return keys.status();
  keys_ = keys.take();
  auto doorbell = Doorbell::create();
  if (!doorbell.ok()) return doorbell.status();
  doorbell_ = doorbell.take();
  auto progress = Progress::create(this, &keys_->header().waiting, doorbell_->fd());
  if (!progress.ok()) return progress.status();
  progress_ = progress.take();
  auto listener = Listener::start(
      config.bind_host.empty() ? listen_host_ : config.bind_host, same_host_ != SameHost::kNo,
      [this](const Hello& hello, UniqueFd sock, bool is_unix, std::vector<UniqueFd> fds) {
        on_dial(hello, std::move(sock), is_unix, std::move(fds));
      },
      [this] { on_tick(); });
  if (!listener.ok()) return listener.status();
  listener_ = listener.take();
  return open_links(config.links);
}

Status SoftContext::open_links(const std::string& hosts) {
  std::size_t at = 0;
  while (at < hosts.size()) {
    std::size_t end = hosts.find(',', at);
    if (end == std::string::npos) end = hosts.size();
    const std::string host = hosts.substr(at, end - at);
    at = end + 1;
    if (host.empty()) continue;
    if (links_.size() == kMaxLinks) {
      return Status(Code::kInvalidArgument, "TENSORVERBS_LINKS names more than " +
                                                std::to_string(kMaxLinks) + " links");
    }
    const auto number = static_cast<std::uint32_t>(links_.size() + 1);
    auto listener = Listener::start(
        host, false,
        [this](const Hello& hello, UniqueFd sock, bool is_unix, std::vector<UniqueFd> fds) {
          on_dial(hello, std::move(sock), is_unix, std::move(fds));
        },
        [this, number] { on_link_tick(number); });
    if (!listener.ok()) {
      return Status(listener.status().code(), "TENSORVERBS_LINKS: cannot listen on link " +
                                                  std::to_string(links_.size() + 1) + " (" + host +
                                                  "): " + listener.status().message());
    }
    links_.push_back(SoftLinkAddress{host, listener.value()->tcp_port()});
    link_listeners_.push_back(listener.take());
    SoftEndpoint check;  // (a host an endpoint cannot carry is refused here, not at setup)
    check.qp_num = 1;
    check.tcp_host = listen_host_;
    check.tcp_port = 1;
    check.links = links_;
    const std::string why = validate_endpoint(check);
    if (!why.empty()) return Status(Code::kInvalidArgument, "TENSORVERBS_LINKS: " + why);
  }
  return ok_status();
}

// The last reference may go in one of the listeners' callbacks, on its thread.
SoftContext::~SoftContext() {
  for (auto& listener : link_listeners_) Listener::release(std::move(listener));
  Listener::release(std::move(listener_));
}

Result<std::shared_ptr<ProtectionDomain>> SoftContext::alloc_pd() {
  static std::atomic<std::uint32_t> next_pd{1};
  return std::shared_ptr<ProtectionDomain>(std::make_shared<SoftProtectionDomain>(
      std::static_pointer_cast<SoftContext>(shared_from_this()), next_pd.fetch_add(1)));
}

Result<std::shared_ptr<CompletionQueue>> SoftContext::create_cq(int depth) {
  if (depth < 1) return Status(Code::kInvalidArgument, "a completion queue needs a depth of 1 or more");
  return std::shared_ptr<CompletionQueue>(std::make_shared<SoftCompletionQueue>(
      std::static_pointer_cast<SoftContext>(shared_from_this()), depth));
}

Result<std::shared_ptr<QueuePair>> SoftContext::create_qp(
    const std::shared_ptr<ProtectionDomain>& pd, const std::shared_ptr<CompletionQueue>& send_cq,
    const std::shared_ptr<CompletionQueue>& recv_cq, QpCaps caps) {
  auto soft_pd = std::dynamic_pointer_cast<SoftProtectionDomain>(pd);
  if (!soft_pd || &soft_pd->context() != this) {
    return Status(Code::kInvalidArgument, "the protection domain belongs to another context");
  }
  auto scq = std::dynamic_pointer_cast<SoftCompletionQueue>(send_cq);
  auto rcq = std::dynamic_pointer_cast<SoftCompletionQueue>(recv_cq);
  if (!scq || !rcq || scq->context() != this || rcq->context() != this) {
    return Status(Code::kInvalidArgument, "the completion queue belongs to another context");
  }
  if (caps.max_send_wr < 1 || caps.max_recv_wr < 1 || caps.max_send_wr > device_.max_qp_wr ||
      caps.max_recv_wr > device_.max_qp_wr) {
    return Status(Code::kInvalidArgument, "queue depths must be 1 to " +
                                              std::to_string(device_.max_qp_wr));
  }
  auto qp = SoftQueuePair::create(std::static_pointer_cast<SoftContext>(shared_from_this()),
                                  std::move(soft_pd), std::move(scq), std::move(rcq), caps);
  if (!qp.ok()) return qp.status();
  return std::shared_ptr<QueuePair>(qp.take());
}

std::uint32_t SoftContext::new_qp_num() {
  for (;;) {
    const std::uint32_t n = next_qp_num_.fetch_add(1) & 0xFFFFFF;
    if (n != 0) return n;
  }
}

std::uint64_t SoftContext::add_qp(const Token& token, const std::weak_ptr<SoftQueuePair>& qp) {
  std::lock_guard lock(mu_);
  const std::uint64_t cookie = next_cookie_++;
  by_token_[token] = cookie;
  qps_[cookie] = qp;
  return cookie;
}

void SoftContext::remove_qp(const Token& token, std::uint64_t cookie) {
  std::lock_guard lock(mu_);
  by_token_.erase(token);
  qps_.erase(cookie);
  for (auto it = active_.begin(); it != active_.end(); ++it) {
    if (*it == cookie) {
      active_.erase(it);
      active_version_.fetch_add(1, std::memory_order_release);
      break;
    }
  }
}

std::uint64_t SoftContext::add_link(const std::weak_ptr<SoftQueuePair>& qp, std::uint32_t link) {
  std::lock_guard lock(mu_);
  const std::uint64_t cookie = next_cookie_++;
  link_streams_[cookie] = {qp, link};
  return cookie;
}

void SoftContext::remove_link(std::uint64_t cookie) {
  std::lock_guard lock(mu_);
  link_streams_.erase(cookie);
}

void SoftContext::activate(std::uint64_t cookie) {
  {
    std::lock_guard lock(mu_);
    active_.push_back(cookie);
    active_version_.fetch_add(1, std::memory_order_release);
  }
  progress_->kick();  // a sleeping driver picks the new rings up
}

void SoftContext::expect_dial(std::uint64_t cookie, std::chrono::steady_clock::time_point deadline) {
  {
    std::lock_guard lock(mu_);
    dial_deadlines_.emplace(deadline, cookie);
  }
  listener_->schedule(deadline);
}

std::shared_ptr<SoftQueuePair> SoftContext::find(std::uint64_t cookie) {
  std::lock_guard lock(mu_);
  const auto it = qps_.find(cookie);
  return it == qps_.end() ? nullptr : it->second.lock();
}

void SoftContext::redial_at(std::uint64_t cookie, std::uint32_t link,
                            std::chrono::steady_clock::time_point when) {
  {
    std::lock_guard lock(mu_);
    redials_.at(link - 1).emplace(when, cookie);
  }
  link_listeners_.at(link - 1)->schedule(when);
}

std::vector<std::uint64_t> SoftContext::take_due(Deadlines& deadlines,
                                                 std::chrono::steady_clock::time_point* next) {
  std::vector<std::uint64_t> due;
  const auto now = std::chrono::steady_clock::now();
  while (!deadlines.empty() && deadlines.begin()->first <= now) {
    due.push_back(deadlines.begin()->second);
    deadlines.erase(deadlines.begin());
  }
  *next = deadlines.empty() ? std::chrono::steady_clock::time_point::max() : deadlines.begin()->first;
  return due;
}

void SoftContext::on_tick() {
  // held to the end: a queue pair dropped below may hold the last other reference
  const std::shared_ptr<Context> self = weak_from_this().lock();
  if (!self) return;  // being destroyed
  std::vector<std::uint64_t> due;
  std::chrono::steady_clock::time_point next;
  {
    std::lock_guard lock(mu_);
    due = take_due(dial_deadlines_, &next);
  }
  for (std::uint64_t cookie : due) {
    if (auto qp = find(cookie)) guarded(*qp, [&] { qp->dial_deadline_passed(); });
  }
  if (next != std::chrono::steady_clock::time_point::max()) listener_->schedule(next);
}

void SoftContext::on_link_tick(std::uint32_t link) {
  const std::shared_ptr<Context> self = weak_from_this().lock();  // as in on_tick
  if (!self) return;
  std::vector<std::uint64_t> due;
  std::chrono::steady_clock::time_point next;
  {
    std::lock_guard lock(mu_);
    due = take_due(redials_.at(link - 1), &next);
  }
  for (std::uint64_t cookie : due) {
    std::shared_ptr<SoftQueuePair> qp = find(cookie);
    if (!qp) continue;
    // a dial waits up to kLinkDialTimeout: on a thread of its own, so that this listener
    // goes on taking greetings meanwhile (its peer's own redials of the link among them)
    auto redial = [self, qp, link] { guarded(*qp, [&] { qp->redial_link(link); }); };
    try {
      std::thread(redial).detach();
    } catch (const std::system_error&) {  // no thread to be had: here, then
      redial();
    }
  }
  if (next != std::chrono::steady_clock::time_point::max()) link_listeners_.at(link - 1)->schedule(next);
}

void SoftContext::on_dial(const Hello& hello, UniqueFd sock, bool is_unix,
                          std::vector<UniqueFd> fds) {
  const std::shared_ptr<Context> self = weak_from_this().lock();  // as in on_tick
  if (!self) return;
  std::shared_ptr<SoftQueuePair> qp;
  {
    std::lock_guard lock(mu_);
    const auto it = by_token_.find(hello.target);
    if (it != by_token_.end()) {
      const auto found = qps_.find(it->second);
      if (found != qps_.end()) qp = found->second.lock();
    }
  }
  if (is_unix && same_host_ == SameHost::kNo) {  // (another user's: refused at accept)
    Hello reply = hello;
    reply.kind = HelloKind::kReply;
    reply.status = HelloStatus::kNotSameHost;
    reply.fd_count = 0;
    (void)send_hello(sock.get(), reply, nullptr, 0);
    return;
  }
  if (!qp || (is_unix && fds.size() != kHelloFds)) {
    Hello reply = hello;
    reply.kind = HelloKind::kReply;
    reply.status = qp ? HelloStatus::kBadDescriptors : HelloStatus::kNoQueuePair;
    reply.fd_count = 0;
    reply.pd = 0;
    (void)send_hello(sock.get(), reply, nullptr, 0);
    return;
  }
  guarded(*qp, [&] { qp->on_dial(hello, std::move(sock), is_unix, std::move(fds)); });
}

Result<std::shared_ptr<PeerMemory>> SoftContext::peer_memory(UniqueFd table_fd,
                                                             UniqueFd doorbell_fd) {
  struct stat st {};
  if (::fstat(table_fd.get(), &st) != 0) {
    return Status(Code::kInvalidArgument, "the peer's key table is not a file");
  }
  const std::pair<std::uint64_t, std::uint64_t> id{static_cast<std::uint64_t>(st.st_dev),
                                                   static_cast<std::uint64_t>(st.st_ino)};
  std::lock_guard lock(mu_);
  const auto it = peers_.find(id);
  if (it != peers_.end()) {
    if (auto peer = it->second.lock()) return peer;  // the duplicate descriptors close here
  }
  auto table = KeyTableView::map(std::move(table_fd));
  if (!table.ok()) return table.status();
  auto doorbell = PeerDoorbell::adopt(std::move(doorbell_fd), table.value());
  if (!doorbell.ok()) return doorbell.status();
  auto peer = std::make_shared<PeerMemory>(table.take(), doorbell.take());
  peers_[id] = peer;
  return peer;
}

// ----------------------------------------------------------------------- progress hooks
void SoftContext::refresh_active() {
  const std::uint64_t version = active_version_.load(std::memory_order_acquire);
  if (version == driver_version_) return;
  std::lock_guard lock(mu_);
  driver_active_.clear();
  for (std::uint64_t cookie : active_) {
    const auto it = qps_.find(cookie);
    if (it != qps_.end()) driver_active_.push_back(it->second);
  }
  driver_version_ = version;
}

bool SoftContext::poll_memory() {
  if (!run_guarded([&] { refresh_active(); }, [](const char*) {})) return false;  // next time
  bool did = false;
  for (const auto& weak : driver_active_) {
    if (auto qp = weak.lock()) guarded(*qp, [&] { did |= qp->poll_memory(); });
  }
  return did;
}

bool SoftContext::memory_ready() {
  if (!run_guarded([&] { refresh_active(); }, [](const char*) {})) return false;
  for (const auto& weak : driver_active_) {
    if (auto qp = weak.lock(); qp && qp->memory_ready()) return true;
  }
  return false;
}

void SoftContext::on_event(std::uint64_t cookie, std::uint32_t events) {
  if (auto qp = find(cookie)) {
    guarded(*qp, [&] { qp->on_socket(events); });
    return;
  }
  std::shared_ptr<SoftQueuePair> qp;
  std::uint32_t link = 0;
  {
    std::lock_guard lock(mu_);
    const auto it = link_streams_.find(cookie);
    if (it == link_streams_.end()) return;
    qp = it->second.first.lock();
    link = it->second.second;
  }
  if (qp) guarded(*qp, [&] { qp->on_link_socket(link, events); });
}

}  // namespace tensorverbs::verbs::soft
