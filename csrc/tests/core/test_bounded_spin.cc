// BoundedSpin: a spin ends when its budget is spent or a yield took long, a crowded
// process does not spin, and a crowding that comes back lasts longer. (A yield may take
// long on a loaded machine, so the checks hold whatever the scheduler did.)
#include <gtest/gtest.h>

#include <chrono>

#include "core/bounded_spin.h"

namespace tensorverbs {
namespace {

using namespace std::chrono_literals;
using Clock = BoundedSpin::Clock;

TEST(BoundedSpin, EndsWhenItsBudgetIsSpentOrAYieldTookLong) {
  BoundedSpin::crowded_until(Clock::time_point{});
  EXPECT_FALSE(BoundedSpin(0us).turn());
  BoundedSpin spin(2ms);
  const Clock::time_point start = Clock::now();
  while (spin.turn()) {}
  // spent, or ended early by a yield that took the processor away for that long
  EXPECT_GE(Clock::now() - start, BoundedSpin::kCrowdedYield);
  BoundedSpin::crowded_until(Clock::time_point{});
}

TEST(BoundedSpin, ACrowdedProcessSleepsAtOnceUntilTheCrowdingIsOver) {
  BoundedSpin::crowded_until(Clock::now() + 1h);
  BoundedSpin spin(1h);
  EXPECT_FALSE(spin.turn());
  spin.renew();  // work found while crowded: still no budget
  EXPECT_FALSE(spin.turn());
  BoundedSpin::crowded_until(Clock::now());
  spin.renew();
  const Clock::time_point before = Clock::now();
  const bool turned = spin.turn();
  EXPECT_TRUE(turned || Clock::now() - before >= BoundedSpin::kCrowdedYield);
  BoundedSpin::crowded_until(Clock::time_point{});
}

TEST(BoundedSpin, ACrowdingThatComesBackLastsLonger) {
  using namespace std::chrono;
  BoundedSpin::crowded_until(Clock::time_point{});
  const Clock::time_point earlier = Clock::now() - 100ms;
  BoundedSpin::crowded_at(earlier);  // crowded for kCrowdedFor: over 90 ms ago
  const Clock::time_point before = Clock::now();
  const bool turned = BoundedSpin(1h).turn();
  EXPECT_TRUE(turned || Clock::now() - before >= BoundedSpin::kCrowdedYield);
  BoundedSpin::crowded_until(Clock::time_point{});
  // coming back each time within twice its span, it doubles up to kCrowdedForAtMost (1 s):
  // crowded until 900 ms from now
  for (int i = 0; i < 8; ++i) BoundedSpin::crowded_at(earlier);
  EXPECT_FALSE(BoundedSpin(1h).turn());
  BoundedSpin::crowded_until(Clock::time_point{});
}

}  // namespace
}  // namespace tensorverbs
