// Waiting for completions in a test, through wake-ups: a CompletionQueue's wait() returns 0
// on a wake() as on a timeout, and a wake-up that no wait took is left for the next (a
// collector stopped just after its wait ended leaves its own), so one wait() is no proof
// that nothing came.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <vector>

#include "verbs/completion_queue.h"
#include "verbs/work.h"

namespace tensorverbs::verbs::testing {

// At least `n` completions from `cq` within `timeout_ms` (fewer on timeout: a failure).
inline std::vector<WorkCompletion> wait_for(CompletionQueue& cq, std::size_t n,
                                            int timeout_ms = 30000) {
  using namespace std::chrono;
  std::vector<WorkCompletion> out;
  const auto deadline = steady_clock::now() + milliseconds(timeout_ms);
  WorkCompletion wcs[32];
  while (out.size() < n) {
    const auto left = duration_cast<milliseconds>(deadline - steady_clock::now()).count();
    if (left <= 0) break;
    const int got = cq.wait(wcs, 32, static_cast<int>(left));
    out.insert(out.end(), wcs, wcs + got);
  }
  EXPECT_GE(out.size(), n) << "only " << out.size() << " of " << n << " completions";
  return out;
}

}  // namespace tensorverbs::verbs::testing
