#include "binding/rendezvous_binding.h"

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "binding/block_calls.h"
#include "binding/byte_view.h"
#include "binding/gil_released.h"
#include "binding/interruptible_wait.h"
#include "binding/py_ref.h"
#include "binding/future_recv.h"
#include "binding/recv_callbacks.h"
#include "binding/recv_handle.h"
#include "binding/status_error.h"
#include "binding/tensor_shape_caster.h"
#include "binding/verbs_config.h"
#include "protocol/held_messages.h"
#include "protocol/rdma_rendezvous.h"
#include "protocol/send_completion.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace tensorverbs::binding {

namespace {

// recv_many holds its channels' messages while it starts this many entries at most (about
// two TENSOR_REQUESTS messages' worth): a hold also delays the other messages to that
// peer, the answers to its requests among them.
constexpr std::size_t kHeldEntries = 1024;

// A recv's destination from Python: None, or (dtype, shape, a writable C-contiguous buffer),
// lent to the recv through its callback `owner`.
std::optional<RecvDestination> to_destination(const nb::object& spec,
                                              const std::shared_ptr<PyRecvCallback>& owner) {
  if (spec.is_none()) return std::nullopt;
  auto [dtype, shape, buffer] =
      nb::cast<std::tuple<std::int32_t, TensorShape, nb::object>>(spec);
  Py_buffer view;
  if (PyObject_GetBuffer(buffer.ptr(), &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) != 0) {
    throw nb::python_error();
  }
  RecvDestination destination{dtype, std::move(shape), static_cast<std::uint8_t*>(view.buf),
                              static_cast<std::uint64_t>(view.len), owner};
  PyBuffer_Release(&view);  // the object itself keeps the memory alive
  owner->lend(keep(buffer.ptr()));
  return destination;
}

// A tensor's value over the bytes of `data`: a ByteView of the core's (sharing its
// keepalive), or any object exporting a C-contiguous buffer (kept alive).
TensorValue to_value(std::int32_t dtype, TensorShape shape, bool is_dead,
                     nb::handle data) {
  if (nb::isinstance<ByteView>(data)) {
    const ByteView& bytes = nb::cast<const ByteView&>(data);
    return TensorValue{TensorMeta{dtype, std::move(shape), is_dead, bytes.size}, bytes.data,
                       bytes.keepalive};
  }
  Py_buffer view;
  if (PyObject_GetBuffer(data.ptr(), &view, PyBUF_C_CONTIGUOUS) != 0) throw nb::python_error();
  const auto nbytes = static_cast<std::uint64_t>(view.len);
  TensorValue value{TensorMeta{dtype, std::move(shape), is_dead, nbytes},
                    static_cast<const std::uint8_t*>(view.buf), keep(data.ptr())};
  PyBuffer_Release(&view);  // the object itself keeps the memory alive
  return value;
}

class Rendezvous {
 public:
  Rendezvous(std::int32_t task, std::vector<std::string> task_names, const nb::dict& config,
             std::string listen_host, bool read_mode, bool validate, std::uint32_t slots,
             std::size_t pool_block, std::size_t pool_limit, bool recover, double hold_seconds) {
    RendezvousSettings settings{task,       std::move(task_names), to_config(config),
                                std::move(listen_host), read_mode, validate, slots, pool_block,
                                pool_limit, recover, hold_seconds};
    Result<std::unique_ptr<RdmaRendezvous>> opened = Status(Code::kUnknown, "");
    {
      GilReleased release;
      opened = RdmaRendezvous::open(std::move(settings));
    }
    rv_ = std::shared_ptr<RdmaRendezvous>(check(std::move(opened)));
  }

  nb::bytes channel(std::int32_t peer, std::uint64_t incarnation, const nb::bytes& offered) {
    const std::string_view view(static_cast<const char*>(offered.data()), offered.size());
    Result<std::string> described = Status(Code::kUnknown, "");
    {
      GilReleased release;
      described = rv_->channel(peer, incarnation, view);
    }
    const std::string bytes = check(std::move(described));
    return nb::bytes(bytes.data(), bytes.size());
  }

  void connect(std::int32_t peer, std::uint64_t incarnation, const nb::bytes& remote) {
    const std::string view(static_cast<const char*>(remote.data()), remote.size());
    Status status;
    {
      GilReleased release;
      status = rv_->connect(peer, incarnation, view);
    }
    check(status);
  }

  void fail_channel(std::int32_t peer, int code, const std::string& message, bool transient,
                    std::optional<std::uint64_t> incarnation) {
    GilReleased release;
    rv_->fail_channel(peer, Status(static_cast<Code>(code), message), transient, incarnation);
  }

