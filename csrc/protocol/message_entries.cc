#include "protocol/message_entries.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/little_endian.h"
#include "protocol/utf8.h"

namespace tensorverbs {

std::string hex(std::uint64_t value) {
  std::string digits;
  do {
    digits.insert(digits.begin(), "0123456789abcdef"[value & 0xF]);
    value >>= 4;
  } while (value != 0);
  return "0x" + digits;
}

std::string format_list(const TensorShape& dims) {
  std::string text = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) text += (i ? ", " : "") + std::to_string(dims[i]);
  return text + "]";
}

std::string requests_tail(const std::vector<RequestEntry>& requests, std::string* error) {
  if (requests.empty()) {
    *error = "TENSOR_REQUESTS without requests";
    return "";
  }
  std::string tail;
  for (const RequestEntry& request : requests) {
    if (request.name.empty() || request.name.size() > kNameBytes ||
        !utf8::is_valid(request.name)) {
      *error = "a request's tensor name is empty, longer than " + std::to_string(kNameBytes) +
               " bytes or not UTF-8";
      return "";
    }
    if (request.index > kMaxRequestIndex) {
      *error = "request index " + hex(request.index) + " is out of range";
      return "";
    }
    std::uint8_t fixed[14];
    little_endian::store(fixed, request.index);
    little_endian::store(fixed + 4, request.step_id);
    little_endian::store(fixed + 12, static_cast<std::uint16_t>(request.name.size()));
    tail.append(reinterpret_cast<const char*>(fixed), sizeof fixed);
    tail += request.name;
  }
  if (tail.size() > kMaxTailBytes) {
    *error = "a TENSOR_REQUESTS tail of " + std::to_string(tail.size()) + " bytes does not fit a message";
  }
  return tail;
}

std::optional<std::vector<RequestEntry>> parse_requests(const std::uint8_t* tail, std::size_t size,
                                                        std::string* why) {
  std::vector<RequestEntry> requests;
  std::size_t at = 0;
  while (at < size) {
    if (size - at < 14) {
      *why = "a request cut short after " + std::to_string(requests.size()) + " requests";
      return std::nullopt;
    }
    RequestEntry request;
    request.index = little_endian::load<std::uint32_t>(tail + at);
    request.step_id = little_endian::load<std::int64_t>(tail + at + 4);
    const auto name_size = little_endian::load<std::uint16_t>(tail + at + 12);
    at += 14;
    if (request.index > kMaxRequestIndex) {
      *why = "request index " + hex(request.index) + " is out of range";
      return std::nullopt;
    }
    if (name_size == 0 || name_size > kNameBytes || name_size > size - at) {
      *why = "a request's name_size of " + std::to_string(name_size) + " with " +
             std::to_string(size - at) + " bytes left";
      return std::nullopt;
    }
    request.name.assign(reinterpret_cast<const char*>(tail + at), name_size);
    at += name_size;
    if (!utf8::is_valid(request.name)) {
      *why = "a request's tensor name is not UTF-8";
      return std::nullopt;
    }
    requests.push_back(std::move(request));
  }
  if (requests.empty()) *why = "no requests";
  if (requests.empty()) return std::nullopt;
  return requests;
}

std::string inlines_error(const std::vector<InlineEntry>& inlines) {
  if (inlines.empty()) return "TENSOR_INLINES without tensors";
  std::size_t bytes = 0;
  for (const InlineEntry& entry : inlines) {
    if (entry.index > kMaxRequestIndex) {
      return "request index " + hex(entry.index) + " is out of range";
    }
    if (entry.meta.dtype == 0 || entry.meta.shape.size() > kMaxRank) {
      return "an inline tensor without a data_type or of rank " +
             std::to_string(entry.meta.shape.size());
    }
    if (entry.meta.nbytes != 0 && entry.payload == nullptr) {
      return "an inline tensor without its bytes";
    }
    if (entry.meta.nbytes > kMaxTailBytes) {  // (before the sum, which it could wrap)
      return "an inline tensor of " + std::to_string(entry.meta.nbytes) +
             " bytes does not fit a message";
    }
    bytes += inline_entry_bytes(entry.meta);
  }
  if (bytes > kMaxTailBytes) {
    return "a TENSOR_INLINES tail of " + std::to_string(bytes) + " bytes does not fit a message";
  }
  return "";
}

