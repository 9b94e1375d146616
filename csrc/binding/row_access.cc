#include "binding/row_access.h"

#include <nanobind/nanobind.h>

#include <algorithm>
#include <string>
#include <vector>

#include "binding/gil_released.h"
#include "binding/status_error.h"

namespace nb = nanobind;

namespace tensorverbs::binding {

namespace {

bool in_range(std::int64_t row, std::uint64_t rows) {
  return row >= 0 && static_cast<std::uint64_t>(row) < rows;
}

// Whether row `row` is the one after `before` (compared unsigned: no overflow).
bool follows(std::int64_t row, std::int64_t before) {
  return static_cast<std::uint64_t>(row) == static_cast<std::uint64_t>(before) + 1;
}

}  // namespace

std::size_t post_rows(verbs::QueuePair& qp, const RowAccess& access, const RowIndex& src,
                      const RowIndex& dst, std::size_t first, std::size_t max_requests) {
  const std::size_t n = src.shape(0);
  if (dst.shape(0) != n) throw nb::value_error("the source and destination rows differ in number");
  if (first > n) throw nb::value_error("the first entry lies past the last");
  if (access.row_bytes == 0 || max_requests == 0) throw nb::value_error("a row access moves whole rows");
  max_requests = std::min<std::size_t>(max_requests, kMaxRowWindow);
  const std::int64_t* from = src.data();
  const std::int64_t* to = dst.data();
  std::vector<verbs::SendWr> wrs;
  wrs.reserve(std::min<std::size_t>(max_requests, n - first));
  std::size_t i = first;
  std::string refused;
  Status posted;
  {
    GilReleased release;
    while (i < n && wrs.size() < max_requests) {
      if (!in_range(from[i], access.remote_rows) || !in_range(to[i], access.local_rows)) {
        refused = "entry " + std::to_string(i) + "'s row lies outside its buffer";
        break;
      }
      // the run: the entries whose rows follow entry i's on both sides, as many as the
      // requests left in this window move
      const std::uint64_t room = (max_requests - wrs.size()) * kMaxRowRequestBytes;
      if (access.row_bytes > room) {
        if (wrs.empty()) refused = "a row of " + std::to_string(access.row_bytes) + " bytes is too large";
        break;  // (else the next window takes it)
      }
      std::size_t end = i + 1;
      while (end < n && follows(from[end], from[end - 1]) && follows(to[end], to[end - 1]) &&
             in_range(from[end], access.remote_rows) && in_range(to[end], access.local_rows) &&
             static_cast<std::uint64_t>(end + 1 - i) * access.row_bytes <= room) {
        ++end;
      }
      const std::uint64_t length = static_cast<std::uint64_t>(end - i) * access.row_bytes;
      const std::uint64_t local = access.local_base + static_cast<std::uint64_t>(to[i]) * access.row_bytes;
      const std::uint64_t remote = access.remote_base + static_cast<std::uint64_t>(from[i]) * access.row_bytes;
      for (std::uint64_t at = 0; at < length; at += kMaxRowRequestBytes) {
        verbs::SendWr wr;
        wr.wr_id = i;
        wr.opcode = access.opcode;
        wr.sge = verbs::Sge{local + at, static_cast<std::uint32_t>(std::min(kMaxRowRequestBytes, length - at)),
                            access.lkey};
        wr.remote_addr = remote + at;
        wr.rkey = access.rkey;
        wr.signaled = false;
        wrs.push_back(wr);
      }
      i = end;
    }
    if (refused.empty() && !wrs.empty()) {  // (a window with a refused entry posts nothing)
      wrs.back().signaled = true;
      wrs.back().wr_id |= kWindowEnd;
      posted = qp.post_send(wrs.data(), wrs.size());
    }
  }
  if (!refused.empty()) throw nb::value_error(refused.c_str());
  if (!posted.ok()) raise(posted);
  return i;
}

}  // namespace tensorverbs::binding