  std::optional<std::int32_t> next_lost(double timeout) {
    GilReleased release;
    return rv_->next_lost(timeout);
  }

  // (step, src, dst, name) of the next recv of a watched name that waits
  std::optional<std::tuple<std::int64_t, std::int32_t, std::int32_t, std::string>> next_unmatched(
      double timeout) {
    std::optional<StepKey> recv;
    {
      GilReleased release;
      recv = rv_->table().unmatched().next(timeout);
    }
    if (!recv) return std::nullopt;
    return std::make_tuple(recv->step, recv->key.src, recv->key.dst, std::move(recv->key.name));
  }

  void send(std::int64_t step, std::int32_t dst, std::string name, std::int32_t dtype,
            TensorShape shape, bool is_dead, nb::handle data,
            std::shared_ptr<SendTicket> ticket) {
    TensorValue value = to_value(dtype, std::move(shape), is_dead, data);
    value.ticket = std::move(ticket);
    Status status;
    {
      GilReleased release;
      status = rv_->send(step, dst, std::move(name), std::move(value));
    }
    check(status);
  }

  // Offers each entry in order, the GIL released once: (-1, 0, "") once all are, else the
  // index, code and message of the first the table refused (the later ones are not offered).
  std::tuple<std::int64_t, int, std::string> send_many(
      const std::vector<std::int64_t>& steps, const std::vector<std::int32_t>& dsts,
      std::vector<std::string> names, const std::vector<std::int32_t>& dtypes,
      std::vector<TensorShape> shapes, const std::vector<bool>& deads,
      const nb::list& datas, std::vector<std::shared_ptr<SendTicket>> tickets) {
    const std::size_t n = names.size();
    if (steps.size() != n || dsts.size() != n || dtypes.size() != n || shapes.size() != n ||
        deads.size() != n || datas.size() != n || tickets.size() != n) {
      throw nb::value_error("send_many: the entries' fields differ in length");
    }
    std::vector<TensorValue> values;
    values.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      values.push_back(to_value(dtypes[i], std::move(shapes[i]), deads[i], datas[i]));
      values.back().ticket = std::move(tickets[i]);
    }
    std::int64_t failed = -1;
    Status status;
    {
      GilReleased release;
      for (std::size_t i = 0; i < n && failed < 0; ++i) {
        status = rv_->send(steps[i], dsts[i], std::move(names[i]), std::move(values[i]));
        if (!status.ok()) failed = static_cast<std::int64_t>(i);
      }
    }
    return {failed, static_cast<int>(status.code()), status.message()};
  }

  std::vector<std::pair<int, std::string>> broadcast(
      std::int64_t step, std::vector<std::int32_t> dsts, std::string name, std::int32_t dtype,
      TensorShape shape, bool is_dead, nb::handle data,
      std::vector<std::shared_ptr<SendTicket>> tickets) {
    TensorValue value = to_value(dtype, std::move(shape), is_dead, data);
    std::vector<Status> sent;
    {
      GilReleased release;
      sent = rv_->broadcast(step, dsts, name, std::move(value), std::move(tickets));
    }
    std::vector<std::pair<int, std::string>> out;
    for (const Status& status : sent) out.emplace_back(static_cast<int>(status.code()), status.message());
    return out;
  }

  nb::tuple recv(std::int64_t step, std::int32_t src, std::string name, double timeout,
                 const nb::object& destination, nb::handle hand) {
    auto waiting = std::make_shared<BlockingRecv>();
    std::optional<RecvDestination> into = to_destination(destination, waiting);
    StepKey key{step, RendezvousKey{src, rv_->task(), name}};
    std::shared_ptr<PendingRecv> pending;
    {
      GilReleased release;
      pending = rv_->recv(step, src, std::move(name), timeout, waiting, std::move(into));
    }
    wait_interruptibly(*waiting, [&] {
      if (pending) pending->give_up(Status(Code::kCancelled, "the recv was interrupted"));
      keep(key, waiting->wait());
    });
    RecvResult result = waiting->wait();
    try {
      nb::tuple answer = to_python(result);
      if (!hand.is_none()) {
        hand.attr("held") = nb::make_tuple(nb::find(this), step, src, key.key.name, answer);
      }
      return answer;
    } catch (...) {  // no memory for the answer: its tensor goes to the next recv
      keep(key, std::move(result));
      throw;
    }
  }

