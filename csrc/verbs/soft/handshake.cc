#include "verbs/soft/handshake.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "verbs/soft/fd_passing.h"

namespace tensorverbs::verbs::soft {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kUnixBuffer = 4 << 20;

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return left.count() <= 0 ? 0 : static_cast<int>(left.count());
}

// Waits for `events` on `sock`; an error text when it does not come in time.
std::string wait_for(int sock, short events, Clock::time_point deadline) {
  for (;;) {
    pollfd p{sock, events, 0};
    const int n = ::poll(&p, 1, ms_left(deadline));
    if (n > 0) return "";
    if (n == 0) return "timed out";
    if (errno != EINTR) return errno_text(errno);
  }
}

std::string connect_nonblocking(int sock, const sockaddr* addr, socklen_t len,
                                Clock::time_point deadline) {
  if (::connect(sock, addr, len) == 0) return "";
  if (errno != EINPROGRESS && errno != EAGAIN) return errno_text(errno);
  std::string why = wait_for(sock, POLLOUT, deadline);
  if (!why.empty()) return why;
  int err = 0;
  socklen_t err_len = sizeof(err);
  ::getsockopt(sock, SOL_SOCKET, SO_ERROR, &err, &err_len);
  return err == 0 ? "" : errno_text(err);
}

// Sends the greeting and reads the reply (with its descriptors).
Result<Dialed> greet(UniqueFd sock, bool is_unix, const Token& target, const Token& own,
                     const LocalFds& local, Clock::time_point deadline, const std::string& where,
                     HelloKind kind = HelloKind::kHello) {
  auto fail = [&](const std::string& why) {
    return Status(Code::kUnavailable, "cannot reach the peer's queue pair at " + where + ": " + why);
  };
  Hello hello;
  hello.kind = kind;
  hello.target = target;
  hello.dialer = own;
  hello.fd_count = is_unix ? kHelloFds : 0;
  hello.pd = local.pd;
  const int fds[3] = {local.key_table, local.doorbell, local.ring};
  Status sent = send_hello(sock.get(), hello, fds, is_unix ? 3 : 0);
  if (!sent.ok()) return fail(sent.message());
  std::uint8_t reply_bytes[kHelloBytes];
  std::size_t got = 0;
  Dialed dialed;
  while (got < kHelloBytes) {
    std::string why = wait_for(sock.get(), POLLIN, deadline);
    if (!why.empty()) return fail("no answer to the greeting: " + why);
    iovec iov{reply_bytes + got, kHelloBytes - got};
    const ssize_t n = recv_with_fds(sock.get(), &iov, 1, &dialed.fds, MSG_DONTWAIT);
    if (n == -EAGAIN || n == -EINTR) continue;
    if (n < 0) return fail(errno_text(n));
    if (n == 0) return fail("the peer closed the connection during the greeting");
    got += static_cast<std::size_t>(n);
  }
  auto reply = decode_hello(reply_bytes);
  if (!reply.ok()) return fail(reply.status().message());
  const Hello& r = reply.value();
  if (r.kind != HelloKind::kReply || r.target != target || r.dialer != own) {
    return fail("the answer to the greeting is not a matching reply");
  }
  if (r.status != HelloStatus::kOk) {
    const Code code = r.status == HelloStatus::kNotSameHost ? Code::kPermissionDenied
                                                             : Code::kUnavailable;
    return Status(code, "the peer's queue pair at " + where + " refused the connection: " +
                            to_string(r.status));
  }
  if (dialed.fds.size() != (is_unix ? std::size_t{kHelloFds} : 0) ||
      r.fd_count != (is_unix ? kHelloFds : 0)) {
    return fail("the reply carried " + std::to_string(dialed.fds.size()) + " descriptors");
  }
  dialed.sock = std::move(sock);
  dialed.is_unix = is_unix;
  dialed.peer_pd = r.pd;
  tune_stream(dialed.sock.get(), is_unix);
  return dialed;
}

Result<Dialed> dial_unix(const SoftEndpoint& remote, const Token& own, const LocalFds& local) {
  const std::string where = "unix:@" + remote.unix_name;
  const auto deadline = Clock::now() + kHandshakeTimeout;
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock.valid()) return Status(Code::kUnavailable, "cannot create a Unix socket: " + errno_text(errno));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, remote.unix_name.data(), remote.unix_name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + remote.unix_name.size());
  std::string why = connect_nonblocking(sock.get(), reinterpret_cast<sockaddr*>(&addr), len, deadline);
  if (!why.empty()) {
    return Status(Code::kUnavailable, "cannot reach the peer's queue pair at " + where + ": " + why);
  }
  if (!same_user(sock.get())) {
    return Status(Code::kPermissionDenied,
                  "the peer at " + where + " runs as another user: no shared memory with it");
  }
  return greet(std::move(sock), true, remote.token, own, local, deadline, where);
}

