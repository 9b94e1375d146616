// The soft provider's listener thread against what its callbacks throw: a greeting whose
// handling throws is dropped (its connection closed), and the thread goes on serving the
// next dials and its ticks; nothing ends the process. And against whoever reaches its
// sockets: connections that never greet, from one address or another user, do not shut
// out the greetings of others.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>

#include "verbs/soft/listener.h"
#include "verbs/soft/wire.h"

namespace tensorverbs::verbs::soft {
namespace {

// A TCP connection from 127.0.0.`from` to the listener at 127.0.0.1:`port`.
UniqueFd dial_tcp(std::uint16_t port, int from = 1) {
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK - 1 + static_cast<std::uint32_t>(from));
  EXPECT_EQ(::bind(sock.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  return sock;
}

// A connection to the listener's abstract Unix socket `name`.
UniqueFd dial_unix(const std::string& name) {
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  name.copy(addr.sun_path + 1, name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  EXPECT_EQ(::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), len), 0);
  return sock;
}

// Greets over `sock` (no descriptors attached); the socket.
UniqueFd send_greeting(UniqueFd sock) {
  Hello hello;
  hello.target[0] = 1;
  hello.dialer[0] = 2;
  std::uint8_t bytes[kHelloBytes];
  encode_hello(hello, bytes);
  EXPECT_EQ(::send(sock.get(), bytes, sizeof(bytes), MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof(bytes)));
  return sock;
}

// Dials the listener at 127.0.0.1:`port` and greets it; the connected socket.
UniqueFd greet(std::uint16_t port) { return send_greeting(dial_tcp(port)); }

// More silent connections than the listener ever holds greetings for.
constexpr int kFlood = 400;

// Counts the calls of the listener's callbacks; the first of each throws.
class Calls {
 public:
  void dialed() { count(&dials_, "the dial handler broke"); }
  void ticked() { count(&ticks_, "the tick handler broke"); }
  // Whether `dials` dials and `ticks` ticks were seen within 30 s.
  bool reached(int dials, int ticks) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30),
                        [&] { return dials_ >= dials && ticks_ >= ticks; });
  }

 private:
  void count(int* calls, const char* what) {
    std::lock_guard lock(mu_);
    ++*calls;
    cv_.notify_all();
    if (*calls == 1) throw std::runtime_error(what);
  }
  std::mutex mu_;
  std::condition_variable cv_;
  int dials_ = 0, ticks_ = 0;
};

TEST(SoftListener, WhatItsCallbacksThrowDropsThatCallOnly) {
  Calls calls;
  auto listener = Listener::start(
      "127.0.0.1", false,
      [&](const Hello&, UniqueFd, bool, std::vector<UniqueFd>) { calls.dialed(); },
      [&] { calls.ticked(); });
  ASSERT_TRUE(listener.ok()) << listener.status().message();
  Listener& l = *listener.value();

  UniqueFd first = greet(l.tcp_port());
  ASSERT_TRUE(calls.reached(1, 0));
  char byte;
  EXPECT_EQ(::recv(first.get(), &byte, 1, 0), 0);  // dropped: closed
  UniqueFd second = greet(l.tcp_port());
  EXPECT_TRUE(calls.reached(2, 0));

  l.schedule(Listener::Clock::now());
  ASSERT_TRUE(calls.reached(2, 1));
  l.schedule(Listener::Clock::now());
  EXPECT_TRUE(calls.reached(2, 2));
}

// A listener whose greetings are counted.
class Greeted {
 public:
  // `greeting_timeout`: how long a connection may take to greet (the listener's own by default)
  explicit Greeted(bool with_unix, Listener::Clock::duration greeting_timeout = Listener::kGreetingTimeout) {
    auto started = Listener::start(
        "127.0.0.1", with_unix,
        [this](const Hello&, UniqueFd, bool, std::vector<UniqueFd>) {
          std::lock_guard lock(mu_);
          ++greetings_;
          cv_.notify_all();
        },
        [] {}, greeting_timeout);
    EXPECT_TRUE(started.ok()) << started.status().message();
    if (started.ok()) listener_ = started.take();
  }
  Listener& listener() { return *listener_; }
  // Whether `count` greetings were handed on within 30 s.
  bool reached(int count) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(30), [&] { return greetings_ >= count; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int greetings_ = 0;
  std::unique_ptr<Listener> listener_;
};

TEST(SoftListener, ConnectionsThatNeverGreetDoNotShutOutAGreetingFromTheSameAddress) {
  Greeted greeted(false);
  ASSERT_NE(greeted.listener().tcp_port(), 0);
  std::vector<UniqueFd> silent;
  for (int i = 0; i < kFlood; ++i) silent.push_back(dial_tcp(greeted.listener().tcp_port()));
  UniqueFd sock = greet(greeted.listener().tcp_port());
  EXPECT_TRUE(greeted.reached(1)) << "a greeting after " << kFlood
                                  << " silent connections from its address was not taken";
}

TEST(SoftListener, ConnectionsThatNeverGreetFromOneAddressDoNotDropAnotherAddresssGreetingUnderWay) {
  // the slow greeting may take as long as the flood takes (seconds on a busy machine)
  Greeted greeted(false, std::chrono::minutes(2));
  const std::uint16_t port = greeted.listener().tcp_port();
  UniqueFd slow = dial_tcp(port, 3);  // connected; greets only after the flood
  std::vector<UniqueFd> silent;
  for (int i = 0; i < kFlood; ++i) silent.push_back(dial_tcp(port, 2));
  UniqueFd greeted_late = send_greeting(std::move(slow));
  EXPECT_TRUE(greeted.reached(1)) << "the greeting of 127.0.0.3 was dropped for 127.0.0.2's "
                                  << kFlood << " silent connections";
}

TEST(SoftListener, AnotherUsersConnectionsToTheUnixSocketDoNotShutOutTheOwnersGreeting) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root, to dial as another user";
  Greeted greeted(true);
  const std::string name = greeted.listener().unix_name();
  ASSERT_FALSE(name.empty());
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  name.copy(addr.sun_path + 1, name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  struct Killed {  // the child, killed and reaped however the test ends
    pid_t pid;
    ~Killed() {
      if (pid <= 0) return;
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
  } child{::fork()};
  ASSERT_GE(child.pid, 0);
  if (child.pid == 0) {  // another user: connects, says nothing, holds on until it is killed
    if (::setresgid(65534, 65534, 65534) != 0 || ::setresuid(65534, 65534, 65534) != 0) ::_exit(2);
    int connected = 0;
    for (int i = 0; i < kFlood; ++i) {
      const int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (::connect(sock, reinterpret_cast<const sockaddr*>(&addr), len) == 0) ++connected;
    }
    const char done = connected == kFlood ? 'y' : 'n';
    (void)!::write(ready[1], &done, 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char done = 0;
  ASSERT_EQ(::read(ready[0], &done, 1), 1);
  EXPECT_EQ(done, 'y') << "the other user could not connect " << kFlood << " times";
  UniqueFd sock = send_greeting(dial_unix(name));
  EXPECT_TRUE(greeted.reached(1)) << "the owner's greeting was shut out by another user's "
                                  << kFlood << " silent connections";
  ::close(ready[0]);
}

}  // namespace
}  // namespace tensorverbs::verbs::soft