  nb::list recv_many(const std::vector<std::int64_t>& steps, const std::vector<std::int32_t>& srcs,
                     const std::vector<std::string>& names, double timeout, nb::handle hand) {
    const std::size_t n = names.size();
    if (steps.size() != n || srcs.size() != n) {
      throw nb::value_error("recv_many: steps, srcs and names differ in length");
    }
    auto batch = std::make_shared<BatchRecv>(n);
    std::vector<std::shared_ptr<PendingRecv>> pending(n);
    {
      GilReleased release;
      for (std::size_t first = 0; first < n; first += kHeldEntries) {
        HeldMessages held;  // the requests to each peer go out together, as few messages
        for (std::size_t i = first; i < std::min(n, first + kHeldEntries); ++i) {
          pending[i] = rv_->recv(steps[i], srcs[i], names[i], timeout, batch->entry(i));
        }
      }
    }
    wait_interruptibly(*batch, [&] {
      for (auto& recv : pending) {
        if (recv) recv->give_up(Status(Code::kCancelled, "the recv was interrupted"));
      }
      batch->wait();
      std::vector<RecvResult> results = batch->take();
      keep_all(steps, srcs, names, results);
    });
    std::vector<RecvResult> results = batch->take();
    try {
      nb::list out;
      for (const RecvResult& result : results) out.append(to_python(result));
      if (!hand.is_none()) {
        hand.attr("held") = nb::make_tuple(nb::find(this), nb::cast(steps), nb::cast(srcs),
                                           nb::cast(names), out);
      }
      return out;
    } catch (...) {  // no memory for the answers: their tensors go to the next recvs
      keep_all(steps, srcs, names, results);
      throw;
    }
  }

  nb::object recv_async(std::int64_t step, std::int32_t src, std::string name, double timeout,
                        nb::handle future, nb::handle parked, nb::object call, nb::object settle,
                        const nb::object& destination) {
    StepKey key{step, RendezvousKey{src, rv_->task(), name}};
    auto callback = std::make_shared<FutureRecv>(rv_, std::move(key), std::move(call), std::move(settle));
    if (!parked.is_none()) callback->settle_variants_of(future);  // a descriptor is acted on as it comes
    std::optional<RecvDestination> into = to_destination(destination, callback);
    RecvHandle handle{rv_, nullptr, callback};
    {
      GilReleased release;
      handle.recv = rv_->recv(step, src, std::move(name), timeout, std::move(callback), std::move(into));
    }
    nb::object held = nb::cast(std::move(handle));
    try {
      future.attr("settled_by")(held, parked);
    } catch (...) {  // a signal's handler raised: the recv is given up, a tensor kept
      nb::cast<RecvHandle&>(held).cancel();
      throw;
    }
    return held;
  }

  void give_back(std::int64_t step, std::int32_t src, std::string name, std::int32_t dtype,
                 TensorShape shape, bool is_dead, nb::handle payload) {
    TensorValue value = to_value(dtype, std::move(shape), is_dead, payload);
    GilReleased release;
    StepKey key{step, RendezvousKey{src, rv_->task(), std::move(name)}};
    rv_->keep_late(key, std::move(value));
  }

  void abort_step(std::int64_t step, int code, const std::string& message) {
    GilReleased release;
    rv_->abort_step(step, Status(static_cast<Code>(code), message));
  }

  void cleanup_step(std::int64_t step) {
    GilReleased release;
    rv_->cleanup_step(step);
  }

  ByteView allocate(std::size_t nbytes) {
    PoolBuffer buffer = check(rv_->allocate(nbytes));
    std::uint8_t* data = buffer->data();
    return ByteView{data, nbytes, false, std::move(buffer)};
  }

  nb::dict stats() const {
    nb::dict out;
    for (const auto& [name, value] : rv_->stats()) out[name.c_str()] = value;
    return out;
  }

  void stop() {
    GilReleased release;
    rv_->stop();
  }

  std::shared_ptr<RdmaRendezvous> rv_;

 private:
  void keep(const StepKey& key, RecvResult result) {
    if (result.status.ok()) rv_->keep_late(key, std::move(result.value));
  }

  // keep() of each of a batch's results.
  void keep_all(const std::vector<std::int64_t>& steps, const std::vector<std::int32_t>& srcs,
                const std::vector<std::string>& names, std::vector<RecvResult>& results) {
    for (std::size_t i = 0; i < results.size(); ++i) {
      keep(StepKey{steps[i], RendezvousKey{srcs[i], rv_->task(), names[i]}}, std::move(results[i]));
    }
  }

};

}  // namespace

