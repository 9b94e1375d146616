#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "core/little_endian.h"
#include "protocol/error_status.h"
#include "protocol/rdma_message.h"

namespace tensorverbs {
namespace {

using Bytes = std::vector<std::uint8_t>;
namespace le = little_endian;

constexpr std::size_t kStepIdAt = 515, kIndexAt = 523, kRkeyAt = 539, kIsDeadAt = 543,
                      kDataTypeAt = 544, kRankAt = 548, kDimsAt = 549, kTensorBytesAt = 805,
                      kTailSizeAt = 813;

Bytes encode(const RdmaMessage& message) {
  std::array<std::uint8_t, kSlotBytes> slot{};
  const EncodeResult result = encode_into(message, slot.data());
  EXPECT_EQ(result.error, "");
  return Bytes(slot.begin(), slot.begin() + static_cast<std::ptrdiff_t>(result.size));
}

DecodeResult decode(const Bytes& bytes) { return tensorverbs::decode(bytes.data(), bytes.size()); }

RdmaMessage request() {
  return RdmaMessage{MessageType::kTensorRequest,      7, "w1", 3, 0x1000, 42,
                     TensorMeta{1, {2, 3}, false, 24}, 0, ""};
}

// The message `bytes` decode to; a test failure if they do not.
RdmaMessage decoded(const Bytes& bytes) {
  const DecodeResult result = decode(bytes);
  EXPECT_TRUE(result.message.has_value()) << result.error.message;
  return result.message.value_or(RdmaMessage{});
}

void expect_error(const Bytes& bytes, const std::string& message,
                  std::optional<std::uint64_t> index, std::optional<MessageType> type) {
  const DecodeResult result = decode(bytes);
  ASSERT_FALSE(result.message.has_value());
  EXPECT_EQ(result.error.message, message);
  EXPECT_EQ(result.error.request_index, index);
  EXPECT_EQ(result.error.type, type);
}

// `error` is a rejection of request()'s encoding, attributed to its request.
void expect_request_error(const Bytes& bytes, const std::string& why) {
  expect_error(bytes, "bad TENSOR_REQUEST message: " + why, 7, MessageType::kTensorRequest);
}

std::string repeat(const std::string& text, std::size_t times) {
  std::string out;
  for (std::size_t i = 0; i < times; ++i) out += text;
  return out;
}

RdmaMessage error_status(std::string text, std::int32_t code = 13) {
  RdmaMessage message{
      MessageType::kErrorStatus, 9, "", 0, 0, 0, std::nullopt, code, std::move(text)};
  return message;
}

const std::string kInlinePayload = "0123456789abcdef";

RdmaMessage inline_tensor(const std::string& payload) {
  RdmaMessage message{MessageType::kTensorInline, 5, "w", 1, 0, 0,
                      TensorMeta{4, {static_cast<std::int64_t>(payload.size())}, false, payload.size()},
                      0, ""};
  message.acked = 77;
  message.payload = reinterpret_cast<const std::uint8_t*>(payload.data());
  message.payload_size = payload.size();
  return message;
}

TEST(RdmaMessage, LaysFieldsOutAsMessagesPy) {
  const Bytes bytes = encode(request());
  ASSERT_EQ(bytes.size(), kHeaderBytes);
  EXPECT_EQ(bytes[0], 2);
  EXPECT_EQ(le::load<std::uint16_t>(&bytes[1]), 2);
  EXPECT_EQ(bytes[3], 'w');
  EXPECT_EQ(bytes[4], '1');
  EXPECT_EQ(le::load<std::int64_t>(&bytes[kStepIdAt]), 3);
  EXPECT_EQ(le::load<std::uint64_t>(&bytes[kIndexAt]), 7u);
  EXPECT_EQ(le::load<std::uint64_t>(&bytes[531]), 0x1000u);
  EXPECT_EQ(le::load<std::uint32_t>(&bytes[kRkeyAt]), 42u);
  EXPECT_EQ(bytes[kIsDeadAt], 0);
  EXPECT_EQ(le::load<std::int32_t>(&bytes[kDataTypeAt]), 1);
  EXPECT_EQ(bytes[kRankAt], 2);
  EXPECT_EQ(le::load<std::int64_t>(&bytes[kDimsAt]), 2);
  EXPECT_EQ(le::load<std::int64_t>(&bytes[kDimsAt + 8]), 3);
  EXPECT_EQ(le::load<std::uint64_t>(&bytes[kTensorBytesAt]), 24u);
  EXPECT_EQ(le::load<std::uint32_t>(&bytes[kTailSizeAt]), 0u);
  EXPECT_EQ(le::load<std::uint32_t>(&bytes[kTailSizeAt + 4]), 0u);  // acked
  EXPECT_EQ(kMaxErrorBytes, 7371u);
}

TEST(RdmaMessage, RoundTripsEveryType) {
  std::vector<RdmaMessage> messages = {
      request(),
      {MessageType::kMetaDataResponse, 0, "", -1, 0xDEADBEEF, 0, TensorMeta{7, {4}, true, 99}, 0,
       ""},
      {MessageType::kTensorReRequest, 1, "a/b;c", 0, 1, 2, std::nullopt, 0, ""},
      {MessageType::kErrorStatus, 2, "w", 5, 0, 0, std::nullopt, 16, "\xe2\x82\xac failed"},
      {MessageType::kRelease, 3, "", 0, 0, 0, std::nullopt, 0, ""},
      {MessageType::kCancel, 4, "x", 0, 0, 0, TensorMeta{19, {}, false, 2}, 0, ""},
      inline_tensor(kInlinePayload),
  };
  for (const RdmaMessage& message : messages) {
    const Bytes bytes = encode(message);
    EXPECT_EQ(decoded(bytes), message);
    EXPECT_EQ(encode(decoded(bytes)), bytes);
  }
}

TEST(RdmaMessage, KeepsBoundaryValues) {
  RdmaMessage message = request();
  message.request_index = kMaxRequestIndex;
  message.name = std::string(kNameBytes, 'n');
  message.step_id = std::numeric_limits<std::int64_t>::min();
  message.remote_addr = std::numeric_limits<std::uint64_t>::max();
  message.rkey = std::numeric_limits<std::uint32_t>::max();
  message.meta = TensorMeta{4, std::vector<std::int64_t>(kMaxRank, 1), true, 1};
  EXPECT_EQ(decoded(encode(message)), message);
  message.meta = TensorMeta{18, {}, false, 16};  // rank 0
  message.step_id = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(decoded(encode(message)), message);
  message.name = repeat("\xe2\x82\xac", 170) + "ab";  // 512 bytes of UTF-8
  EXPECT_EQ(decoded(encode(message)), message);
  message.name = std::string("a\0b", 3);
  EXPECT_EQ(decoded(encode(message)), message);
  EXPECT_EQ(decoded(encode(error_status("", 1))).error_code, 1);
}

TEST(RdmaMessage, RefusesToEncodeWhatCannotTravel) {
  std::array<std::uint8_t, kSlotBytes> slot{};
  RdmaMessage message = request();
  message.name = std::string(kNameBytes + 1, 'n');
  EXPECT_EQ(encode_into(message, slot.data()).error,
            "tensor name of 513 bytes does not fit a message");
  message.name = "\xff";
  EXPECT_EQ(encode_into(message, slot.data()).error, "tensor name is not UTF-8");
  message = request();
  message.meta->shape = TensorShape(std::vector<std::int64_t>(kMaxRank + 1, 1));
  EXPECT_EQ(encode_into(message, slot.data()).error, "tensor of rank 33 does not fit a message");
  EXPECT_EQ(encode_into(error_status("\xc0\x80"), slot.data()).error, "error message is not UTF-8");
  message = request();
  message.error_message = "\xc0\x80";  // only ERROR_STATUS carries it
  EXPECT_EQ(encode_into(message, slot.data()).error, "");
}

TEST(RdmaMessage, RejectsUnattributableMessages) {
  Bytes bytes = encode(request());
  expect_error(Bytes(bytes.begin(), bytes.end() - 1),
               "message of 820 bytes is shorter than the 821-byte header", std::nullopt,
               std::nullopt);
  expect_error({}, "message of 0 bytes is shorter than the 821-byte header", std::nullopt,
               std::nullopt);
  le::store<std::uint64_t>(&bytes[kIndexAt], kMaxRequestIndex + 1);
  expect_error(bytes, "bad TENSOR_REQUEST message: request index 0xfffffffe is out of range",
               std::nullopt, std::nullopt);
  bytes[0] = 200;  // the index is checked first
  expect_error(bytes, "bad type-200 message: request index 0xfffffffe is out of range",
               std::nullopt, std::nullopt);
  le::store<std::uint64_t>(&bytes[kIndexAt], 7);
  bytes[0] = 9;
  expect_error(bytes, "bad type-9 message: unknown type", std::nullopt, std::nullopt);
}

TEST(RdmaMessage, RejectsBadNames) {
  Bytes bytes = encode(request());
  le::store<std::uint16_t>(&bytes[1], kNameBytes + 1);
  expect_request_error(bytes, "name_size 513 > 512");
  bytes = encode(request());
  bytes[4] = 0xFF;
  expect_request_error(bytes, "tensor name is not UTF-8");
  bytes = encode(request());
  bytes[3 + kNameBytes - 1] = 'x';
  expect_request_error(bytes, "bytes after the tensor name");
  bytes = encode(request());
  le::store<std::uint16_t>(&bytes[1], 1);  // "w", then "1" after the name
  expect_request_error(bytes, "bytes after the tensor name");
  RdmaMessage nameless = request();
  nameless.name = "";
  expect_request_error(encode(nameless), "no tensor name");
  nameless.type = MessageType::kTensorReRequest;
  expect_error(encode(nameless), "bad TENSOR_RE_REQUEST message: no tensor name", 7,
               MessageType::kTensorReRequest);
}

TEST(RdmaMessage, RejectsBadMetaData) {
  Bytes bytes = encode(request());
  bytes[kIsDeadAt] = 2;
  expect_request_error(bytes, "is_dead=2, rank=2");
  bytes = encode(request());
  bytes[kRankAt] = kMaxRank + 1;
  expect_request_error(bytes, "is_dead=0, rank=33");
  bytes = encode(request());
  le::store<std::int64_t>(&bytes[kDimsAt + 8 * (kMaxRank - 1)], 1);
  expect_request_error(bytes, "dimensions beyond the rank");
  bytes = encode(request());
  le::store<std::int32_t>(&bytes[kDataTypeAt], 11);
  expect_request_error(bytes, "unknown data_type 11");
  le::store<std::int32_t>(&bytes[kDataTypeAt], -5);
  expect_request_error(bytes, "unknown data_type -5");
  bytes = encode(request());
  le::store<std::int64_t>(&bytes[kDimsAt + 8], -3);
  expect_request_error(bytes, "invalid shape [2, -3]");
  bytes = encode(request());
  le::store<std::uint64_t>(&bytes[kTensorBytesAt], 25);
  expect_request_error(bytes, "tensor of float32 (2, 3) has 24 bytes, not 25");
  bytes = encode(request());
  le::store<std::int64_t>(&bytes[kDimsAt], std::int64_t{1} << 62);
  expect_request_error(bytes,
                       "tensor of float32 (4611686018427387904, 3) is larger than any array can "
                       "be (2^63 - 1 bytes)");
  bytes = encode(request());  // empty, but no array of it can be made
  le::store<std::int64_t>(&bytes[kDimsAt], 0);
  le::store<std::int64_t>(&bytes[kDimsAt + 8], std::int64_t{1} << 62);
  le::store<std::uint64_t>(&bytes[kTensorBytesAt], 0);
  expect_request_error(bytes,
                       "tensor of float32 (0, 4611686018427387904) is larger than any array can "
                       "be (2^63 - 1 bytes)");
}

TEST(RdmaMessage, RequiresADataTypeForMetaData) {
  RdmaMessage bare = request();
  bare.meta.reset();
  for (const std::size_t at : {kRankAt, kTensorBytesAt, kIsDeadAt}) {
    Bytes bytes = encode(bare);
    bytes[at] = 1;
    expect_request_error(bytes, "meta-data fields without a data_type");
  }
  RdmaMessage response = request();
  response.type = MessageType::kMetaDataResponse;
  response.meta.reset();
  expect_error(encode(response), "bad META_DATA_RESPONSE message: no meta-data", 7,
               MessageType::kMetaDataResponse);
  response.meta = TensorMeta{7, {1, 2}, false, 123};  // strings: any byte count
  EXPECT_EQ(decoded(encode(response)), response);
}

TEST(RdmaMessage, RejectsLengthsThatDisagree) {
  Bytes bytes = encode(request());
  bytes.push_back(0);
  expect_request_error(bytes, "822 bytes for a message of 821");
  le::store<std::uint32_t>(&bytes[kTailSizeAt], 1);
  expect_request_error(bytes, "a tail of 1 bytes");
  Bytes status = encode(error_status("x"));
  status.resize(kHeaderBytes + kMaxErrorBytes + 1);
  le::store<std::uint32_t>(&status[kTailSizeAt], kMaxErrorBytes + 1);
  expect_error(status, "bad ERROR_STATUS message: a tail of 7372 bytes", 9,
               MessageType::kErrorStatus);
  le::store<std::uint32_t>(&status[kTailSizeAt], 0xFFFFFFFF);
  expect_error(status, "bad ERROR_STATUS message: 8193 bytes for a message of 4294968116", 9,
               MessageType::kErrorStatus);
}

TEST(RdmaMessage, CarriesSmallTensorsInline) {
  const RdmaMessage message = inline_tensor(kInlinePayload);
  const Bytes bytes = encode(message);
  ASSERT_EQ(bytes.size(), kHeaderBytes + kInlinePayload.size());
  const RdmaMessage back = decoded(bytes);
  EXPECT_EQ(back, message);
  EXPECT_EQ(back.acked, 77u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(back.payload), back.payload_size),
            kInlinePayload);
  Bytes longer = bytes;
  longer.push_back('x');
  le::store<std::uint32_t>(&longer[kTailSizeAt], 17);
  expect_error(longer, "bad TENSOR_INLINE message: an inline payload of 17 bytes for a tensor of 16",
               5, MessageType::kTensorInline);
  RdmaMessage bare = message;
  bare.meta.reset();
  bare.payload_size = 0;
  std::array<std::uint8_t, kSlotBytes> slot{};
  EXPECT_FALSE(encode_into(bare, slot.data()).error.empty());
  const std::string big(kMaxTailBytes + 1, 'b');
  EXPECT_FALSE(encode_into(inline_tensor(big), slot.data()).error.empty());
  const std::string largest(kMaxTailBytes, 'b');
  EXPECT_EQ(encode(inline_tensor(largest)).size(), kSlotBytes);
}

TEST(RdmaMessage, ChecksTheErrorStatus) {
  Bytes bytes = encode(error_status("x"));
  bytes.back() = 0xFF;  // the message is no longer UTF-8
  expect_error(bytes, "bad ERROR_STATUS message: error_status is not an ErrorStatus proto", 9,
               MessageType::kErrorStatus);
  expect_error(encode(error_status("x", 0)), "bad ERROR_STATUS message: error code 0", 9,
               MessageType::kErrorStatus);
  expect_error(encode(error_status("", 0)), "bad ERROR_STATUS message: error code 0", 9,
               MessageType::kErrorStatus);
  expect_error(encode(error_status("x", kMaxErrorCode + 1)),
               "bad ERROR_STATUS message: error code 17", 9, MessageType::kErrorStatus);
  expect_error(encode(error_status("x", -1)), "bad ERROR_STATUS message: error code -1", 9,
               MessageType::kErrorStatus);
  bytes = encode(error_status("x"));  // unknown fields are skipped
  const std::string extra = "\x18\x01";
  bytes.insert(bytes.end(), extra.begin(), extra.end());
  le::store<std::uint32_t>(&bytes[kTailSizeAt],
                           static_cast<std::uint32_t>(bytes.size() - kHeaderBytes));
  EXPECT_EQ(decoded(bytes), error_status("x"));
}

TEST(RdmaMessage, CutsLongErrorTextsToFitTheSlot) {
  // the longest ASCII text that fits: kMaxErrorBytes - 2 (code) - 3 (tag, length) bytes
  const std::size_t fits = kMaxErrorBytes - 5;
  EXPECT_EQ(decoded(encode(error_status(std::string(fits, 'a')))).error_message,
            std::string(fits, 'a'));
  EXPECT_EQ(encode(error_status(std::string(fits, 'a'))).size(), kSlotBytes);
  for (const std::size_t size : {fits + 1, std::size_t{10000}}) {
    const Bytes bytes = encode(error_status(std::string(size, 'a')));
    EXPECT_EQ(bytes.size(), kSlotBytes);
    EXPECT_EQ(decoded(bytes).error_message, std::string(fits - 3, 'a') + "...");
  }
  // the length's varint shrinks too: one byte to spare
  EXPECT_EQ(decoded(encode(error_status(std::string(100000, 'a')))).error_message,
            std::string(fits - 4, 'a') + "...");
  const std::string euro = "\xe2\x82\xac", emoji = "\xf0\x9f\x98\x80";
  // the cut counts bytes and falls back to a character boundary
  EXPECT_EQ(decoded(encode(error_status(repeat(euro, 3000)))).error_message,
            repeat(euro, 2454) + "...");
  EXPECT_EQ(decoded(encode(error_status(repeat(emoji, 3000)))).error_message,
            repeat(emoji, 1840) + "...");
  EXPECT_EQ(decoded(encode(error_status(repeat("\xc3\xa9", 4000)))).error_message,
            repeat("\xc3\xa9", 3681) + "...");
  // a text whose cut once looped forever in the Python codec
  EXPECT_EQ(decoded(encode(error_status(repeat(euro, 3000) + "a"))).error_message,
            repeat(euro, 2454) + "...");
  // a negative code takes 10 bytes
  Bytes bytes = encode(error_status(std::string(9000, 'a'), -1));
  EXPECT_EQ(bytes.size(), kSlotBytes);
  const std::optional<ErrorStatus> status =
      ErrorStatus::parse(&bytes[kHeaderBytes], bytes.size() - kHeaderBytes);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(status->message, std::string(kMaxErrorBytes - 14 - 3, 'a') + "...");
}

}  // namespace
}  // namespace tensorverbs
