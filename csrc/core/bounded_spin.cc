#include "core/bounded_spin.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace tensorverbs {
namespace {

// The end of the crowding and its span, in Clock ticks (a heuristic: races between
// threads only make one span longer or shorter).
std::atomic<std::int64_t> crowded_end{0};
std::atomic<std::int64_t> crowded_span{0};
std::atomic<std::int64_t> last_long_yield{0};
// When the cores were last looked at (Clock ticks), and the CPU pressure then (us).
std::atomic<std::int64_t> looked_at{0};
std::atomic<std::int64_t> stalled_then{-1};

std::int64_t ticks(BoundedSpin::Clock::time_point t) { return t.time_since_epoch().count(); }

// The microseconds threads of this machine have waited for a core (the "some" total of
// /proc/pressure/cpu); -1 where the kernel does not tell.
std::int64_t cpu_stall_us() {
  static const int fd = ::open("/proc/pressure/cpu", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char text[256];
  const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
  if (n <= 0) return -1;
  text[n] = '\0';
  const char* total = std::strstr(text, "total=");  // "some avg10=... total=123\nfull ..."
  return total == nullptr ? -1 : std::strtoll(total + 6, nullptr, 10);
}

// Whether threads waited for a core less than kFreeStall of the time since the cores were
// last looked at, at `then` (false the first time, or where the kernel does not tell).
bool cores_free(std::int64_t then, BoundedSpin::Clock::time_point now) {
  const std::int64_t stalled = cpu_stall_us();
  const std::int64_t before = stalled_then.exchange(stalled, std::memory_order_relaxed);
  const auto wall = std::chrono::duration_cast<std::chrono::microseconds>(
                        BoundedSpin::Clock::duration(ticks(now) - then))
                        .count();
  if (stalled < 0 || before < 0 || then == 0 || wall <= 0) return false;
  const double waited = static_cast<double>(stalled - before);
  return waited < BoundedSpin::kFreeStall * static_cast<double>(wall);
}

// A look at the cores now, whatever the time since the last.
void look_at_cores(BoundedSpin::Clock::time_point now) {
  cores_free(looked_at.exchange(ticks(now), std::memory_order_relaxed), now);
}

// Whether the cores are free, looked at by this thread if a look is due (one thread a
// kProbeEvery); false if none is.
bool cores_free_if_due(BoundedSpin::Clock::time_point now) {
  std::int64_t then = looked_at.load(std::memory_order_relaxed);
  return ticks(now) - then >= BoundedSpin::Clock::duration(BoundedSpin::kProbeEvery).count() &&
         looked_at.compare_exchange_strong(then, ticks(now), std::memory_order_relaxed) &&
         cores_free(then, now);
}

}  // namespace

void BoundedSpin::crowded_until(Clock::time_point until) {
  const Clock::time_point now = Clock::now();
  if (until > now) look_at_cores(now);  // (the next look is kProbeEvery from now)
  crowded_end.store(ticks(until), std::memory_order_relaxed);
  crowded_span.store(0, std::memory_order_relaxed);
  last_long_yield.store(0, std::memory_order_relaxed);
}

void BoundedSpin::crowded_at(Clock::time_point when) {
  const std::int64_t first = Clock::duration(kCrowdedFor).count();
  const std::int64_t most = Clock::duration(kCrowdedForAtMost).count();
  const std::int64_t span = crowded_span.load(std::memory_order_relaxed);
  const std::int64_t since_end = ticks(when) - crowded_end.load(std::memory_order_relaxed);
  const std::int64_t next = span > 0 && since_end < 2 * span ? std::min(2 * span, most) : first;
  crowded_span.store(next, std::memory_order_relaxed);
  crowded_end.store(ticks(when) + next, std::memory_order_relaxed);
  look_at_cores(when);  // (the next look is kProbeEvery from now)
}

void BoundedSpin::renew() {
  const Clock::time_point now = Clock::now();
  end_ = now + budget_;
  if (ticks(now) >= crowded_end.load(std::memory_order_relaxed)) return;
  if (cores_free_if_due(now)) {
    crowded_until(Clock::time_point{});  // over: its threads spin again
    return;
  }
  end_ = now;  // crowded: sleep at once
}

bool BoundedSpin::turn() {
  const Clock::time_point before = Clock::now();
  if (before >= end_) return false;
  std::this_thread::yield();
  const Clock::time_point after = Clock::now();
  if (after - before < kCrowdedYield) return true;
  const std::int64_t previous = last_long_yield.exchange(ticks(after), std::memory_order_relaxed);
  if (ticks(after) - previous < Clock::duration(kCrowdedWithin).count()) crowded_at(after);
  end_ = after;  // its budget is spent by now
  return false;
}

}  // namespace tensorverbs
