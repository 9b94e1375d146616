#include "binding/recv_handle.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <chrono>
#include <utility>
#include <vector>

#include "binding/gil_released.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tensorverbs::binding {

namespace {

// A wait for many recvs' futures: joins each recv's arrival group as it is made, leaves
// them when closed (or destroyed).
class RecvGroup {
 public:
  explicit RecvGroup(const std::vector<RecvHandle*>& handles) {
    futures_.reserve(handles.size());
    for (std::size_t i = 0; i < handles.size(); ++i) {
      futures_.push_back(handles[i]->answer);
      futures_.back()->join(group_, i);
    }
  }
  RecvGroup(const RecvGroup&) = delete;
  RecvGroup& operator=(const RecvGroup&) = delete;
  ~RecvGroup() { close(); }

  std::vector<std::size_t> wait(std::size_t count, double seconds) {
    const auto slice = std::chrono::duration<double>(std::clamp(seconds, 0.0, 3600.0));
    GilReleased release;
    return group_->wait(count, std::chrono::duration_cast<std::chrono::nanoseconds>(slice));
  }

  void close() {
    for (const auto& future : futures_) future->leave(group_);
    futures_.clear();
  }

 private:
  std::shared_ptr<ArrivalGroup> group_ = std::make_shared<ArrivalGroup>();
  std::vector<std::shared_ptr<FutureRecv>> futures_;
};

}  // namespace

void RecvHandle::give_up(int code, const std::string& message) {
  if (!recv) return;
  GilReleased release;
  recv->give_up(Status(static_cast<Code>(code), message));
}

void RecvHandle::cancel() {
  give_up(static_cast<int>(Code::kCancelled), "the recv was cancelled");
  answer->abandon();
}

void bind_recv_handles(nb::module_& m) {
  nb::class_<RecvHandle>(m, "RecvHandle", "A recv in flight.")
      .def("give_up", &RecvHandle::give_up, "code"_a, "message"_a,
           "Stop waiting: the recv's caller gets (code, message); a tensor that arrives "
           "anyway is kept for the next recv of its key and step.")
      .def("cancel", &RecvHandle::cancel,
           "give_up(CANCELLED, \"the recv was cancelled\"): its caller cancelled it (a tensor "
           "parked, or parked yet, goes to the next recv of its key and step).")
      .def("wait", [](RecvHandle& h, double seconds) {
             return static_cast<int>(h.answer->wait_here(seconds));
           }, "seconds"_a,
           "Wait up to `seconds` for the answer and settle the recv's future in this thread: "
           "0 not yet, 1 settled here, 2 settled by the settler thread or another waiter "
           "(wait on the future), 3 parked here (settle_parked()).")
      .def("settle_parked", [](RecvHandle& h, nb::handle call, nb::handle settle) {
             return h.answer->settle_parked(call, settle);
           }, "call"_a, "settle"_a,
           "If the answer is parked here, settle(call, code, message, dtype, shape, is_dead, "
           "payload, arrived) with it in this thread (arrived: when it came, as "
           "time.monotonic()); whether it was. Interrupted, the settler thread settles it.")
      .def("eager", [](RecvHandle& h, nb::object call, nb::object settle) {
             h.answer->eager(std::move(call), std::move(settle));
           }, "call"_a, "settle"_a,
           "From now on the settler thread settles the recv's future as its answer comes, "
           "settle(call, code, message, dtype, shape, is_dead, payload) (at once if it is "
           "parked here already).");

  nb::class_<RecvGroup>(m, "RecvGroup",
                        "A wait for the answers of many recvs at once, the GIL released once.")
      .def(nb::init<const std::vector<RecvHandle*>&>(), "handles"_a,
           "Wait for the recvs of `handles` (each in at most one group at a time: a recv "
           "another group waits for counts as come at once).")
      .def("wait", &RecvGroup::wait, "count"_a, "seconds"_a,
           "Wait up to `seconds` until `count` recvs' answers came since the last call; the "
           "indices of those that came (or must be looked at).")
      .def("close", &RecvGroup::close, "Stop waiting for the recvs.");
}

}  // namespace tensorverbs::binding
