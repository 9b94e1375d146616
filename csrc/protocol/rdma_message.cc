#include "protocol/rdma_message.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <utility>

#include "core/little_endian.h"
#include "protocol/error_status.h"
#include "protocol/message_entries.h"
#include "protocol/utf8.h"

namespace tensorverbs {

namespace {

// Whether every byte of `bytes` from `from` on is zero (eight at a time: the name field of
// every message is checked, 512 bytes, mostly padding).
bool zero_from(std::string_view bytes, std::size_t from) {
  std::size_t i = from;
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    if (word != 0) return false;
  }
  for (; i < bytes.size(); ++i) {
    if (bytes[i] != '\0') return false;
  }
  return true;
}

namespace offset {
constexpr std::size_t kType = 0;
constexpr std::size_t kNameSize = kType + 1;
constexpr std::size_t kName = kNameSize + 2;
constexpr std::size_t kStepId = kName + kNameBytes;
constexpr std::size_t kRequestIndex = kStepId + 8;
constexpr std::size_t kRemoteAddr = kRequestIndex + 8;
constexpr std::size_t kRkey = kRemoteAddr + 8;
constexpr std::size_t kIsDead = kRkey + 4;
constexpr std::size_t kDataType = kIsDead + 1;
constexpr std::size_t kRank = kDataType + 4;
constexpr std::size_t kDims = kRank + 1;
constexpr std::size_t kTensorBytes = kDims + 8 * kMaxRank;
constexpr std::size_t kTailSize = kTensorBytes + 8;
constexpr std::size_t kAcked = kTailSize + 4;
constexpr std::size_t kEnd = kAcked + 4;
}  // namespace offset
static_assert(offset::kEnd == kHeaderBytes);

constexpr std::uint8_t kMessageTypes = 9;

std::string type_name(std::uint8_t type) {
  constexpr const char* kNames[kMessageTypes] = {
      "META_DATA_RESPONSE", "TENSOR_RE_REQUEST", "TENSOR_REQUEST", "ERROR_STATUS",
      "RELEASE",            "CANCEL",            "TENSOR_INLINE",  "TENSOR_REQUESTS",
      "TENSOR_INLINES"};
  return type < kMessageTypes ? kNames[type] : "type-" + std::to_string(type);
}

// The ErrorStatus of `code` and `text`, the text cut (at a character boundary, "..."
// added) so that it fits a message slot.
std::string error_status_bytes(std::int32_t code, const std::string& text) {
  std::string bytes = ErrorStatus{code, text}.serialize();
  if (bytes.size() <= kMaxErrorBytes) return bytes;
  const std::size_t excess = bytes.size() - kMaxErrorBytes;
  const std::size_t budget = text.size() > excess + 3 ? text.size() - excess - 3 : 0;
  return ErrorStatus{code, std::string(utf8::cut(text, budget)) + "..."}.serialize();
}

DecodeResult failure(std::string message, std::optional<std::uint64_t> request_index = {},
                     std::optional<MessageType> type = {}) {
  return DecodeResult{std::nullopt, MessageError{std::move(message), request_index, type}};
}

}  // namespace

bool RdmaMessage::operator==(const RdmaMessage& other) const {
  return type == other.type && request_index == other.request_index && name == other.name &&
         step_id == other.step_id && remote_addr == other.remote_addr && rkey == other.rkey &&
         meta == other.meta && error_code == other.error_code &&
         error_message == other.error_message && acked == other.acked &&
         payload_size == other.payload_size &&
         (payload_size == 0 || std::equal(payload, payload + payload_size, other.payload)) &&
         requests == other.requests && inlines == other.inlines;
}

bool InlineEntry::operator==(const InlineEntry& other) const {
  return index == other.index && meta == other.meta &&
         (meta.nbytes == 0 || std::equal(payload, payload + meta.nbytes, other.payload));
}

namespace {

// What encode_error() says of `message` but for a TENSOR_REQUESTS tail (which encoding builds
// once, saying why it cannot).
std::string header_error(const RdmaMessage& message) {
  if (message.name.size() > kNameBytes) {
    return "tensor name of " + std::to_string(message.name.size()) + " bytes does not fit a message";
  }
  if (!utf8::is_valid(message.name)) return "tensor name is not UTF-8";
  const TensorMeta* meta = message.meta ? &*message.meta : nullptr;
  if (meta && meta->shape.size() > kMaxRank) {
    return "tensor of rank " + std::to_string(meta->shape.size()) + " does not fit a message";
  }
  if (message.type == MessageType::kErrorStatus && !utf8::is_valid(message.error_message)) {
    return "error message is not UTF-8";
  }
  if (message.type == MessageType::kTensorInline &&
      (!meta || message.payload_size != meta->nbytes || message.payload_size > kMaxTailBytes)) {
    return "an inline payload of " + std::to_string(message.payload_size) +
           " bytes does not fit this message";
  }
  return "";
}

}  // namespace

