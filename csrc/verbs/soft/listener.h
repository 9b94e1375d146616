// Listener: the sockets a context is dialed on (TCP on the listen host; an abstract Unix
// socket unless same_host is "no") and the one thread that accepts and reads greetings.
// Greetings are read without blocking, several at once, each within a few seconds of its
// connection, and a bounded number at a time from any one source (listener.cc); another
// user's connections to the Unix socket are closed as they come. A complete greeting goes
// to on_dial (which refuses one that does not name a queue pair by its token: the tokens
// are random, and learned only from the control plane). The thread also calls on_tick at the times given to
// schedule() (the context's deadlines). It is never on the data path. What a callback
// throws drops that call (a greeting's connection closes); the thread carries on.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "verbs/soft/unique_fd.h"
#include "verbs/soft/wire.h"

namespace tensorverbs::verbs::soft {

class Listener {
 public:
  using Clock = std::chrono::steady_clock;
  // A greeting arrived whole: the socket (blocking mode unspecified) and its descriptors.
  using OnDial = std::function<void(const Hello& hello, UniqueFd sock, bool is_unix,
                                    std::vector<UniqueFd> fds)>;
  using OnTick = std::function<void()>;

  // How long a connection may take to greet once accepted: a dialer greets as it connects.
  static constexpr std::chrono::seconds kGreetingTimeout{3};

  static Result<std::unique_ptr<Listener>> start(const std::string& host, bool with_unix,
                                                 OnDial on_dial, OnTick on_tick,
                                                 Clock::duration greeting_timeout = kGreetingTimeout);
  ~Listener();  // stops the thread and closes the sockets
  // Destroys `listener`, also from within one of its own callbacks (whose context is being
  // destroyed there): then it calls back no more, and its thread deletes it on leaving the
  // callback instead of joining itself.
  static void release(std::unique_ptr<Listener> listener);
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  const std::string& unix_name() const { return unix_name_; }  // "" without one
  std::uint16_t tcp_port() const { return tcp_port_; }
  // Calls on_tick at `when` (or soon after).
  void schedule(Clock::time_point when);

 private:
  Listener() = default;
  void run();
  bool serve(std::vector<pollfd>& fds);  // one pass; false once stopping
  bool stopping();
  void accept_from(int server, bool is_unix);

  struct Pending {
    UniqueFd sock;
    bool is_unix = false;
    std::string source;  // where it comes from (listener.cc's source_of)
    std::uint8_t bytes[kHelloBytes] = {};
    std::size_t got = 0;
    std::vector<UniqueFd> fds;
    Clock::time_point deadline;
  };
  void read_greeting(Pending& pending, bool* done);

  UniqueFd tcp_, unix_, stop_;
  std::string unix_name_;
  std::uint16_t tcp_port_ = 0;
  OnDial on_dial_;
  OnTick on_tick_;
  Clock::duration greeting_timeout_ = kGreetingTimeout;
  std::vector<Pending> pending_;
  std::mutex mu_;
  Clock::time_point next_tick_ = Clock::time_point::max();  // min(): stopping
  bool released_ = false;  // by release() on this thread: the thread deletes the listener
  std::thread thread_;
};

}  // namespace tensorverbs::verbs::soft
