// BoundedSpin: the spin a thread makes before it sleeps, waiting for work that usually
// comes within microseconds. A turn yields the processor instead of only pausing: where
// busy threads outnumber cores (both processes of a pair, each with a caller and a
// progress thread, on two cores), a spinner keeping its core delays the very thread whose
// work it waits for (4 KiB round trip on a 2-core machine: 266 us with pause, 31-39 us
// with yield). But where other processes keep every core busy, a yield hands the core to
// them for a whole time slice (milliseconds), and what arrives meanwhile waits for the
// spinner's next turn. Two such yields within kCrowdedWithin of each other mark the
// process crowded (one alone is a neighbour's burst, or a thread of this process that ran
// for a while): its threads then sleep at once (woken by the peer) for a span, kCrowdedFor
// at first, twice as long each time the crowding comes back within twice its last span
// (other processes keeping the cores busy), up to kCrowdedForAtMost. Every kProbeEvery of
// a crowding one thread looks at the kernel's CPU pressure (/proc/pressure/cpu): if threads
// waited for a core less than kFreeStall of that time, the cores are free and the crowding
// is over (a burst of the process's own traffic had crowded it; without the look its next
// small transfers waited out the span asleep: 4 KiB recv 91-100 us instead of 21-31 right
// after 2,000 in flight). Where the kernel tells no pressure, a crowding lasts its span.
#pragma once

#include <chrono>

namespace tensorverbs {

class BoundedSpin {
 public:
  using Clock = std::chrono::steady_clock;
  // A yield that returns later than this gave the core to another thread for its slice.
  static constexpr std::chrono::microseconds kCrowdedYield{1000};
  // Two long yields this close together mark the process crowded.
  static constexpr std::chrono::milliseconds kCrowdedWithin{20};
  // How long a crowded process sleeps at once, at first and at most.
  static constexpr std::chrono::milliseconds kCrowdedFor{10};
  static constexpr std::chrono::milliseconds kCrowdedForAtMost{1000};
  // How often a crowded process looks whether the cores are free again, and the share of
  // that time with a thread waiting for a core under which they are.
  static constexpr std::chrono::milliseconds kProbeEvery{20};
  static constexpr double kFreeStall = 0.1;

  explicit BoundedSpin(std::chrono::microseconds budget) : budget_(budget) { renew(); }

  // One turn: false once the budget is spent (or the process is crowded), else the
  // processor was yielded once.
  bool turn();
  // Work was found: a fresh budget (none while the process is crowded).
  void renew();

  // Marks the process crowded until `until`, the cores looked at again kProbeEvery from now
  // (a time past clears it: the next crowding needs two long yields again and lasts
  // kCrowdedFor).
  static void crowded_until(Clock::time_point until);
  // The process is crowded from `when` for a span (longer if it was crowded lately).
  static void crowded_at(Clock::time_point when);

 private:
  std::chrono::microseconds budget_;
  Clock::time_point end_;
};

}  // namespace tensorverbs