std::string encode_error(const RdmaMessage& message) {
  std::string why = header_error(message);
  if (why.empty() && message.type == MessageType::kTensorRequests) {
    requests_tail(message.requests, &why);
  }
  if (why.empty() && message.type == MessageType::kTensorInlines) {
    why = inlines_error(message.inlines);
  }
  return why;
}

EncodeResult encode_into(const RdmaMessage& message, std::uint8_t* slot) {
  if (std::string why = header_error(message); !why.empty()) return {0, why};
  const TensorMeta* meta = message.meta ? &*message.meta : nullptr;
  std::string error;
  const std::uint8_t* tail = nullptr;
  std::size_t tail_size = 0;
  if (message.type == MessageType::kErrorStatus) {
    error = error_status_bytes(message.error_code, message.error_message);
    tail = reinterpret_cast<const std::uint8_t*>(error.data());
    tail_size = error.size();
  } else if (message.type == MessageType::kTensorInline) {
    tail = message.payload;
    tail_size = message.payload_size;
  } else if (message.type == MessageType::kTensorRequests) {
    std::string why;
    error = requests_tail(message.requests, &why);
    if (!why.empty()) return {0, why};
    tail = reinterpret_cast<const std::uint8_t*>(error.data());
    tail_size = error.size();
  } else if (message.type == MessageType::kTensorInlines) {
    if (std::string why = inlines_error(message.inlines); !why.empty()) return {0, why};
    tail_size = write_inlines(message.inlines, slot + kHeaderBytes);  // (in place: no copy aside)
  }
  namespace le = little_endian;
  std::fill(slot, slot + kHeaderBytes, std::uint8_t{0});
  slot[offset::kType] = static_cast<std::uint8_t>(message.type);
  le::store(slot + offset::kNameSize, static_cast<std::uint16_t>(message.name.size()));
  std::copy(message.name.begin(), message.name.end(), slot + offset::kName);
  le::store(slot + offset::kStepId, message.step_id);
  le::store(slot + offset::kRequestIndex, message.request_index);
  le::store(slot + offset::kRemoteAddr, message.remote_addr);
  le::store(slot + offset::kRkey, message.rkey);
  if (meta) {
    slot[offset::kIsDead] = meta->is_dead ? 1 : 0;
    le::store(slot + offset::kDataType, meta->dtype);
    slot[offset::kRank] = static_cast<std::uint8_t>(meta->shape.size());
    for (std::size_t i = 0; i < meta->shape.size(); ++i) {
      le::store(slot + offset::kDims + 8 * i, meta->shape[i]);
    }
    le::store(slot + offset::kTensorBytes, meta->nbytes);
  }
  le::store(slot + offset::kTailSize, static_cast<std::uint32_t>(tail_size));
  le::store(slot + offset::kAcked, message.acked);
  if (tail != nullptr && tail_size != 0) std::copy(tail, tail + tail_size, slot + kHeaderBytes);
  return {kHeaderBytes + tail_size, ""};
}

