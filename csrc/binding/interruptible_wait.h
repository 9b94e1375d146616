// How a blocking call of the binding waits for its recvs' answers so that Ctrl-C still
// interrupts it.
#pragma once

#include <nanobind/nanobind.h>

#include <chrono>

#include "binding/gil_released.h"

namespace tensorverbs::binding {

// How often a recv blocked on the main thread runs the signal handlers: Ctrl-C interrupts
// it within this (plus the time to take the GIL).
inline constexpr auto kSignalSlice = std::chrono::milliseconds(20);

// Waits (the GIL released) until `waiting` has its answers. On the main thread it waits in
// slices and runs the signal handlers in between, and once more when the answers are in (a
// signal that came as they did is handled here, where their tensors can still be kept, not
// as the call returns them): when one raises (Ctrl-C's KeyboardInterrupt), `give_up()` runs
// (without the GIL: it gives the recvs up and keeps the tensors that came anyway for the
// next recvs of their keys) and the handler's exception is raised.
template <class Waiting, class GiveUp>
void wait_interruptibly(Waiting& waiting, const GiveUp& give_up) {
  const bool signals = on_main_thread();
  for (;;) {
    bool done = false;
    {
      GilReleased release;
      done = waiting.wait_for(signals ? std::chrono::nanoseconds(kSignalSlice)
                                      : std::chrono::nanoseconds(std::chrono::hours(1)));
    }
    if (!signals || PyErr_CheckSignals() == 0) {
      if (done) return;
      continue;
    }
    nanobind::python_error raised;  // takes the handler's exception
    {
      GilReleased release;
      give_up();
    }
    throw raised;
  }
}

}  // namespace tensorverbs::binding
