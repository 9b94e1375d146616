#include "verbs/soft/listener.h"

#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/thread_guard.h"
#include "core/thread_name.h"
#include "verbs/soft/doorbell.h"
#include "verbs/soft/fd_passing.h"
#include "verbs/soft/handshake.h"

namespace tensorverbs::verbs::soft {
namespace {

// Connections whose greeting is still to come: at most this many in all and from one
// source (an IPv4 address, an IPv6 /64, this user over the Unix socket). A new connection
// beyond either bound closes the oldest of them (of its source first): whoever floods the
// port only ever holds back its own greetings, or those slower than its whole flood.
constexpr std::size_t kMaxPendingGreetings = 256;
constexpr std::size_t kGreetingsPerSource = 16;

// Where a connection comes from, as far as bounding greetings goes.
std::string source_of(const sockaddr_storage& from, bool is_unix) {
  if (is_unix) return "unix";
  if (from.ss_family == AF_INET) {
    const auto& in = reinterpret_cast<const sockaddr_in&>(from);
    return std::string("4") + std::string(reinterpret_cast<const char*>(&in.sin_addr), 4);
  }
  if (from.ss_family == AF_INET6) {
    const auto& in6 = reinterpret_cast<const sockaddr_in6&>(from);
    return std::string("6") + std::string(reinterpret_cast<const char*>(&in6.sin6_addr), 8);
  }
  return "?";
}

Result<UniqueFd> listen_tcp(const std::string& host, std::uint16_t* port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), "0", &hints, &found);
  if (rc != 0) {
    return Status(Code::kInvalidArgument, "cannot listen on '" + host + "': " + ::gai_strerror(rc));
  }
  std::string why = "no address";
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    UniqueFd sock(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                           ai->ai_protocol));
    if (!sock.valid()) {
      why = errno_text(errno);
      continue;
    }
    const int one = 1;
    ::setsockopt(sock.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(sock.get(), ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(sock.get(), 128) != 0) {
      why = errno_text(errno);
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(sock.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    *port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                               : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    ::freeaddrinfo(found);
    return sock;
  }
  ::freeaddrinfo(found);
  return Status(Code::kUnavailable, "cannot listen on '" + host + "': " + why);
}

Result<UniqueFd> listen_unix(std::string* name) {
  std::uint64_t random[2] = {0, 0};
  if (::getrandom(random, sizeof(random), 0) != sizeof(random)) {
    return Status(Code::kUnavailable, "cannot draw a random socket name");
  }
  char text[64];
  std::snprintf(text, sizeof(text), "tensorverbs-soft-%016" PRIx64 "%016" PRIx64, random[0], random[1]);
  *name = text;
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, name->data(), name->size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name->size());
  if (!sock.valid() || ::bind(sock.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::listen(sock.get(), 128) != 0) {
    return Status(Code::kUnavailable, "cannot listen on a Unix socket: " + errno_text(errno));
  }
  return sock;
}

}  // namespace

Result<std::unique_ptr<Listener>> Listener::start(const std::string& host, bool with_unix,
                                                  OnDial on_dial, OnTick on_tick,
                                                  Clock::duration greeting_timeout) {
  std::unique_ptr<Listener> listener(new Listener());
  auto tcp = listen_tcp(host, &listener->tcp_port_);
  if (!tcp.ok()) return tcp.status();
  listener->tcp_ = tcp.take();
  if (with_unix) {
    auto unix_sock = listen_unix(&listener->unix_name_);
    if (!unix_sock.ok()) return unix_sock.status();
    listener->unix_ = unix_sock.take();
  }
  listener->stop_.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!listener->stop_.valid()) {
    return Status(Code::kResourceExhausted, "cannot create an eventfd: " + errno_text(errno));
  }
  listener->on_dial_ = std::move(on_dial);
  listener->on_tick_ = std::move(on_tick);
  listener->greeting_timeout_ = greeting_timeout;
  listener->thread_ = std::thread([l = listener.get()] {
    name_thread("tv-listener");
    l->run();
  });
  return listener;
}

