// LandingQuarantine: memory a peer may still access (a landing whose window is still bound,
// a read still outstanding, a source a peer may still read) is kept out of use until what
// holds it says it is quiesced. The adapter's housekeeping checks it; a check that throws
// keeps it quarantined. Thread-safe.
#pragma once

#include <functional>
#include <mutex>
#include <vector>

namespace tensorverbs {

class LandingQuarantine {
 public:
  // Keeps what `quiesced` stands for until it returns true.
  void add(std::function<bool()> quiesced);
  // Lets go of what is quiesced now; true while anything is left.
  bool check();

 private:
  std::mutex mu_;
  std::vector<std::function<bool()>> waiting_;
};

}  // namespace tensorverbs
