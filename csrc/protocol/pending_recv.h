// PendingRecv: a recv its caller waits for, however it is being served (from this task's
// table, or by a request to a peer); RecvCallback: how the caller gets its answer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/status.h"
#include "protocol/expiring.h"
#include "protocol/rendezvous_key.h"
#include "protocol/tensor_value.h"

namespace tensorverbs {

struct RecvResult {
  Status status;       // OK: `value` is the tensor
  TensorValue value;
};

// Completed exactly once, from whatever thread finished the recv.
class RecvCallback {
 public:
  virtual ~RecvCallback() = default;
  virtual void complete(RecvResult result) = 0;
};

class PendingRecv : public Expiring {
 public:
  ~PendingRecv() override = default;
  // Its timeout passed: gives up with DeadlineExceeded, saying where it stood.
  void expire(double timeout) final;
  virtual const StepKey& key() const = 0;
  std::int64_t step() const { return key().step; }
  // The caller stops waiting and gets `why`; what can be stopped is (a request to a peer is
  // withdrawn; a tensor that arrives anyway is kept for the next recv of its key).
  virtual void give_up(const Status& why) = 0;
  // "recv of 'w' from /job:ps/replica:0/task:0 at step 3", for messages.
  virtual std::string what() const = 0;
  // Where it stands, for a timeout's message ("the peer has not answered"); may be empty.
  virtual std::string progress() const = 0;
  // Takes `value` (moved from only on true), a tensor of this recv's key that came for an
  // earlier recv which gave up, if the caller still waits: what it asked for is withdrawn.
  virtual bool hand_over(TensorValue& value) = 0;
};

}  // namespace tensorverbs
