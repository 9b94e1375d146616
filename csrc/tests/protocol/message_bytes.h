// Control messages and their bytes, for the tests of the messages that gather entries
// (TENSOR_REQUESTS, TENSOR_INLINES): the messages, encoding, a decode that must fail the
// channel, and a message given another tail.
#pragma once

#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/little_endian.h"
#include "protocol/rdma_message.h"

namespace tensorverbs::test {

using Bytes = std::vector<std::uint8_t>;

inline constexpr std::size_t kIndexAt = 523, kTailSizeAt = 813;

// A TENSOR_REQUESTS message of `entries`.
inline RdmaMessage requests(std::vector<RequestEntry> entries) {
  RdmaMessage message{MessageType::kTensorRequests, 0, "", 0, 0, 0, std::nullopt, 0, ""};
  message.requests = std::move(entries);
  return message;
}

// A TENSOR_INLINES message of `entries`.
inline RdmaMessage inlines(std::vector<InlineEntry> entries) {
  RdmaMessage message{MessageType::kTensorInlines, 0, "", 0, 0, 0, std::nullopt, 0, ""};
  message.inlines = std::move(entries);
  return message;
}

inline Bytes encode(const RdmaMessage& message) {
  std::array<std::uint8_t, kSlotBytes> slot{};
  const EncodeResult result = encode_into(message, slot.data());
  EXPECT_EQ(result.error, "");
  return Bytes(slot.begin(), slot.begin() + static_cast<std::ptrdiff_t>(result.size));
}

// The error decoding `bytes` gives: it names no request.
inline std::string decode_error(const Bytes& bytes) {
  const DecodeResult result = decode(bytes.data(), bytes.size());
  EXPECT_FALSE(result.message.has_value());
  EXPECT_FALSE(result.error.request_index.has_value());
  EXPECT_FALSE(result.error.type.has_value());
  return result.error.message;
}

// `bytes` with the tail replaced by `tail`.
inline Bytes with_tail(Bytes bytes, const Bytes& tail) {
  bytes.resize(kHeaderBytes);
  bytes.insert(bytes.end(), tail.begin(), tail.end());
  little_endian::store(&bytes[kTailSizeAt], static_cast<std::uint32_t>(tail.size()));
  return bytes;
}

}  // namespace tensorverbs::test
