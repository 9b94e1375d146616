// Expiring: what the adapter's thread ends at a deadline unless it is gone by then: a
// recv's timeout, the hold of a tensor whose receiver is to ask again or release it.
#pragma once

namespace tensorverbs {

class Expiring {
 public:
  virtual ~Expiring() = default;
  // Its deadline, set `timeout` seconds before, passed (in the adapter's thread).
  virtual void expire(double timeout) = 0;
};

}  // namespace tensorverbs
