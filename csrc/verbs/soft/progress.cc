#include "verbs/soft/progress.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "core/bounded_spin.h"
#include "verbs/soft/doorbell.h"
#include "verbs/soft/fd_passing.h"

namespace tensorverbs::verbs::soft {
namespace {

constexpr std::uint64_t kWakeCookie = 1;
constexpr std::uint64_t kDoorbellCookie = 2;
constexpr int kSocketPollEvery = 16;  // spin turns between checks of sockets without data

}  // namespace

Result<std::unique_ptr<Progress>> Progress::create(Hooks* hooks, std::atomic<std::uint32_t>* waiting,
                                                   int doorbell_fd) {
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  UniqueFd wake(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!epoll.valid() || !wake.valid()) {
    return Status(Code::kResourceExhausted, "cannot create an epoll set: " + errno_text(errno));
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeCookie;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &ev) != 0) {
    return Status(Code::kResourceExhausted, "cannot watch an eventfd: " + errno_text(errno));
  }
  ev.data.u64 = kDoorbellCookie;
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, doorbell_fd, &ev) != 0) {
    return Status(Code::kResourceExhausted, "cannot watch the doorbell: " + errno_text(errno));
  }
  return std::unique_ptr<Progress>(
      new Progress(hooks, waiting, std::move(epoll), std::move(wake), doorbell_fd));
}

Progress::Progress(Hooks* hooks, std::atomic<std::uint32_t>* waiting, UniqueFd epoll,
                   UniqueFd wake, int doorbell_fd)
    : hooks_(hooks), waiting_(waiting), epoll_(std::move(epoll)), wake_(std::move(wake)),
      doorbell_fd_(doorbell_fd) {}

Progress::~Progress() = default;

Status Progress::watch(int fd, std::uint64_t cookie, bool write, bool add) {
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | (write ? EPOLLOUT : 0u);
  ev.data.u64 = cookie;
  if (::epoll_ctl(epoll_.get(), add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev) != 0) {
    return Status(Code::kInternal, "cannot watch a socket: " + errno_text(errno));
  }
  return ok_status();
}

void Progress::unwatch(int fd) { ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, fd, nullptr); }

void Progress::kick() {
  const std::uint64_t one = 1;
  while (::write(wake_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
  }
}

void Progress::notify() {
  if (sleepers_.load(std::memory_order_seq_cst) > 0) {
    std::lock_guard lock(cv_mu_);
    cv_.notify_all();
  }
}

void Progress::hand_over() {
  driving_.store(false, std::memory_order_seq_cst);
  drive_mu_.unlock();
  notify();
}

void Progress::poll() {
  if (!drive_mu_.try_lock()) return;
  driving_.store(true, std::memory_order_seq_cst);
  hooks_->poll_memory();
  handle_events(0);
  hand_over();
}

void Progress::wait(Waiter& waiter, Clock::time_point deadline) {
  while (!waiter.ready()) {
    if (Clock::now() >= deadline) return;
    if (drive_mu_.try_lock()) {
      driving_.store(true, std::memory_order_seq_cst);
      drive(waiter, deadline);
      hand_over();
      return;
    }
    std::unique_lock lock(cv_mu_);
    sleepers_.fetch_add(1, std::memory_order_seq_cst);
    cv_.wait_until(lock, deadline, [&] {
      return waiter.ready() || !driving_.load(std::memory_order_seq_cst);
    });
    sleepers_.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void Progress::drive(Waiter& waiter, Clock::time_point deadline) {
  BoundedSpin spin(kSpinTime);
  for (int turn = 0;; ++turn) {
    // sockets that carry data on every turn: a turn yields the processor, which on a busy
    // machine takes longer than the system call (checking them on every 16th turn made a
    // 4 KiB round trip over TCP 1.7x slower: 130-150 vs 78-81 us, two processes on two
    // cores); the others (rings in shared memory carry the data) now and then
    bool did = hooks_->poll_memory();
    if (data_sockets_.load(std::memory_order_relaxed) > 0 || turn % kSocketPollEvery == 0) {
      did |= handle_events(0);
    }
    if (waiter.ready()) return;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return;
    if (did) {
      spin.renew();
      continue;
    }
    if (spin.turn()) continue;
    // sleep: the flag first, then the last look, then epoll
    if (!waiter.arm()) return;
    waiting_->store(1, std::memory_order_seq_cst);  // then the last look (seq_cst loads)
    if (!hooks_->memory_ready() && !handle_events(0)) {
      int timeout_ms = -1;
      if (deadline != Clock::time_point::max()) {
        const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
        timeout_ms = static_cast<int>((left.count() + 999) / 1000);
      }
      handle_events(timeout_ms);
    }
    waiting_->store(0, std::memory_order_relaxed);
    waiter.disarm();
    spin.renew();
    turn = -1;  // a socket check on the next turn
  }
}

bool Progress::handle_events(int timeout_ms) {
  epoll_event events[64];
  const int n = ::epoll_wait(epoll_.get(), events, 64, timeout_ms);
  if (n <= 0) return false;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t cookie = events[i].data.u64;
    if (cookie == kWakeCookie) {
      drain_eventfd(wake_.get());
    } else if (cookie == kDoorbellCookie) {
      drain_eventfd(doorbell_fd_);
    } else {
      hooks_->on_event(cookie, events[i].events);
    }
  }
  return true;
}

}  // namespace tensorverbs::verbs::soft
