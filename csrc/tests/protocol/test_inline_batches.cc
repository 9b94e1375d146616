// TENSOR_INLINES: small tensors that wait for a message slot together travel in one
// message. Its codec (a round trip; what it refuses to encode; any bytes decode to the
// tensors or an error that names no request, so that the channel fails), and the message
// buffer that gathers them: a TENSOR_INLINE that waits joins the TENSOR_INLINE or
// TENSOR_INLINES waiting last where both fit, never one with messages queued behind it;
// the payloads are read as the slot frees, not copied aside.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/little_endian.h"
#include "gathering_buffer.h"
#include "message_bytes.h"
#include "protocol/rdma_message.h"

namespace tensorverbs {
namespace {

using test::Bytes;
using test::decode_error;
using test::encode;
using test::GatheringBuffer;
using test::inlines;
using test::kIndexAt;
using test::with_tail;
namespace le = little_endian;

RdmaMessage answer(std::uint32_t index, const Bytes& payload) {
  RdmaMessage message{MessageType::kTensorInline, index, "t" + std::to_string(index), 3, 0, 0,
                      TensorMeta{4, {static_cast<std::int64_t>(payload.size())}, false,
                                 payload.size()},
                      0, ""};
  message.payload = payload.data();
  message.payload_size = payload.size();
  return message;
}

// One tensor's bytes in a TENSOR_INLINES tail.
Bytes entry(std::uint32_t index, std::uint8_t is_dead, std::int32_t dtype,
            const std::vector<std::int64_t>& dims, std::uint64_t nbytes, const Bytes& payload) {
  Bytes out(18 + 8 * dims.size());
  le::store(out.data(), index);
  out[4] = is_dead;
  le::store(out.data() + 5, dtype);
  out[9] = static_cast<std::uint8_t>(dims.size());
  le::store(out.data() + 10, nbytes);
  for (std::size_t i = 0; i < dims.size(); ++i) le::store(out.data() + 18 + 8 * i, dims[i]);
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

TEST(TensorInlines, RoundTripInOrder) {
  const Bytes floats(24, 0xAB), proto{1, 2, 3, 4, 5}, dead(4, 0);
  const RdmaMessage message = inlines(
      {{0, TensorMeta{1, {2, 3}, false, 24}, floats.data()},
       {kMaxRequestIndex, TensorMeta{7, {}, false, 5}, proto.data()},  // a TensorProto
       {9, TensorMeta{1, {}, true, 4}, dead.data()},
       {10, TensorMeta{4, {0}, false, 0}, nullptr}});
  const Bytes bytes = encode(message);
  EXPECT_EQ(bytes.size(), kHeaderBytes + (18 + 16 + 24) + (18 + 5) + (18 + 4) + (18 + 8));
  EXPECT_EQ(bytes[0], 8);
  const DecodeResult decoded = decode(bytes.data(), bytes.size());
  ASSERT_TRUE(decoded.message.has_value()) << decoded.error.message;
  EXPECT_EQ(*decoded.message, message);
  EXPECT_EQ(decoded.message->inlines[0].payload, bytes.data() + kHeaderBytes + 18 + 16);
}

TEST(TensorInlines, RefusesToEncodeWhatCannotTravel) {
  const Bytes payload(16, 1);
  EXPECT_EQ(encode_error(inlines({})), "TENSOR_INLINES without tensors");
  EXPECT_EQ(encode_error(inlines({{kMaxRequestIndex + 1, TensorMeta{4, {16}, false, 16},
                                   payload.data()}})),
            "request index 0xfffffffe is out of range");
  EXPECT_NE(encode_error(inlines({{1, TensorMeta{0, {}, false, 0}, nullptr}})), "");
  EXPECT_NE(encode_error(inlines({{1, TensorMeta{4, {16}, false, 16}, nullptr}})), "");
  const Bytes big(kMaxTailBytes - 18 - 8, 1);
  const InlineEntry fits{1, TensorMeta{4, {static_cast<std::int64_t>(big.size())}, false,
                                       big.size()},
                         big.data()};
  EXPECT_EQ(encode_error(inlines({fits})), "");
  EXPECT_EQ(encode_error(inlines({fits, {2, TensorMeta{4, {0}, false, 0}, nullptr}})),
            "a TENSOR_INLINES tail of 7397 bytes does not fit a message");
  // a size that would wrap the sum is refused before it is added
  EXPECT_EQ(encode_error(inlines({fits, {2, TensorMeta{7, {}, false, ~std::uint64_t{0} - 30},
                                         payload.data()}})),
            "an inline tensor of 18446744073709551585 bytes does not fit a message");
}

TEST(TensorInlines, BadBytesFailTheChannelNotARequest) {
  const Bytes four(4, 7);
  const Bytes good = encode(inlines({{3, TensorMeta{4, {4}, false, 4}, four.data()}}));
  const auto error = [&](const Bytes& tail) { return decode_error(with_tail(good, tail)); };
  EXPECT_EQ(error({}), "bad TENSOR_INLINES message: no tensors");
  EXPECT_EQ(error(Bytes(17)), "bad TENSOR_INLINES message: inline tensor 0 cut short");
  EXPECT_EQ(error(entry(0xFFFFFFFF, 0, 4, {4}, 4, four)),
            "bad TENSOR_INLINES message: inline tensor 0: request index 0xffffffff is out of "
            "range");
  EXPECT_EQ(error(entry(3, 2, 4, {4}, 4, four)),
            "bad TENSOR_INLINES message: inline tensor 0: is_dead=2, rank=1, data_type=4");
  EXPECT_EQ(error(entry(3, 0, 4, std::vector<std::int64_t>(kMaxRank + 1, 1), 1, {1})),
            "bad TENSOR_INLINES message: inline tensor 0: is_dead=0, rank=33, data_type=4");
  EXPECT_EQ(error(entry(3, 0, 0, {4}, 4, four)),
            "bad TENSOR_INLINES message: inline tensor 0: is_dead=0, rank=1, data_type=0");
  Bytes dims_cut = entry(3, 0, 4, {4, 1}, 0, {});
  dims_cut.resize(18 + 12);
  EXPECT_EQ(error(dims_cut), "bad TENSOR_INLINES message: inline tensor 0: its dims cut short");
  EXPECT_EQ(error(entry(3, 0, 4, {-4}, 4, four)),
            "bad TENSOR_INLINES message: inline tensor 0: invalid shape [-4]");
  EXPECT_EQ(error(entry(3, 0, 4, {4}, 5, Bytes(5))),
            "bad TENSOR_INLINES message: inline tensor 0: tensor of uint8 (4,) has 4 bytes, not 5");
  EXPECT_EQ(error(entry(3, 0, 7, {}, 6, Bytes(5))),
            "bad TENSOR_INLINES message: inline tensor 0: 6 bytes with 5 left");
  Bytes second = entry(3, 0, 4, {4}, 4, four);
  const Bytes cut = entry(4, 0, 4, {4}, 4, Bytes(3));  // its payload a byte short
  second.insert(second.end(), cut.begin(), cut.end());
  EXPECT_EQ(error(second), "bad TENSOR_INLINES message: inline tensor 1: 4 bytes with 3 left");
  EXPECT_EQ(error(Bytes(kMaxTailBytes + 1)), "bad TENSOR_INLINES message: a tail of 7372 bytes");
  Bytes indexed = good;
  le::store<std::uint64_t>(&indexed[kIndexAt], 3);  // the header names no request
  EXPECT_EQ(decode_error(indexed), "bad TENSOR_INLINES message: fields beside the tensors");
}

TEST_F(GatheringBuffer, InlineTensorsThatWaitTravelTogetherInOrderAndNothingOvertakes) {
  send(request(0));
  send(request(1));
  posted();  // no credit left: what follows waits
  const Bytes a(1000, 1), b(2000, 2), c(3000, 3), d(1500, 4), e(100, 5);
  EXPECT_EQ(send(answer(10, a)), std::make_pair(std::uint64_t{3}, false));  // alone, so far
  EXPECT_EQ(send(answer(11, b)), std::make_pair(std::uint64_t{3}, true));   // both: batched
  EXPECT_EQ(send(answer(12, c)), std::make_pair(std::uint64_t{3}, false));
  EXPECT_EQ(send(answer(13, d)), std::make_pair(std::uint64_t{4}, false));  // does not fit
  EXPECT_EQ(send(request(14)), std::make_pair(std::uint64_t{5}, true));
  EXPECT_EQ(send(answer(15, e)), std::make_pair(std::uint64_t{6}, false));  // not into the 4th
  EXPECT_TRUE(posted().empty());

  buffer_->credit(2, &wrs_);
  std::vector<RdmaMessage> got = posted();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].type, MessageType::kTensorInlines);
  ASSERT_EQ(got[0].inlines.size(), 3u);
  const Bytes* payloads[] = {&a, &b, &c};
  for (std::size_t i = 0; i < 3; ++i) {
    const InlineEntry& tensor = got[0].inlines[i];
    EXPECT_EQ(tensor.index, 10 + i);
    EXPECT_EQ(tensor.meta, (TensorMeta{4, {static_cast<std::int64_t>(payloads[i]->size())}, false,
                                       payloads[i]->size()}));
    EXPECT_EQ(Bytes(tensor.payload, tensor.payload + tensor.meta.nbytes), *payloads[i]);
  }
  EXPECT_EQ(got[1].type, MessageType::kTensorInline);  // one alone stays a TENSOR_INLINE
  EXPECT_EQ(got[1].request_index, 13u);
  buffer_->credit(4, &wrs_);
  got = posted();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].type, MessageType::kTensorRequests);
  EXPECT_EQ(got[1].type, MessageType::kTensorInline);
  EXPECT_EQ(got[1].request_index, 15u);
}

