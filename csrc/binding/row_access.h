// Row access: one-sided reads (or writes) of many blocks of one size between the rows of a
// local buffer and the rows of a peer's registered buffer, posted from two index arrays
// with no Python object per entry (Server.read_blocks). Runs of rows that follow each
// other on both sides go as one work request.
#pragma once

#include <nanobind/ndarray.h>

#include <cstddef>
#include <cstdint>

#include "verbs/queue_pair.h"
#include "verbs/work.h"

namespace tensorverbs::binding {

using RowIndex = nanobind::ndarray<const std::int64_t, nanobind::ndim<1>, nanobind::c_contig,
                                   nanobind::device::cpu>;

// What a row access moves: `row_bytes` per entry, between local row dst[i] of the
// `local_rows` rows at `local_base` (registered under `lkey`) and remote row src[i] of the
// `remote_rows` rows at `remote_base` (under `rkey`).
struct RowAccess {
  verbs::WrOpcode opcode = verbs::WrOpcode::kRdmaRead;
  std::uint64_t local_base = 0;
  std::uint32_t lkey = 0;
  std::uint64_t local_rows = 0;
  std::uint64_t remote_base = 0;
  std::uint32_t rkey = 0;
  std::uint64_t remote_rows = 0;
  std::uint64_t row_bytes = 0;
};

// The most bytes one work request of a row access moves (SGE lengths are 32-bit).
inline constexpr std::uint64_t kMaxRowRequestBytes = std::uint64_t{1} << 30;

// The most work requests one post_rows call posts.
inline constexpr std::size_t kMaxRowWindow = 1 << 16;

// The bit of the wr_id of a window's last work request (its only signaled one).
inline constexpr std::uint64_t kWindowEnd = std::uint64_t{1} << 63;

// Posts the entries of `src`/`dst` from `first` on, at most `max_requests` work requests,
// of which only the last is signaled (its wr_id has kWindowEnd set); each request's wr_id
// is the first entry of its run, and a failed one completes all the same. Returns the entry after the last one posted (the GIL released
// meanwhile). ValueError for arrays of different lengths, a row out of its buffer, or
// `first` past the end; the status of a post the queue pair refuses, raised.
std::size_t post_rows(verbs::QueuePair& qp, const RowAccess& access, const RowIndex& src,
                      const RowIndex& dst, std::size_t first, std::size_t max_requests);

}  // namespace tensorverbs::binding
