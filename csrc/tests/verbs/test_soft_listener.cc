// The soft provider's listener thread against what its callbacks throw: a greeting whose
// handling throws is dropped (its connection closed), and the thread goes on serving the
// next dials and its ticks; nothing ends the process.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>

#include "verbs/soft/listener.h"
#include "verbs/soft/wire.h"

namespace tensorverbs::verbs::soft {
namespace {

// Dials the listener at 127.0.0.1:`port` and greets it; the connected socket.
UniqueFd greet(std::uint16_t port) {
  UniqueFd sock(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(sock.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  Hello hello;
  hello.target[0] = 1;
  hello.dialer[0] = 2;
  std::uint8_t bytes[kHelloBytes];
  encode_hello(hello, bytes);
  EXPECT_EQ(::send(sock.get(), bytes, sizeof(bytes), MSG_NOSIGNAL),
            static_cast<ssize_t>(sizeof(bytes)));
  return sock;
}

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

}  // namespace
}  // namespace tensorverbs::verbs::soft