void bind_rendezvous(nb::module_& m) {
  note_main_thread();
  nb::class_<Rendezvous>(m, "Rendezvous",
                         "The grpc+verbs protocol of one task: channels, tensors, recvs.")
      .def(nb::init<std::int32_t, std::vector<std::string>, const nb::dict&, std::string, bool,
                    bool, std::uint32_t, std::size_t, std::size_t, bool, double>(),
           "task"_a, "task_names"_a, "config"_a, "listen_host"_a, "read_mode"_a, "validate"_a,
           "slots"_a, "pool_block"_a, "pool_limit"_a, "recover"_a = false, "hold_seconds"_a = 300.0)
      .def("channel", &Rendezvous::channel, "peer"_a, "incarnation"_a, "offered"_a,
           "This side's channel to `peer` (created or replaced as needed), described.")
      .def("connect", &Rendezvous::connect, "peer"_a, "incarnation"_a, "remote"_a,
           "Connect this side's channel to the peer's description.")
      .def("fail_channel", &Rendezvous::fail_channel, "peer"_a, "code"_a, "message"_a,
           "transient"_a = false, "incarnation"_a = nb::none(),
           "The peer is gone: fail the channel and everything on it. `transient`: the "
           "channel broke under the transport instead (its recvs wait for it to be set up "
           "again, and next_lost() names the peer). `incarnation`: only a channel to that "
           "incarnation of the peer.")
      .def("next_lost", &Rendezvous::next_lost, "timeout"_a,
           "The next peer whose channel broke under the transport and should be set up "
           "again (waits up to `timeout` s, the GIL released; < 0: for ever); None on "
           "timeout or once stopped.")
      .def("end_lost", [](Rendezvous& r) { r.rv_->end_lost(); },
           "next_lost() returns None from now on (its follower ends before the interpreter "
           "finalizes).")
      .def("watch", [](Rendezvous& r, std::int64_t step, const std::string& name) {
             r.rv_->table().watch(step, name);
           }, "step"_a, "name"_a,
           "Note each recv of `name` at `step` that waits for a send of this task, now or "
           "later, for next_unmatched(), until unwatch().")
      .def("unwatch", [](Rendezvous& r, std::int64_t step, const std::string& name) {
             r.rv_->table().unwatch(step, name);
           }, "step"_a, "name"_a, "Stop noting the recvs of `name` at `step`.")
      .def("next_unmatched", &Rendezvous::next_unmatched, "timeout"_a,
           "(step, src, dst, name) of the next recv of a watched name that waits (up to "
           "`timeout` s, the GIL released; < 0: for ever); None on timeout or once stopped.")
      .def("end_unmatched", [](Rendezvous& r) { r.rv_->table().unmatched().end(); },
           "next_unmatched() returns None from now on.")
      .def("ready", [](const Rendezvous& r, std::int32_t peer) { return r.rv_->ready(peer); },
           "peer"_a, "Whether the channel to `peer` is connected and working.")
      .def("send", &Rendezvous::send, "step"_a, "dst"_a, "name"_a, "dtype"_a, "shape"_a,
           "is_dead"_a, "data"_a, "ticket"_a.none() = nb::none(),
           "Offer a tensor: `data` exports its bytes (buffer protocol); `ticket` (a "
           "SendTicket) is told when the receiver has it.")
      .def("send_many", &Rendezvous::send_many, "steps"_a, "dsts"_a, "names"_a, "dtypes"_a,
           "shapes"_a, "deads"_a, "datas"_a, "tickets"_a,
           "Offer many tensors in order, the GIL released once, each as `send` would: (-1, "
           "0, '') once all are, else (index, code, message) of the first refused, the later "
           "ones not offered.")
      .def("broadcast", &Rendezvous::broadcast, "step"_a, "dsts"_a, "name"_a, "dtype"_a, "shape"_a,
           "is_dead"_a, "data"_a, "tickets"_a,
           "Offer one tensor to each of `dsts` (a SendTicket each in `tickets`), its bytes "
           "registered once for all: (code, message) of each send, in order.")
      .def("recv_many", &Rendezvous::recv_many, "steps"_a, "srcs"_a, "names"_a, "timeout"_a,
           "hand"_a.none(),
           "Receive many tensors (blocking, the GIL released once): each entry's (code, "
           "message, dtype, shape, is_dead, payload), in entry order, also put in "
           "`hand.held` (unless None) as (core, steps, srcs, names, answers) before they are "
           "returned, so that a signal's handler that runs as the call returns (Ctrl-C during "
           "it) finds them there (tensorverbs.in_hand). "
           "Interrupted, every entry is given up and each tensor that came is kept for the "
           "next recv of it.")
      .def(
          "recv_blocks",
          [](Rendezvous& r, std::int64_t step, std::int32_t src, std::string name, std::int32_t dtype,
             TensorShape shape, std::uint64_t nbytes, nb::handle buffer, BlockRows rows, double timeout) {
            return recv_blocks(*r.rv_, step, src,
                               BlockBatch{std::move(name), dtype, std::move(shape), nbytes, buffer, rows},
                               timeout);
          },
          "step"_a, "src"_a, "name"_a, "dtype"_a, "shape"_a, "nbytes"_a, "buffer"_a, "rows"_a, "timeout"_a,
          "Receive blocks '<name>/<i>' (each of dtype, shape, nbytes bytes) into row rows[i] of "
          "`buffer` (blocking, the GIL released once; interrupted, each tensor that came is kept "
          "for the next recv of it): the entries that failed, as (index, code, message, theirs), "
          "theirs (dtype, shape, is_dead) of a tensor that does not fit its row (kept for the "
          "next recv of it), else None.")
      .def(
          "send_blocks",
          [](Rendezvous& r, std::int64_t step, std::int32_t dst, std::string name, std::int32_t dtype,
             TensorShape shape, std::uint64_t nbytes, nb::handle buffer, BlockRows rows,
             std::shared_ptr<SendTicket> ticket) {
            return send_blocks(*r.rv_, step, dst,
                               BlockBatch{std::move(name), dtype, std::move(shape), nbytes, buffer, rows},
                               std::move(ticket));
          },
          "step"_a, "dst"_a, "name"_a, "dtype"_a, "shape"_a, "nbytes"_a, "buffer"_a, "rows"_a, "ticket"_a,
          "Offer row rows[i] of `buffer` as tensor '<name>/<i>' (dtype, shape, nbytes bytes), "
          "the rows registered once for all, each carrying `ticket` (opened for len(rows) "
          "parts): (-1, 0, '') once all are, else (index, code, message) of the first refused "
          "(the later ones not offered, the ticket failed).")
      .def("recv", &Rendezvous::recv, "step"_a, "src"_a, "name"_a, "timeout"_a,
           "destination"_a.none(), "hand"_a.none(),
           "Receive (blocking, the GIL released): (code, message, dtype, shape, is_dead, payload), "
           "also put in `hand.held` (unless None) as (core, step, src, name, answer) before it "
           "is returned, as recv_many does. "
           "A tensor from a peer that fits `destination`, (dtype, shape, writable buffer), "
           "lands in it where it can (payload then views it).")
      .def("recv_async", &Rendezvous::recv_async, "step"_a, "src"_a, "name"_a, "timeout"_a,
           "future"_a, "parked"_a.none() = nb::none(), "call"_a.none() = nb::none(),
           "settle"_a.none() = nb::none(), "destination"_a = nb::none(),
           nb::sig("def recv_async(self, step: int, src: int, name: str, timeout: float, "
                   "future: object, parked: object | None = None, call: object | None = None, "
                   "settle: object | None = None, destination: object | None = None) "
                   "-> RecvHandle"),
           "Start a recv of `future` (a RecvFuture, told its RecvHandle by "
           "future.settled_by(handle, parked) before this returns: the handle is given up if "
           "that raises). settle(call, code, message, dtype, shape, is_dead, payload) is "
           "called with its answer (returning False if the recv was cancelled or the tensor "
           "is refused: it goes to the next recv); call.done() tells whether the recv's "
           "future is settled. Without call and settle the answer is parked in the handle "
           "until the future settles itself with it (`parked`: how). `destination` as for "
           "recv. The handle.")
      .def("give_back", &Rendezvous::give_back, "step"_a, "src"_a, "name"_a, "dtype"_a,
           "shape"_a, "is_dead"_a, "payload"_a,
           "Hand a received tensor its caller refused to the next recv of its key and step.")
      .def("abort_step", &Rendezvous::abort_step, "step"_a, "code"_a, "message"_a)
      .def("cleanup_step", &Rendezvous::cleanup_step, "step"_a)
      .def("allocate", &Rendezvous::allocate, "nbytes"_a, "Registered memory, as a ByteView.")
      .def("stats", &Rendezvous::stats)
      .def("pending", [](const Rendezvous& r) { return r.rv_->pending(); })
      .def("table_steps", [](const Rendezvous& r) { return r.rv_->table_steps(); })
      .def_prop_ro("provider", [](const Rendezvous& r) { return r.rv_->provider(); })
      .def_prop_ro("device", [](const Rendezvous& r) { return r.rv_->device().name; })
      .def("stop", &Rendezvous::stop);
}

}  // namespace tensorverbs::binding
