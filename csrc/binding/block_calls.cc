#include "binding/block_calls.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "binding/gil_released.h"
#include "binding/interruptible_wait.h"
#include "binding/py_ref.h"
#include "binding/recv_callbacks.h"
#include "binding/tensor_shape_caster.h"
#include "protocol/held_messages.h"
#include "protocol/shared_registration.h"
#include "protocol/tensor_source.h"

namespace nb = nanobind;

namespace tensorverbs::binding {

namespace {

// A batch holds its channels' messages while it starts this many entries at most (as
// recv_many does): its requests to a peer go out as few TENSOR_REQUESTS messages.
constexpr std::size_t kHeldEntries = 1024;

// The rows of a batch in its buffer: where row 0 starts, and the lowest and highest row.
struct Rows {
  std::uint8_t* base = nullptr;
  std::int64_t low = 0;
  std::int64_t high = -1;
};

// Checks `batch` against its buffer (ValueError: a row past its end; BufferError: the
// buffer is not C-contiguous, or read-only when `writable`).
Rows rows_of(const BlockBatch& batch, bool writable) {
  Py_buffer view;
  const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
  if (PyObject_GetBuffer(batch.buffer.ptr(), &view, flags) != 0) throw nb::python_error();
  Rows rows{static_cast<std::uint8_t*>(view.buf), 0, -1};
  const auto length = static_cast<std::uint64_t>(view.len);
  PyBuffer_Release(&view);  // the object itself keeps the memory alive
  const std::size_t n = batch.rows.shape(0);
  const std::int64_t* row = batch.rows.data();
  if (n == 0) return rows;
  rows.low = *std::min_element(row, row + n);
  rows.high = *std::max_element(row, row + n);
  const std::uint64_t count = batch.nbytes ? length / batch.nbytes : UINT64_MAX;
  if (rows.low < 0 || static_cast<std::uint64_t>(rows.high) >= count) {
    throw nb::value_error("a block's row lies outside the buffer");
  }
  return rows;
}

std::string entry_name(const std::string& name, std::size_t index) {
  std::string out;
  out.reserve(name.size() + 21);
  out += name;
  out += '/';
  out += std::to_string(index);
  return out;
}

}  // namespace

nb::list recv_blocks(RdmaRendezvous& rv, std::int64_t step, std::int32_t src,
                     const BlockBatch& batch, double timeout) {
  const Rows rows = rows_of(batch, true);
  const std::size_t n = batch.rows.shape(0);
  const std::int64_t* row = batch.rows.data();
  const std::shared_ptr<const void> owner = keep(batch.buffer.ptr());
  auto waiting = std::make_shared<BatchRecv>(n);
  std::vector<std::shared_ptr<PendingRecv>> pending(n);
  const auto where = [&](std::size_t i) {
    return rows.base + static_cast<std::uint64_t>(row[i]) * batch.nbytes;
  };
  {
    GilReleased release;
    for (std::size_t first = 0; first < n; first += kHeldEntries) {
      HeldMessages held;  // the requests to the peer go out together, as few messages
      for (std::size_t i = first; i < std::min(n, first + kHeldEntries); ++i) {
        pending[i] = rv.recv(step, src, entry_name(batch.name, i), timeout, waiting->entry(i),
                             RecvDestination{batch.dtype, batch.shape, where(i), batch.nbytes, owner});
      }
    }
  }
  // An entry's tensor that came, kept for the next recv of it (a copy of one that landed in
  // its row, which is the caller's: keep_late copies what is borrowed).
  const auto keep_came = [&](std::vector<RecvResult>& results, std::size_t i) {
    if (!results[i].status.ok()) return;
    TensorValue value = std::move(results[i].value);
    if (value.data == where(i)) value.borrowed = true;
    rv.keep_late(StepKey{step, RendezvousKey{src, rv.task(), entry_name(batch.name, i)}}, std::move(value));
  };
  wait_interruptibly(*waiting, [&] {
    for (auto& recv : pending) {
      if (recv) recv->give_up(Status(Code::kCancelled, "the recv was interrupted"));
    }
    waiting->wait();
    std::vector<RecvResult> results = waiting->take();
    for (std::size_t i = 0; i < n; ++i) keep_came(results, i);
  });
  std::vector<RecvResult> results = waiting->take();
  std::vector<std::size_t> refused;
  {
    GilReleased release;
    const RecvDestination fit{batch.dtype, batch.shape, nullptr, batch.nbytes, nullptr};
    for (std::size_t i = 0; i < n; ++i) {
      const TensorValue& value = results[i].value;
      if (!results[i].status.ok() || value.data == where(i)) continue;  // failed, or landed
      if (fit.fits(value.meta)) {
        if (batch.nbytes) std::memcpy(where(i), value.data, batch.nbytes);
      } else {
        refused.push_back(i);
      }
    }
  }
  std::vector<TensorMeta> theirs;  // of each refused tensor, which goes to the next recv of it
  {
    GilReleased release;  // (kept before any Python object is made: none can fail it)
    for (std::size_t i : refused) {
      theirs.push_back(results[i].value.meta);
      keep_came(results, i);
    }
  }
  nb::list failed;
  std::size_t next_refused = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const RecvResult& result = results[i];
    if (!result.status.ok()) {
      failed.append(nb::make_tuple(i, static_cast<int>(result.status.code()), result.status.message(),
                                   nb::none()));
    } else if (next_refused < refused.size() && refused[next_refused] == i) {
      const TensorMeta& meta = theirs[next_refused++];
      failed.append(nb::make_tuple(i, static_cast<int>(Code::kInvalidArgument), "",
                                   nb::make_tuple(meta.dtype, nb::cast(meta.shape), meta.is_dead)));
    }
  }
  return failed;
}