Listener::~Listener() {
  {
    std::lock_guard lock(mu_);
    next_tick_ = Clock::time_point::min();  // also means: stop
  }
  const std::uint64_t one = 1;
  while (::write(stop_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
}

void Listener::release(std::unique_ptr<Listener> listener) {
  if (!listener) return;
  if (std::this_thread::get_id() != listener->thread_.get_id()) return;  // ~Listener joins
  Listener* self = listener.release();
  std::lock_guard lock(self->mu_);
  self->next_tick_ = Clock::time_point::min();
  self->released_ = true;
}

bool Listener::stopping() {
  std::lock_guard lock(mu_);
  return next_tick_ == Clock::time_point::min();
}

void Listener::schedule(Clock::time_point when) {
  {
    std::lock_guard lock(mu_);
    if (when >= next_tick_) return;
    next_tick_ = when;
  }
  const std::uint64_t one = 1;
  while (::write(stop_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void Listener::run() {
  std::vector<pollfd> fds;
  bool more = true;
  while (more) {
    // what runs out of memory here drops the greetings under way (their dialers retry)
    run_guarded([&] { more = serve(fds); }, [this](const char*) { pending_.clear(); });
  }
  bool released = false;
  {
    std::lock_guard lock(mu_);
    released = released_;
  }
  if (released) {  // released from a callback of this thread: nothing else refers to it
    thread_.detach();
    delete this;
  }
}

bool Listener::serve(std::vector<pollfd>& fds) {
  Clock::time_point tick;
  {
    std::lock_guard lock(mu_);
    tick = next_tick_;
  }
  if (tick == Clock::time_point::min()) return false;
  const Clock::time_point now = Clock::now();
  if (tick <= now) {
    {
      std::lock_guard lock(mu_);
      next_tick_ = Clock::time_point::max();
    }
    run_guarded(on_tick_, [](const char*) {});  // later ticks come all the same
    return true;
  }
  Clock::time_point wake = tick;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->deadline <= now) {
      it = pending_.erase(it);  // too slow to greet: dropped
    } else {
      if (it->deadline < wake) wake = it->deadline;
      ++it;
    }
  }
  fds.clear();
  fds.push_back({stop_.get(), POLLIN, 0});
  fds.push_back({tcp_.get(), POLLIN, 0});
  fds.push_back({unix_.valid() ? unix_.get() : -1, POLLIN, 0});
  for (const Pending& p : pending_) fds.push_back({p.sock.get(), POLLIN, 0});
  int timeout = -1;
  if (wake != Clock::time_point::max()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
    timeout = static_cast<int>(left + 1);
  }
  const int n = ::poll(fds.data(), fds.size(), timeout);
  if (n <= 0) return true;
  if (fds[0].revents != 0) drain_eventfd(stop_.get());
  // greetings first (indices shift as they finish), then new connections
  for (std::size_t i = fds.size(); i-- > 3;) {
    if (fds[i].revents == 0) continue;
    if (stopping()) return false;  // a greeting's callback destroyed the context
    bool done = false;
    Pending& p = pending_[i - 3];
    read_greeting(p, &done);
    if (done) pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i - 3));
  }
  if (stopping()) return false;
  if (fds[1].revents != 0) accept_from(tcp_.get(), false);
  if (fds[2].revents != 0) accept_from(unix_.get(), true);
  return true;
}

void Listener::accept_from(int server, bool is_unix) {
  for (;;) {
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    UniqueFd sock(::accept4(server, reinterpret_cast<sockaddr*>(&from), &from_len,
                            SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!sock.valid()) return;  // EAGAIN, or a connection that went away
    // another user's dials are answered and closed at once, holding nothing (a dialer of
    // ours finds so itself and does not greet): the abstract socket has no permissions
    if (is_unix && !same_user(sock.get())) {
      Hello refusal;
      refusal.kind = HelloKind::kReply;
      refusal.status = HelloStatus::kNotSameHost;
      (void)send_hello(sock.get(), refusal, nullptr, 0);
      continue;
    }
    Pending p;
    p.sock = std::move(sock);
    p.is_unix = is_unix;
    p.source = source_of(from, is_unix);
    p.deadline = Clock::now() + greeting_timeout_;
    std::size_t same = 0;
    auto oldest_same = pending_.end();
    for (auto it = pending_.begin(); it != pending_.end(); ++it) {
      if (it->source != p.source) continue;
      if (same++ == 0) oldest_same = it;
    }
    if (same >= kGreetingsPerSource) {
      pending_.erase(oldest_same);
    } else if (pending_.size() >= kMaxPendingGreetings) {
      pending_.erase(pending_.begin());
    }
    pending_.push_back(std::move(p));
  }
}

void Listener::read_greeting(Pending& p, bool* done) {
  iovec iov{p.bytes + p.got, kHelloBytes - p.got};
  ssize_t n;
  if (p.is_unix) {
    n = recv_with_fds(p.sock.get(), &iov, 1, &p.fds, MSG_DONTWAIT);
  } else {
    n = ::recv(p.sock.get(), iov.iov_base, iov.iov_len, MSG_DONTWAIT);
    if (n < 0) n = -errno;
  }
  if (n == -EAGAIN || n == -EINTR) return;
  if (n <= 0 || p.fds.size() > kHelloFds) {
    *done = true;  // closed, broken, or more descriptors than a greeting has: dropped
    return;
  }
  p.got += static_cast<std::size_t>(n);
  if (p.got < kHelloBytes) return;
  *done = true;
  auto hello = decode_hello(p.bytes);
  if (!hello.ok() || hello.value().kind == HelloKind::kReply ||
      (!p.is_unix && hello.value().fd_count != 0) || p.fds.size() != hello.value().fd_count) {
    return;  // not a greeting: dropped
  }
  // a greeting whose handling throws is dropped: its socket closes as the call unwinds
  run_guarded([&] { on_dial_(hello.value(), std::move(p.sock), p.is_unix, std::move(p.fds)); },
              [](const char*) {});
}

}  // namespace tensorverbs::verbs::soft