std::string tcp_where(const std::string& host, std::uint16_t port) {
  return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

// Connects a TCP socket to host:port (from `local_host`'s address when not empty) by
// `deadline`; `where` names the peer in the errors.
Result<UniqueFd> connect_tcp(const std::string& host, std::uint16_t port, const std::string& local_host,
                             Clock::time_point deadline, const std::string& where) {
  auto unreachable = [&](const std::string& why) {
    return Status(Code::kUnavailable, "cannot reach the peer's queue pair at " + where + ": " + why);
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  int rc = ::getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found);
  if (rc != 0) return unreachable(::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> remote(found, &::freeaddrinfo);
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> local(nullptr, &::freeaddrinfo);
  if (!local_host.empty()) {
    hints.ai_flags = AI_NUMERICSERV;
    addrinfo* mine = nullptr;
    rc = ::getaddrinfo(local_host.c_str(), "0", &hints, &mine);
    if (rc != 0) return unreachable("this side's address " + local_host + ": " + ::gai_strerror(rc));
    local.reset(mine);
  }
  std::string why = "no address";
  for (addrinfo* ai = remote.get(); ai != nullptr; ai = ai->ai_next) {
    UniqueFd sock(::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                           ai->ai_protocol));
    if (!sock.valid()) {
      why = errno_text(errno);
      continue;
    }
    if (local) {
      const addrinfo* from = local.get();
      while (from != nullptr && from->ai_family != ai->ai_family) from = from->ai_next;
      if (from == nullptr) {
        why = "this side's address " + local_host + " is of another family";
        continue;
      }
      if (::bind(sock.get(), from->ai_addr, from->ai_addrlen) != 0) {
        why = "cannot bind to " + local_host + ": " + errno_text(errno);
        continue;
      }
    }
    why = connect_nonblocking(sock.get(), ai->ai_addr, ai->ai_addrlen, deadline);
    if (why.empty()) return sock;
  }
  return unreachable(why);
}

Result<Dialed> dial_tcp(const SoftEndpoint& remote, const Token& own, const LocalFds& local) {
  const std::string where = tcp_where(remote.tcp_host, remote.tcp_port);
  const auto deadline = Clock::now() + kHandshakeTimeout;
  auto sock = connect_tcp(remote.tcp_host, remote.tcp_port, "", deadline, where);
  if (!sock.ok()) return sock.status();
  LocalFds tcp_side;
  tcp_side.pd = local.pd;
  return greet(sock.take(), false, remote.token, own, tcp_side, deadline, where);
}

}  // namespace

Result<Dialed> dial(const SoftEndpoint& remote, const Token& own, SameHost policy,
                    const LocalFds& local) {
  if (policy != SameHost::kNo) {
    if (remote.unix_name.empty()) {
      if (policy == SameHost::kYes) {
        return Status(Code::kUnavailable,
                      "TENSORVERBS_SAME_HOST=yes, but the peer offers no Unix socket (its "
                      "setting is '" + std::string(to_string(remote.same_host)) + "')");
      }
    } else {
      auto dialed = dial_unix(remote, own, local);
      if (dialed.ok() || policy == SameHost::kYes) {
        if (!dialed.ok()) {
          return Status(dialed.status().code(),
                        dialed.status().message() + " (TENSORVERBS_SAME_HOST=yes)");
        }
        return dialed;
      }
      // kAuto: another host (or namespace, or user): over TCP
    }
  }
  return dial_tcp(remote, own, local);
}

Result<Dialed> dial_link(const std::string& local_host, const SoftLinkAddress& remote,
                         const Token& target, const Token& own, std::uint32_t link) {
  const std::string where = tcp_where(remote.tcp_host, remote.tcp_port) + " (link " +
                            std::to_string(link) + ", from " + local_host + ")";
  const auto deadline = Clock::now() + kLinkDialTimeout;
  auto sock = connect_tcp(remote.tcp_host, remote.tcp_port, local_host, deadline, where);
  if (!sock.ok()) return sock.status();
  LocalFds tcp_side;
  tcp_side.pd = link;
  return greet(sock.take(), false, target, own, tcp_side, deadline, where, HelloKind::kLink);
}

Status send_hello(int sock, const Hello& hello, const int* fds, int nfds) {
  std::uint8_t bytes[kHelloBytes];
  encode_hello(hello, bytes);
  iovec iov{bytes, kHelloBytes};
  const ssize_t n = send_with_fds(sock, &iov, 1, fds, nfds, MSG_DONTWAIT);
  if (n == static_cast<ssize_t>(kHelloBytes)) return ok_status();
  return Status(Code::kUnavailable, n < 0 ? "cannot send the greeting: " + errno_text(n)
                                          : std::string("the greeting did not fit the socket"));
}

bool same_user(int sock) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == ::geteuid();
}

void tune_stream(int sock, bool is_unix) {
  const int flags = ::fcntl(sock, F_GETFL);
  ::fcntl(sock, F_SETFL, flags | O_NONBLOCK);
  if (is_unix) {
    ::setsockopt(sock, SOL_SOCKET, SO_SNDBUF, &kUnixBuffer, sizeof(kUnixBuffer));
    ::setsockopt(sock, SOL_SOCKET, SO_RCVBUF, &kUnixBuffer, sizeof(kUnixBuffer));
    return;
  }
  const int one = 1, idle = 10, interval = 5, count = 3;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  ::setsockopt(sock, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  ::setsockopt(sock, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(sock, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(sock, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

void tune_link_stream(int sock) {
  tune_stream(sock, false);
  const auto timeout = static_cast<unsigned>(kLinkUserTimeout.count());
  ::setsockopt(sock, IPPROTO_TCP, TCP_USER_TIMEOUT, &timeout, sizeof(timeout));
}

}  // namespace tensorverbs::verbs::soft