DecodeResult decode(const std::uint8_t* data, std::size_t size) {
  if (size < kHeaderBytes) {
    return failure("message of " + std::to_string(size) + " bytes is shorter than the " +
                   std::to_string(kHeaderBytes) + "-byte header");
  }
  namespace le = little_endian;
  const std::uint8_t raw_type = data[offset::kType];
  const auto name_size = le::load<std::uint16_t>(data + offset::kNameSize);
  const std::string_view name_field(reinterpret_cast<const char*>(data + offset::kName),
                                    kNameBytes);
  const auto step_id = le::load<std::int64_t>(data + offset::kStepId);
  const auto index = le::load<std::uint64_t>(data + offset::kRequestIndex);
  const auto remote_addr = le::load<std::uint64_t>(data + offset::kRemoteAddr);
  const auto rkey = le::load<std::uint32_t>(data + offset::kRkey);
  const std::uint8_t is_dead = data[offset::kIsDead];
  const auto dtype = le::load<std::int32_t>(data + offset::kDataType);
  const std::uint8_t rank = data[offset::kRank];
  std::array<std::int64_t, kMaxRank> all_dims;  // (on the stack: one decode per message)
  for (std::size_t i = 0; i < kMaxRank; ++i) {
    all_dims[i] = le::load<std::int64_t>(data + offset::kDims + 8 * i);
  }
  const auto nbytes = le::load<std::uint64_t>(data + offset::kTensorBytes);
  const auto tail_size = le::load<std::uint32_t>(data + offset::kTailSize);
  const auto acked = le::load<std::uint32_t>(data + offset::kAcked);

  const auto type = static_cast<MessageType>(raw_type);
  // a TENSOR_REQUESTS or TENSOR_INLINES message names no one request
  const bool known = raw_type < kMessageTypes && index <= kMaxRequestIndex &&
                     type != MessageType::kTensorRequests && type != MessageType::kTensorInlines;
  const auto bad = [&](const std::string& why) {
    return failure("bad " + type_name(raw_type) + " message: " + why,
                   known ? std::optional<std::uint64_t>(index) : std::nullopt,
                   known ? std::optional<MessageType>(type) : std::nullopt);
  };

  if (index > kMaxRequestIndex) return bad("request index " + hex(index) + " is out of range");
  if (raw_type >= kMessageTypes) return bad("unknown type");
  if (name_size > kNameBytes) {
    return bad("name_size " + std::to_string(name_size) + " > " + std::to_string(kNameBytes));
  }
  const std::string_view name = name_field.substr(0, name_size);
  if (!utf8::is_valid(name)) return bad("tensor name is not UTF-8");
  if (!zero_from(name_field, name_size)) {
    return bad("bytes after the tensor name");
  }
  if (is_dead > 1 || rank > kMaxRank) {
    return bad("is_dead=" + std::to_string(is_dead) + ", rank=" + std::to_string(rank));
  }
  if (std::any_of(all_dims.begin() + rank, all_dims.end(), [](std::int64_t d) { return d != 0; })) {
    return bad("dimensions beyond the rank");
  }
  TensorShape dims(all_dims.data(), rank);
  std::optional<TensorMeta> meta;
  if (dtype != 0) {
    if (!find_data_type(dtype)) return bad("unknown data_type " + std::to_string(dtype));
    if (std::any_of(dims.begin(), dims.end(), [](std::int64_t d) { return d < 0; })) {
      return bad("invalid shape " + format_list(dims));
    }
    meta = TensorMeta{dtype, dims, is_dead == 1, nbytes};
    if (meta->dmaable()) {
      if (std::optional<std::string> why = meta->check()) return bad(*why);
    }
  } else if (rank != 0 || nbytes != 0 || is_dead != 0) {
    return bad("meta-data fields without a data_type");
  }
  if ((type == MessageType::kTensorRequest || type == MessageType::kTensorReRequest) &&
      name.empty()) {
    return bad("no tensor name");
  }
  if ((type == MessageType::kMetaDataResponse || type == MessageType::kTensorInline) && !meta) {
    return bad("no meta-data");
  }
  if (size != kHeaderBytes + std::uint64_t{tail_size}) {
    return bad(std::to_string(size) + " bytes for a message of " +
               std::to_string(kHeaderBytes + std::uint64_t{tail_size}));
  }
  ErrorStatus status;
  const std::uint8_t* payload = nullptr;
  std::vector<RequestEntry> requests;
  std::vector<InlineEntry> inlines;
  if (type == MessageType::kTensorRequests || type == MessageType::kTensorInlines) {
    if (!name.empty() || step_id != 0 || index != 0 || remote_addr != 0 || rkey != 0 || meta) {
      return bad(type == MessageType::kTensorRequests ? "fields beside the requests"
                                                      : "fields beside the tensors");
    }
    if (tail_size > kMaxTailBytes) return bad("a tail of " + std::to_string(tail_size) + " bytes");
    std::string why;
    if (type == MessageType::kTensorRequests) {
      std::optional<std::vector<RequestEntry>> parsed =
          parse_requests(data + kHeaderBytes, tail_size, &why);
      if (!parsed) return bad(why);
      requests = std::move(*parsed);
    } else {
      std::optional<std::vector<InlineEntry>> parsed =
          parse_inlines(data + kHeaderBytes, tail_size, &why);
      if (!parsed) return bad(why);
      inlines = std::move(*parsed);
    }
  } else if (type == MessageType::kTensorInline) {
    if (tail_size != meta->nbytes) {
      return bad("an inline payload of " + std::to_string(tail_size) + " bytes for a tensor of " +
                 std::to_string(meta->nbytes));
    }
    payload = data + kHeaderBytes;
  } else if (tail_size != 0) {
    if (type != MessageType::kErrorStatus || tail_size > kMaxErrorBytes) {
      return bad("a tail of " + std::to_string(tail_size) + " bytes");
    }
    std::optional<ErrorStatus> parsed = ErrorStatus::parse(data + kHeaderBytes, tail_size);
    if (!parsed) return bad("error_status is not an ErrorStatus proto");
    status = std::move(*parsed);
  }
  if (type == MessageType::kErrorStatus && !(status.code > 0 && status.code <= kMaxErrorCode)) {
    return bad("error code " + std::to_string(status.code));
  }
  RdmaMessage message{type,          index, std::string(name), step_id, remote_addr, rkey,
                      std::move(meta), status.code, std::move(status.message)};
  message.acked = acked;
  message.payload = payload;
  message.payload_size = payload ? tail_size : 0;
  message.requests = std::move(requests);
  message.inlines = std::move(inlines);
  return DecodeResult{std::move(message), MessageError{}};
}

}  // namespace tensorverbs
