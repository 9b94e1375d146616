// TENSOR_REQUESTS: requests that wait for a message slot together travel in one message.
// Its codec (a round trip; what it refuses to encode; any bytes decode to the requests or
// an error that names no request, so that the channel fails), and the message buffer that
// gathers them: only requests without meta-data for a landing, only into the message
// waiting last (nothing overtakes), in order, as many as fit; while the buffer is held (a
// batch of recvs), with slots free too. Beside them, a TENSOR_INLINE that waits: its
// payload is read as its slot frees, not copied aside.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
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
using test::kIndexAt;
using test::requests;
using test::with_tail;
namespace le = little_endian;

Bytes entry(std::uint32_t index, std::int64_t step, const std::string& name,
            std::uint16_t name_size) {
  Bytes out(14 + name.size());
  le::store(out.data(), index);
  le::store(out.data() + 4, step);
  le::store(out.data() + 12, name_size);
  std::copy(name.begin(), name.end(), out.begin() + 14);
  return out;
}

TEST(TensorRequests, RoundTripInOrder) {
  const RdmaMessage message = requests({{0, -1, "a"}, {kMaxRequestIndex, 1LL << 62, "w/\xe2\x82\xac"},
                                        {5, 0, std::string(kNameBytes, 'n')}});
  const Bytes bytes = encode(message);
  EXPECT_EQ(bytes.size(), kHeaderBytes + 14 * 3 + 1 + 5 + kNameBytes);
  EXPECT_EQ(bytes[0], 7);
  const DecodeResult decoded = decode(bytes.data(), bytes.size());
  ASSERT_TRUE(decoded.message.has_value()) << decoded.error.message;
  EXPECT_EQ(*decoded.message, message);
}

TEST(TensorRequests, RefusesToEncodeWhatCannotTravel) {
  EXPECT_EQ(encode_error(requests({})), "TENSOR_REQUESTS without requests");
  EXPECT_NE(encode_error(requests({{1, 0, ""}})), "");
  EXPECT_NE(encode_error(requests({{1, 0, std::string(kNameBytes + 1, 'n')}})), "");
  EXPECT_NE(encode_error(requests({{1, 0, "\xc0\x80"}})), "");
  EXPECT_EQ(encode_error(requests({{kMaxRequestIndex + 1, 0, "a"}})),
            "request index 0xfffffffe is out of range");
  std::vector<RequestEntry> many(kMaxTailBytes / 15 + 1, RequestEntry{1, 0, "a"});
  EXPECT_EQ(encode_error(requests(many)), "a TENSOR_REQUESTS tail of 7380 bytes does not fit a message");
  many.pop_back();
  EXPECT_EQ(encode_error(requests(many)), "");
}

TEST(TensorRequests, BadBytesFailTheChannelNotARequest) {
  const Bytes good = encode(requests({{3, 4, "ab"}}));
  EXPECT_EQ(decode_error(with_tail(good, {})), "bad TENSOR_REQUESTS message: no requests");
  EXPECT_EQ(decode_error(with_tail(good, entry(3, 4, "ab", 2 + 1))),
            "bad TENSOR_REQUESTS message: a request's name_size of 3 with 2 bytes left");
  EXPECT_EQ(decode_error(with_tail(good, entry(3, 4, "", 0))),
            "bad TENSOR_REQUESTS message: a request's name_size of 0 with 0 bytes left");
  EXPECT_EQ(decode_error(with_tail(good, entry(3, 4, std::string(600, 'n'), 600))),
            "bad TENSOR_REQUESTS message: a request's name_size of 600 with 600 bytes left");
  EXPECT_EQ(decode_error(with_tail(good, entry(3, 4, "\xc0\x80", 2))),
            "bad TENSOR_REQUESTS message: a request's tensor name is not UTF-8");
  EXPECT_EQ(decode_error(with_tail(good, entry(0xFFFFFFFF, 4, "ab", 2))),
            "bad TENSOR_REQUESTS message: request index 0xffffffff is out of range");
  Bytes cut = entry(3, 4, "ab", 2);
  cut.resize(cut.size() + 5);  // a second request cut short
  EXPECT_EQ(decode_error(with_tail(good, cut)),
            "bad TENSOR_REQUESTS message: a request cut short after 1 requests");
  EXPECT_EQ(decode_error(with_tail(good, Bytes(kMaxTailBytes + 1))),
            "bad TENSOR_REQUESTS message: a tail of 7372 bytes");
  Bytes indexed = good;
  le::store<std::uint64_t>(&indexed[kIndexAt], 3);  // the header names no request
  EXPECT_EQ(decode_error(indexed), "bad TENSOR_REQUESTS message: fields beside the requests");
}

using test::GatheringBuffer;

