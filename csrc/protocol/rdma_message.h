// RdmaMessage: the control messages of the grpc+verbs protocol, their fixed byte layout
// and its codec.
//
// Layout (little-endian, packed; Python's struct "<BH512sqQQIBiB32qQII"):
//   type u8 | name_size u16 | name 512 B | step_id i64 | request_index u64 |
//   remote_addr/checksum u64 | rkey u32 | is_dead u8 | data_type i32 |
//   tensor_shape (rank u8 + 32 x i64) | tensor_bytes u64 | tail_size u32 | acked u32 |
//   tail of tail_size bytes: ERROR_STATUS an ErrorStatus proto, TENSOR_INLINE the tensor,
//   TENSOR_REQUESTS its requests back to back, each
//     request_index u32 | step_id i64 | name_size u16 | name (name_size bytes)
//   (the header's other fields zero: the requests carry no meta-data and no landing),
//   TENSOR_INLINES its tensors back to back, each
//     request_index u32 | is_dead u8 | data_type i32 | rank u8 | tensor_bytes u64 |
//     dims (rank x i64) | the tensor (tensor_bytes bytes)
//   (the header's other fields zero, as for TENSOR_REQUESTS)
//
// `acked` counts the peer's messages the sender has taken (mod 2^32): the credits of the
// peer's message slots ride on every message.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "protocol/tensor_meta.h"

namespace tensorverbs {

// Request indices (the immediates of tensor writes) stay below the immediates of message
// writes and ACKs, 0xFFFFFFFF and 0xFFFFFFFE.
inline constexpr std::uint64_t kMaxRequestIndex = 0xFFFFFFFD;
inline constexpr std::size_t kNameBytes = 512;
inline constexpr std::size_t kSlotBytes = 8192;  // one message slot of a message buffer
inline constexpr std::size_t kHeaderBytes = 821;
inline constexpr std::size_t kMaxTailBytes = kSlotBytes - kHeaderBytes;
inline constexpr std::size_t kMaxErrorBytes = kMaxTailBytes;
inline constexpr std::int32_t kMaxErrorCode = 16;  // gRPC's largest status code, UNAUTHENTICATED

// Numbered as TensorFlow's RdmaMessageType, plus RELEASE (receiver -> sender: ends a
// read-mode transfer, as the paper's buffer release), CANCEL (receiver -> sender: withdraws
// a request whose caller gave up), TENSOR_INLINE (sender -> receiver: a small tensor
// carried in the message itself) and TENSOR_REQUESTS (receiver -> sender: several
// TENSOR_REQUESTs without meta-data or landing in one message, in order: the requests that
// waited for a message slot together) and TENSOR_INLINES (sender -> receiver: several
// TENSOR_INLINE answers in one message, in order: the small tensors that waited together).
enum class MessageType : std::uint8_t {
  kMetaDataResponse = 0,
  kTensorReRequest = 1,
  kTensorRequest = 2,
  kErrorStatus = 3,
  kRelease = 4,
  kCancel = 5,
  kTensorInline = 6,
  kTensorRequests = 7,
  kTensorInlines = 8,
};

// One request of a TENSOR_REQUESTS message.
struct RequestEntry {
  std::uint32_t index = 0;
  std::int64_t step_id = 0;
  std::string name;  // UTF-8, 1 to kNameBytes bytes

  bool operator==(const RequestEntry& other) const {
    return index == other.index && step_id == other.step_id && name == other.name;
  }
};

// The bytes a request with `name` takes in a TENSOR_REQUESTS message.
inline std::size_t request_entry_bytes(const std::string& name) { return 14 + name.size(); }

// One tensor of a TENSOR_INLINES message: the answer to request `index`.
struct InlineEntry {
  std::uint32_t index = 0;
  TensorMeta meta;
  // meta.nbytes bytes. Not owned: encoding reads them, decoding points into the bytes.
  const std::uint8_t* payload = nullptr;

  bool operator==(const InlineEntry& other) const;
};

// The bytes a tensor of `meta` takes in a TENSOR_INLINES message.
inline std::size_t inline_entry_bytes(const TensorMeta& meta) {
  return 18 + 8 * meta.shape.size() + meta.nbytes;
}

struct RdmaMessage {
  MessageType type = MessageType::kTensorRequest;
  std::uint64_t request_index = 0;
  std::string name;  // UTF-8, at most kNameBytes bytes
  std::int64_t step_id = 0;
  std::uint64_t remote_addr = 0;  // the checksum in META_DATA_RESPONSE
  std::uint32_t rkey = 0;
  std::optional<TensorMeta> meta;
  std::int32_t error_code = 0;  // ERROR_STATUS only, as error_message
  std::string error_message;    // UTF-8; cut to fit the slot when encoded
  std::uint32_t acked = 0;
  // TENSOR_INLINE: the tensor's bytes (meta->nbytes of them). Not owned: encoding reads
  // them, decoding points into the decoded bytes.
  const std::uint8_t* payload = nullptr;
  std::size_t payload_size = 0;
  // TENSOR_REQUESTS: its requests, in order (at most kMaxTailBytes of them encoded)
  std::vector<RequestEntry> requests{};
  // TENSOR_INLINES: its tensors, in order (at most kMaxTailBytes of them encoded)
  std::vector<InlineEntry> inlines{};

  bool operator==(const RdmaMessage& other) const;
};

// Why bytes are not a valid message. request_index and type are set, together, when the
// message can be attributed to one request (both were readable), so that the request
// fails instead of the channel.
struct MessageError {
  std::string message;
  std::optional<std::uint64_t> request_index;
  std::optional<MessageType> type;
};

struct DecodeResult {
  std::optional<RdmaMessage> message;  // the message, when the bytes are valid
  MessageError error;                  // otherwise why not
};

struct EncodeResult {
  std::size_t size = 0;  // bytes written
  std::string error;     // why nothing was written; empty on success
};

// Writes `message` at the start of `slot`, which has room for kSlotBytes. An error message
// too long for the slot is cut at a character boundary, "..." added. Fails for a name
// longer than kNameBytes, a rank above kMaxRank, text that is not UTF-8, an inline
// payload that is not meta->nbytes bytes or does not fit, TENSOR_REQUESTS without
// requests, with an empty name or an index above kMaxRequestIndex, or that do not fit, or
// TENSOR_INLINES without tensors, with an index above kMaxRequestIndex, a rank above
// kMaxRank, or that do not fit.
EncodeResult encode_into(const RdmaMessage& message, std::uint8_t* slot);
// Why encode_into() would refuse `message`; empty if it would not.
std::string encode_error(const RdmaMessage& message);

// Parses and validates one message; on malformed bytes, the error says why and, when the
// request index and type were readable, which request it is. Any bytes are safe.
DecodeResult decode(const std::uint8_t* data, std::size_t size);

}  // namespace tensorverbs
