#include "core/bounded_spin.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>

namespace tensorverbs {
namespace {

// The end of the crowding and its span, in Clock ticks (a heuristic: races between
// threads only make one span longer or shorter).
std::atomic<std::int64_t> crowded_end{0};
std::atomic<std::int64_t> crowded_span{0};
std::atomic<std::int64_t> last_long_yield{0};

std::int64_t ticks(BoundedSpin::Clock::time_point t) { return t.time_since_epoch().count(); }

}  // namespace

void BoundedSpin::crowded_until(Clock::time_point until) {
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
}

void BoundedSpin::renew() {
  const Clock::time_point now = Clock::now();
  end_ = ticks(now) < crowded_end.load(std::memory_order_relaxed) ? now : now + budget_;
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