TEST_F(GatheringBuffer, HeldInlineTensorsGoTogetherAndAreReadWhenTheirSlotFrees) {
  Bytes a(3000, 1), b(3000, 2), c(3000, 3);
  buffer_->hold();
  EXPECT_EQ(send(answer(1, a)), std::make_pair(std::uint64_t{1}, false));
  EXPECT_EQ(send(answer(2, b)), std::make_pair(std::uint64_t{1}, true));
  EXPECT_EQ(send(answer(3, c)), std::make_pair(std::uint64_t{2}, false));  // 3 x 3000: too many
  a.assign(a.size(), 7);  // the senders' memory, read as the slot frees
  buffer_->release();
  buffer_->drain(&wrs_);
  const std::vector<RdmaMessage> got = posted();
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(got[0].inlines.size(), 2u);
  EXPECT_EQ(Bytes(got[0].inlines[0].payload, got[0].inlines[0].payload + 3000), Bytes(3000, 7));
  EXPECT_EQ(Bytes(got[0].inlines[1].payload, got[0].inlines[1].payload + 3000), b);
  EXPECT_EQ(got[1].type, MessageType::kTensorInline);
  EXPECT_EQ(Bytes(got[1].payload, got[1].payload + got[1].payload_size), c);
}

TEST_F(GatheringBuffer, AnswersWaitingWhenTheChannelFailsAreDroppedUnread) {
  send(request(0));
  send(request(1));
  posted();
  Bytes a(1000, 1), b(1000, 2);
  send(answer(1, a));
  send(answer(2, b));
  buffer_->drop_waiting();  // their responses give the tensors back: the bytes may go
  buffer_->credit(2, &wrs_);
  EXPECT_TRUE(posted().empty());
  EXPECT_EQ(send(answer(3, a)), std::make_pair(std::uint64_t{3}, false));  // later ones go
  EXPECT_EQ(posted().size(), 1u);
}

}  // namespace
}  // namespace tensorverbs
