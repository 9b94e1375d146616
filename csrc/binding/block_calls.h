// Blocks: many tensors of one dtype and shape, rows of one caller buffer (a paged KV cache),
// sent or received in one call with the GIL released once. Entry i is the tensor
// "<name>/<i>", an ordinary tensor on the wire (an ordinary recv or send of that name meets
// it); it is row rows[i] of the buffer. No Python object is made per entry: the rows come
// as one int64 array, and a received block lands in its row (or is copied there).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>

#include "protocol/rdma_rendezvous.h"
#include "protocol/send_completion.h"
#include "protocol/tensor_shape.h"

namespace tensorverbs::binding {

using BlockRows = nanobind::ndarray<const std::int64_t, nanobind::ndim<1>, nanobind::c_contig,
                                    nanobind::device::cpu>;

// What a batch of blocks is: "<name>/<i>" for i < rows.size(), each of `dtype` and `shape`,
// `nbytes` bytes, row rows[i] of `buffer` (a C-contiguous object exporting a buffer).
struct BlockBatch {
  std::string name;
  std::int32_t dtype = 0;
  TensorShape shape;
  std::uint64_t nbytes = 0;
  nanobind::handle buffer;
  BlockRows rows;
};

// Receives the batch from `src` at `step` into its rows (blocking; Ctrl-C gives every entry
// up, each tensor that came kept for the next recv of it, a copy of one that had landed). The entries that failed, as
// (index, code, message, theirs): theirs is (dtype, shape, is_dead) of a tensor that came
// but does not fit its row (it is kept for the next recv of it), else None.
nanobind::list recv_blocks(RdmaRendezvous& rv, std::int64_t step, std::int32_t src,
                           const BlockBatch& batch, double timeout);

// Offers each block to `dst` at `step`, its bytes registered (or staged) once for all; every
// block carries `ticket` (opened for rows.size() parts). (-1, 0, "") once all are offered,
// else (index, code, message) of the first refused (the later ones are not offered, and the
// ticket is failed).
std::tuple<std::int64_t, int, std::string> send_blocks(RdmaRendezvous& rv, std::int64_t step,
                                                       std::int32_t dst, const BlockBatch& batch,
                                                       std::shared_ptr<SendTicket> ticket);

}  // namespace tensorverbs::binding
