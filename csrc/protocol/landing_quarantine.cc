#include "protocol/landing_quarantine.h"

#include <algorithm>
#include <utility>

#include "core/thread_guard.h"

namespace tensorverbs {

void LandingQuarantine::add(std::function<bool()> quiesced) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.push_back(std::move(quiesced));
}

bool LandingQuarantine::check() {
  std::vector<std::function<bool()>> waiting;
  {
    std::lock_guard<std::mutex> lock(mu_);
    waiting.swap(waiting_);
  }
  // one that throws stays quarantined (what it holds must not be reused meanwhile)
  const auto quiesced = [](auto& q) {
    bool done = false;
    run_guarded([&] { done = q(); }, [](const char*) {});
    return done;
  };
  waiting.erase(std::remove_if(waiting.begin(), waiting.end(), quiesced), waiting.end());
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& q : waiting) waiting_.push_back(std::move(q));
  return !waiting_.empty();
}

}  // namespace tensorverbs