std::size_t write_inlines(const std::vector<InlineEntry>& inlines, std::uint8_t* out) {
  namespace le = little_endian;
  std::uint8_t* at = out;
  for (const InlineEntry& entry : inlines) {
    const TensorMeta& meta = entry.meta;
    le::store(at, entry.index);
    at[4] = meta.is_dead ? 1 : 0;
    le::store(at + 5, meta.dtype);
    at[9] = static_cast<std::uint8_t>(meta.shape.size());
    le::store(at + 10, meta.nbytes);
    at += 18;
    for (const std::int64_t dim : meta.shape) {
      le::store(at, dim);
      at += 8;
    }
    if (meta.nbytes != 0) std::memcpy(at, entry.payload, meta.nbytes);
    at += meta.nbytes;
  }
  return static_cast<std::size_t>(at - out);
}

std::optional<std::vector<InlineEntry>> parse_inlines(const std::uint8_t* tail, std::size_t size,
                                                      std::string* why) {
  namespace le = little_endian;
  std::vector<InlineEntry> inlines;
  std::size_t at = 0;
  while (at < size) {
    const std::size_t number = inlines.size();  // (named only in an error)
    const auto which = [number] { return "inline tensor " + std::to_string(number); };
    if (size - at < 18) {
      *why = which() + " cut short";
      return std::nullopt;
    }
    InlineEntry entry;
    entry.index = le::load<std::uint32_t>(tail + at);
    const std::uint8_t is_dead = tail[at + 4];
    const auto dtype = le::load<std::int32_t>(tail + at + 5);
    const std::uint8_t rank = tail[at + 9];
    const auto nbytes = le::load<std::uint64_t>(tail + at + 10);
    at += 18;
    if (entry.index > kMaxRequestIndex) {
      *why = which() + ": request index " + hex(entry.index) + " is out of range";
      return std::nullopt;
    }
    if (is_dead > 1 || rank > kMaxRank || !find_data_type(dtype)) {
      *why = which() + ": is_dead=" + std::to_string(is_dead) + ", rank=" + std::to_string(rank) +
             ", data_type=" + std::to_string(dtype);
      return std::nullopt;
    }
    if (size - at < 8 * std::size_t{rank}) {
      *why = which() + ": its dims cut short";
      return std::nullopt;
    }
    std::array<std::int64_t, kMaxRank> dims;
    for (std::size_t i = 0; i < rank; ++i) dims[i] = le::load<std::int64_t>(tail + at + 8 * i);
    at += 8 * std::size_t{rank};
    entry.meta = TensorMeta{dtype, TensorShape(dims.data(), rank), is_dead == 1, nbytes};
    if (std::any_of(entry.meta.shape.begin(), entry.meta.shape.end(),
                    [](std::int64_t d) { return d < 0; })) {
      *why = which() + ": invalid shape " + format_list(entry.meta.shape);
      return std::nullopt;
    }
    if (entry.meta.dmaable()) {
      if (std::optional<std::string> bad = entry.meta.check()) {
        *why = which() + ": " + *bad;
        return std::nullopt;
      }
    }
    if (nbytes > size - at) {
      *why = which() + ": " + std::to_string(nbytes) + " bytes with " + std::to_string(size - at) +
             " left";
      return std::nullopt;
    }
    entry.payload = tail + at;
    at += nbytes;
    inlines.push_back(std::move(entry));
  }
  if (inlines.empty()) {
    *why = "no tensors";
    return std::nullopt;
  }
  return inlines;
}

}  // namespace tensorverbs