std::tuple<std::int64_t, int, std::string> send_blocks(RdmaRendezvous& rv, std::int64_t step,
                                                       std::int32_t dst, const BlockBatch& batch,
                                                       std::shared_ptr<SendTicket> ticket) {
  const Rows rows = rows_of(batch, false);
  const std::size_t n = batch.rows.shape(0);
  const std::int64_t* row = batch.rows.data();
  TensorValue span;  // the rows from the lowest to the highest, registered once for all
  span.data = rows.base + static_cast<std::uint64_t>(rows.low) * batch.nbytes;
  span.meta.nbytes = static_cast<std::uint64_t>(rows.high - rows.low + 1) * batch.nbytes;
  span.keepalive = keep(batch.buffer.ptr());
  GilReleased release;
  // where block i is: its row of the span, or (small blocks spread over many more rows) its
  // place in a copy of the blocks alone
  std::vector<std::uint64_t> at(n);
  const std::uint64_t span_rows = static_cast<std::uint64_t>(rows.high - rows.low + 1);
  Result<PoolBuffer> gathered = Status(Code::kUnavailable, "");
  if (batch.nbytes < kStageBelow && span_rows > 2 * n) gathered = rv.allocate(n * batch.nbytes);
  if (gathered.ok()) {
    PoolBuffer copy = gathered.take();
    for (std::size_t i = 0; i < n; ++i) {
      at[i] = i * batch.nbytes;
      std::memcpy(copy->data() + at[i], rows.base + static_cast<std::uint64_t>(row[i]) * batch.nbytes,
                  batch.nbytes);
    }
    rv.counters().add(rv.counters().staging_copies);
    span.data = copy->data();
    span.keepalive = std::move(copy);
  } else {
    for (std::size_t i = 0; i < n; ++i) at[i] = static_cast<std::uint64_t>(row[i] - rows.low) * batch.nbytes;
    span = register_once(std::move(span), batch.nbytes, rv.pool(), rv.pd(), rv.counters());
  }
  for (std::size_t i = 0; i < n; ++i) {
    TensorValue value;
    value.meta = TensorMeta{batch.dtype, batch.shape, false, batch.nbytes};
    value.data = span.data + at[i];
    value.keepalive = span.keepalive;
    value.ticket = ticket;
    value.region = span.region;
    Status status = rv.send(step, dst, entry_name(batch.name, i), std::move(value));
    if (!status.ok()) {
      ticket->fail(status);
      return {static_cast<std::int64_t>(i), static_cast<int>(status.code()), status.message()};
    }
  }
  return {-1, 0, ""};
}

}  // namespace tensorverbs::binding
