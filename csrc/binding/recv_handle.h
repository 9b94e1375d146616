// A recv in flight for Python (RecvHandle: give it up, wait for it, take its parked answer)
// and a wait for many of them at once (RecvGroup).
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <string>

#include "binding/future_recv.h"
#include "protocol/pending_recv.h"
#include "protocol/rdma_rendezvous.h"

namespace tensorverbs::binding {

// A recv in flight, for Python (its future holds it): give_up() withdraws it. It keeps the
// rendezvous alive (the recv refers to it), and the recv's answer while it is parked.
struct RecvHandle {
  std::shared_ptr<RdmaRendezvous> rendezvous;
  std::shared_ptr<PendingRecv> recv;
  // the recv's callback, which keeps a parked answer (and refers to the future only while
  // it may settle it: not once parked)
  std::shared_ptr<FutureRecv> answer;

  void give_up(int code, const std::string& message);
  // give_up(CANCELLED): its future was cancelled (a parked tensor goes to the next recv).
  void cancel();
};

void bind_recv_handles(nanobind::module_& m);

}  // namespace tensorverbs::binding
