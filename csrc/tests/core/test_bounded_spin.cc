// BoundedSpin: a spin ends when its budget is spent or a yield took long, a crowded
// process does not spin, and a crowding that comes back lasts longer. (A yield may take
// long on a loaded machine, so the checks hold whatever the scheduler did.)
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

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
  // crowded until about 1 s from now (and no probe is due: crowded just now)
  for (int i = 0; i < 8; ++i) BoundedSpin::crowded_at(Clock::now());
  EXPECT_FALSE(BoundedSpin(1h).turn());
  BoundedSpin::crowded_until(Clock::time_point{});
}

// The "some" total of /proc/pressure/cpu (us), -1 where it cannot be read.
long long cpu_stall_us() {
  std::ifstream pressure("/proc/pressure/cpu");
  std::string word;
  while (pressure >> word) {
    if (word.rfind("total=", 0) == 0) return std::stoll(word.substr(6));
  }
  return -1;
}

TEST(BoundedSpin, ACrowdingEndsOnceTheCoresAreFreeAgain) {
  if (cpu_stall_us() < 0) GTEST_SKIP() << "the kernel tells no CPU pressure here";
  const Clock::time_point start = Clock::now();
  BoundedSpin::crowded_until(start + 1h);
  const bool turned = BoundedSpin(1h).turn();
  if (Clock::now() - start < BoundedSpin::kProbeEvery) {
    EXPECT_FALSE(turned) << "the cores were looked at again before kProbeEvery";
  }
  // Once a look is due, the next spin looks: the crowding is over if no thread of the
  // machine waited for a core (as the test's own look at the pressure confirms).
  for (int tries = 0; tries < 100; ++tries) {
    const long long stalled = cpu_stall_us();
    const Clock::time_point before = Clock::now();
    std::this_thread::sleep_for(BoundedSpin::kProbeEvery);
    const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(
        Clock::now() - before);
    const bool free_cores =
        static_cast<double>(cpu_stall_us() - stalled) < 0.01 * static_cast<double>(waited.count());
    BoundedSpin spin(1h);  // (it looks: the last look was kProbeEvery ago)
    const Clock::time_point turn = Clock::now();
    const bool spun = spin.turn() || Clock::now() - turn >= BoundedSpin::kCrowdedYield;
    if (!free_cores) continue;  // busy meanwhile: the look may have found it crowded
    EXPECT_TRUE(spun) << "the crowding went on on free cores";
    BoundedSpin::crowded_until(Clock::time_point{});
    return;
  }
  BoundedSpin::crowded_until(Clock::time_point{});
  GTEST_SKIP() << "threads waited for a core at every try: the machine stayed busy";
}

}  // namespace
}  // namespace tensorverbs