TEST_F(GatheringBuffer, RequestsThatWaitTravelTogetherInOrderAndNothingOvertakes) {
  EXPECT_EQ(send(request(0)), std::make_pair(std::uint64_t{1}, false));  // slots free: alone
  EXPECT_EQ(send(request(1)), std::make_pair(std::uint64_t{2}, false));
  ASSERT_EQ(posted().size(), 2u);
  // no credit: they wait, gathered, until one with a landing (its meta-data matters)
  EXPECT_EQ(send(request(2)), std::make_pair(std::uint64_t{3}, true));
  EXPECT_EQ(send(request(3, TensorMeta{1, {4}, false, 16})), std::make_pair(std::uint64_t{3}, false));
  EXPECT_EQ(send(request(4, TensorMeta{1, {4096}, false, 16384})),  // too large to come inline
            std::make_pair(std::uint64_t{4}, false));
  EXPECT_EQ(send(request(5)), std::make_pair(std::uint64_t{5}, true));  // not into the first
  EXPECT_EQ(send(request(6, std::nullopt, 9)), std::make_pair(std::uint64_t{6}, false));
  EXPECT_EQ(send(request(7)), std::make_pair(std::uint64_t{7}, true));
  EXPECT_TRUE(posted().empty());

  buffer_->credit(2, &wrs_);
  std::vector<RdmaMessage> got = posted();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].type, MessageType::kTensorRequests);
  EXPECT_EQ(got[0].requests, (std::vector<RequestEntry>{{2, 102, "t2"}, {3, 103, "t3"}}));
  EXPECT_EQ(got[1].type, MessageType::kTensorRequest);
  EXPECT_EQ(got[1].request_index, 4u);
  EXPECT_TRUE(got[1].meta.has_value());

  buffer_->credit(4, &wrs_);
  got = posted();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].requests, (std::vector<RequestEntry>{{5, 105, "t5"}}));
  EXPECT_EQ(got[1].rkey, 9u);
  buffer_->credit(6, &wrs_);
  got = posted();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].requests, (std::vector<RequestEntry>{{7, 107, "t7"}}));
}

TEST_F(GatheringBuffer, AFullMessageStartsTheNext) {
  send(request(0));
  send(request(1));
  posted();
  std::uint32_t index = 2;
  std::size_t first = 0;
  while (!send(request(index)).second || index == 2) {
    first += index == 2 ? 0 : 1;
    ++index;
  }
  first += 1;  // the one that started the first message
  buffer_->credit(2, &wrs_);
  const std::vector<RdmaMessage> got = posted();
  ASSERT_EQ(got.size(), 2u);
  ASSERT_EQ(got[0].requests.size(), first);
  ASSERT_EQ(got[1].requests.size(), 1u);
  EXPECT_EQ(got[1].requests[0].index, index);
  std::size_t tail = 0;
  for (const RequestEntry& entry : got[0].requests) tail += request_entry_bytes(entry.name);
  EXPECT_LE(tail, kMaxTailBytes);
  EXPECT_GT(tail + request_entry_bytes(got[1].requests[0].name), kMaxTailBytes);
}

TEST_F(GatheringBuffer, HeldRequestsWaitWithSlotsFreeAndGoTogetherWhenTheLastHoldEnds) {
  buffer_->hold();
  buffer_->hold();  // (nested)
  // slots are free, and yet they wait, gathered
  EXPECT_EQ(send(request(0)), std::make_pair(std::uint64_t{1}, true));
  for (std::uint32_t i = 1; i < 5; ++i) {
    EXPECT_EQ(send(request(i)), std::make_pair(std::uint64_t{1}, false));
  }
  // one with a landing goes alone, and the next starts a message of its own
  EXPECT_EQ(send(request(5, std::nullopt, 9)), std::make_pair(std::uint64_t{2}, false));
  EXPECT_EQ(send(request(6)), std::make_pair(std::uint64_t{3}, true));
  buffer_->credit(0, &wrs_);
  buffer_->release();
  buffer_->drain(&wrs_);
  EXPECT_TRUE(posted().empty());  // one hold is left
  EXPECT_NE(buffer_->describe().find("held"), std::string::npos);
  buffer_->release();
  buffer_->drain(&wrs_);
  std::vector<RdmaMessage> got = posted();
  ASSERT_EQ(got.size(), 2u);  // as many as the slots take, in order
  EXPECT_EQ(got[0].type, MessageType::kTensorRequests);
  EXPECT_EQ(got[0].requests,
            (std::vector<RequestEntry>{
                {0, 100, "t0"}, {1, 101, "t1"}, {2, 102, "t2"}, {3, 103, "t3"}, {4, 104, "t4"}}));
  EXPECT_EQ(got[1].type, MessageType::kTensorRequest);
  EXPECT_EQ(got[1].rkey, 9u);
  buffer_->credit(1, &wrs_);
  got = posted();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].requests, (std::vector<RequestEntry>{{6, 106, "t6"}}));
  buffer_->credit(3, &wrs_);
  EXPECT_EQ(send(request(7)), std::make_pair(std::uint64_t{4}, false));  // released: at once
  EXPECT_EQ(posted().size(), 1u);
}

TEST_F(GatheringBuffer, AnInlineTensorThatWaitsIsReadWhenItsSlotFrees) {
  send(request(0));
  send(request(1));
  posted();
  std::vector<std::uint8_t> payload(4096, 1);
  RdmaMessage answer{MessageType::kTensorInline, 7, "w", 3, 0, 0, TensorMeta{4, {4096}, false, 4096},
                     0, ""};
  answer.payload = payload.data();
  answer.payload_size = payload.size();
  EXPECT_EQ(send(answer), std::make_pair(std::uint64_t{3}, false));
  answer.payload_size = 5;  // what cannot be encoded is refused as it is queued
  std::uint64_t sequence = 0;
  EXPECT_EQ(buffer_->send(answer, &wrs_, &sequence).code(), Code::kInternal);
  payload.assign(payload.size(), 2);  // its sender's memory, read as the slot frees
  buffer_->credit(1, &wrs_);
  const std::vector<RdmaMessage> got = posted();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].type, MessageType::kTensorInline);
  ASSERT_EQ(got[0].payload_size, 4096u);
  EXPECT_EQ(Bytes(got[0].payload, got[0].payload + 4096), Bytes(4096, 2));
}

}  // namespace
}  // namespace tensorverbs
