// Progress: manual progress of one context (as libfabric's FI_PROGRESS_MANUAL). The thread
// that waits on a completion queue drives: it polls the context's event rings and peers'
// rings (memory loads, no system call), and its sockets, for a bounded spin; then it sets
// the context's `waiting` flag (peers then ring its doorbell), checks once more, and
// sleeps in epoll_wait on the sockets, the doorbell and a wake eventfd. One thread drives
// at a time; other waiters sleep on a condition variable and one of them takes over when
// the driver leaves.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>

#include "core/status.h"
#include "verbs/soft/unique_fd.h"

namespace tensorverbs::verbs::soft {

// How long a driver spins before it sleeps.
inline constexpr std::chrono::microseconds kSpinTime{50};

class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  // What the context does for the driver.
  class Hooks {
   public:
    virtual ~Hooks() = default;
    // Handles the work visible in shared memory; true when there was some.
    virtual bool poll_memory() = 0;
    // Whether poll_memory() would find work (the last check before sleeping).
    virtual bool memory_ready() = 0;
    // A watched descriptor is ready.
    virtual void on_event(std::uint64_t cookie, std::uint32_t events) = 0;
  };

  // What a waiter waits for (a completion queue).
  class Waiter {
   public:
    virtual ~Waiter() = default;
    virtual bool ready() = 0;
    // Records that the driver sleeps for this waiter (so a delivery kicks it); false,
    // recording nothing, when it is ready already.
    virtual bool arm() = 0;
    virtual void disarm() = 0;
  };

  static Result<std::unique_ptr<Progress>> create(Hooks* hooks, std::atomic<std::uint32_t>* waiting,
                                                  int doorbell_fd);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Watches `fd` for reading (and writing when `write`); `cookie` identifies it to on_event.
  Status watch(int fd, std::uint64_t cookie, bool write, bool add);
  void unwatch(int fd);
  // A watched socket starts (+1) or stops (-1) carrying data (a queue pair without shared
  // memory rings): while any does, a spinning driver checks the sockets on every turn, not
  // on every kSocketPollEvery-th.
  void data_sockets(int delta) { data_sockets_.fetch_add(delta, std::memory_order_relaxed); }

  // Drives (or waits for the driver) until waiter.ready() or `deadline`.
  void wait(Waiter& waiter, Clock::time_point deadline);
  // One pass without blocking, unless another thread drives.
  void poll();
  // Wakes the driver from epoll_wait (thread-safe).
  void kick();
  // Something was delivered: wakes the threads that wait without driving.
  void notify();

  static constexpr std::uint64_t kFirstCookie = 16;

 private:
  Progress(Hooks* hooks, std::atomic<std::uint32_t>* waiting, UniqueFd epoll, UniqueFd wake,
           int doorbell_fd);
  void drive(Waiter& waiter, Clock::time_point deadline);
  bool handle_events(int timeout_ms);
  void hand_over();

  Hooks* hooks_;
  std::atomic<std::uint32_t>* waiting_;
  UniqueFd epoll_;
  UniqueFd wake_;
  int doorbell_fd_;

  std::mutex drive_mu_;
  std::atomic<bool> driving_{false};
  std::mutex cv_mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
  std::atomic<int> data_sockets_{0};
};

}  // namespace tensorverbs::verbs::soft
