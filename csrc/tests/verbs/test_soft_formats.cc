// The soft provider's formats: endpoints, frames, greetings and ring events round-trip,
// and malformed ones are refused with a reason (the fuzzers try the rest).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "verbs/soft/event_ring.h"
#include "verbs/soft/soft_endpoint.h"
#include "verbs/soft/wire.h"
#include "verbs/work.h"

namespace tensorverbs::verbs::soft {
namespace {

SoftEndpoint sample() {
  SoftEndpoint e;
  e.qp_num = 0x123456;
  e.mtu = 4096;
  for (std::size_t i = 0; i < kTokenBytes; ++i) e.token[i] = static_cast<std::uint8_t>(i * 7 + 1);
  e.same_host = SameHost::kNo;
  e.tcp_host = "127.0.0.1";
  e.tcp_port = 4242;
  e.unix_name = "tensorverbs-soft-abc";
  return e;
}

TEST(SoftEndpoint, RoundTrips) {
  const std::string bytes = encode_endpoint(sample());
  EXPECT_EQ(bytes.substr(0, 4), "TVSE");
  auto back = decode_endpoint(bytes);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back.value() == sample());
  SoftEndpoint no_unix = sample();
  no_unix.unix_name.clear();
  no_unix.tcp_host = "fe80::1%eth0";
  auto again = decode_endpoint(encode_endpoint(no_unix));
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again.value() == no_unix);
}

TEST(SoftEndpoint, LinksRoundTripAndTheirBytesAreChecked) {
  SoftEndpoint e = sample();
  e.links = {{"10.0.2.1", 4243}, {"fe80::2%veth1", 65535}};
  const std::string bytes = encode_endpoint(e);
  EXPECT_EQ(bytes[4], 2);  // (version 1 has no links)
  auto back = decode_endpoint(bytes);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back.value() == e);
  EXPECT_EQ(encode_endpoint(sample())[4], 1);
  auto refused = [](const std::string& b, const std::string& words) {
    auto r = decode_endpoint(b);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
  };
  refused(bytes.substr(0, bytes.size() - 1), "past the end");
  refused(bytes + "x", "after the links");
  std::string b = bytes;
  b[36] = 3;  // a third link that is not there
  refused(b, "past the end");
  b = bytes;
  b[36] = static_cast<char>(kMaxLinks + 1);
  refused(b, "links in a version 2");
  b = bytes;
  b[4] = 1;  // links in version 1
  refused(b, "links in a version 1");
  b = bytes;
  b[37] = 1;
  refused(b, "reserved");
  const std::size_t first_link = kEndpointFixedBytes + e.tcp_host.size() + e.unix_name.size();
  b = bytes;
  b[first_link] = b[first_link + 1] = 0;
  refused(b, "link: tcp port 0");
  b = bytes;
  b[first_link + 3] = '/';
  refused(b, "link: tcp host with a bad character");
  e.links.assign(kMaxLinks + 1, {"10.0.2.1", 1});
  EXPECT_NE(validate_endpoint(e).find("links"), std::string::npos);
}

TEST(SoftEndpoint, RefusesMalformedBytes) {
  const std::string good = encode_endpoint(sample());
  auto refused = [](const std::string& bytes, const std::string& words) {
    auto r = decode_endpoint(bytes);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
  };
  refused("", "fewer than");
  refused(good.substr(0, good.size() - 1), "lengths say");
  refused(good + "x", "lengths say");
  std::string b = good;
  b[0] = 'X';
  refused(b, "magic");
  b = good;
  b[4] = 2;
  refused(b, "version");
  b = good;
  b[5] = 3;
  refused(b, "same_host");
  b = good;
  b[6] = 1;
  refused(b, "reserved");
  b = good;
  b[12] = 1;  // mtu 4097
  refused(b, "mtu");
  b = good;
  b[32] = 0;
  b[33] = 0;
  refused(b, "port");
  b = good;
  b[kEndpointFixedBytes] = ' ';
  refused(b, "bad character");
  b = good;
  b[8] = b[9] = b[10] = 0;
  b[11] = 0;
  refused(b, "qp_num");
  b = good;
  b.back() = '/';
  refused(b, "bad character");
}

TEST(SoftWire, FramesRoundTripAndBadOnesAreRefused) {
  FrameHeader h;
  h.op = FrameOp::kWrite;
  h.flags = kFlagImm | kFlagAck;
  h.imm = 0xDEADBEEF;
  h.seq = 7;
  h.ack = 5;
  h.rkey = 0x1234;
  h.length = 4096;
  h.addr = 0x7f0000001000;
  std::uint8_t bytes[kFrameHeaderBytes];
  encode_frame(h, bytes);
  auto back = decode_frame(bytes);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back.value() == h);
  EXPECT_EQ(payload_bytes(h), 4096u);

  auto refused = [](FrameHeader f) {
    std::uint8_t b[kFrameHeaderBytes];
    encode_frame(f, b);
    return !decode_frame(b).ok();
  };
  FrameHeader bad = h;
  bad.seq = 0;
  EXPECT_TRUE(refused(bad));  // a request needs a number
  bad = h;
  bad.length = kMaxMessageBytes + 1;
  EXPECT_TRUE(refused(bad));
  bad = h;
  bad.flags = 0x80;
  EXPECT_TRUE(refused(bad));
  bad = h;
  bad.flags = kFlagAck;  // an immediate without its flag
  EXPECT_TRUE(refused(bad));
  FrameHeader ack;
  ack.op = FrameOp::kAck;
  ack.flags = kFlagAck;
  ack.ack = 3;
  EXPECT_FALSE(refused(ack));
  ack.length = 1;
  EXPECT_TRUE(refused(ack));
  FrameHeader nak;
  nak.op = FrameOp::kNak;
  nak.seq = 4;
  nak.status = static_cast<std::uint8_t>(WcStatus::kRemAccessErr);
  nak.length = kMaxNakDetail;
  EXPECT_FALSE(refused(nak));
  nak.length = kMaxNakDetail + 1;
  EXPECT_TRUE(refused(nak));
  nak.length = 1;
  nak.status = static_cast<std::uint8_t>(WcStatus::kSuccess);
  EXPECT_TRUE(refused(nak));
  std::uint8_t junk[kFrameHeaderBytes] = {99};
  EXPECT_FALSE(decode_frame(junk).ok());
}

TEST(SoftWire, StripesAndStripedWritesAreChecked) {
  FrameHeader stripe;
  stripe.op = FrameOp::kStripe;
  stripe.seq = 9;
  stripe.rkey = 3;
  stripe.addr = 0x1000;
  stripe.length = 1 << 20;
  std::uint8_t bytes[kFrameHeaderBytes];
  encode_frame(stripe, bytes);
  auto back = decode_frame(bytes);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back.value() == stripe);
  EXPECT_EQ(payload_bytes(stripe), 1u << 20);
  EXPECT_FALSE(is_request(FrameOp::kStripe));  // (it is part of the write numbered seq)
  auto refused = [](FrameHeader f) {
    std::uint8_t b[kFrameHeaderBytes];
    encode_frame(f, b);
    return !decode_frame(b).ok();
  };
  FrameHeader bad = stripe;
  bad.seq = 0;
  EXPECT_TRUE(refused(bad));
  bad = stripe;
  bad.length = 0;
  EXPECT_TRUE(refused(bad));
  bad = stripe;
  bad.flags = kFlagAck;  // acknowledgements ride on the queue pair's first stream only
  bad.ack = 1;
  EXPECT_TRUE(refused(bad));
  bad = stripe;
  bad.status = 1;
  EXPECT_TRUE(refused(bad));
  bad = stripe;
  bad.imm = kMaxStripes - 1;  // the last stripe's index (a stripe's imm is its index)
  EXPECT_FALSE(refused(bad));
  bad.imm = kMaxStripes;
  EXPECT_TRUE(refused(bad));

  FrameHeader striped;
  striped.op = FrameOp::kWrite;
  striped.flags = kFlagStriped | kFlagImm;
  striped.imm = 5;
  striped.status = 4;  // its data came as 4 stripes
  striped.seq = 9;
  striped.length = 4 << 20;
  EXPECT_FALSE(refused(striped));
  EXPECT_EQ(payload_bytes(striped), 0u);
  bad = striped;
  bad.status = 0;
  EXPECT_TRUE(refused(bad));
  bad = striped;
  bad.op = FrameOp::kSend;
  EXPECT_TRUE(refused(bad));
  bad = striped;
  bad.length = 0;
  EXPECT_TRUE(refused(bad));
}

TEST(SoftWire, GreetingsRoundTrip) {
  Hello hello;
  hello.kind = HelloKind::kReply;
  hello.status = HelloStatus::kTaken;
  hello.fd_count = 0;
  hello.target = sample().token;
  hello.pd = 77;
  std::uint8_t bytes[kHelloBytes];
  encode_hello(hello, bytes);
  auto back = decode_hello(bytes);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back.value() == hello);
  bytes[7] = 2;  // a descriptor count a greeting never has
  EXPECT_FALSE(decode_hello(bytes).ok());
  bytes[7] = 0;
  bytes[0] = 'x';
  EXPECT_FALSE(decode_hello(bytes).ok());
  Hello link;  // a link's greeting: which link, no descriptors
  link.kind = HelloKind::kLink;
  link.pd = 2;
  encode_hello(link, bytes);
  ASSERT_TRUE(decode_hello(bytes).ok());
  EXPECT_TRUE(decode_hello(bytes).value() == link);
  bytes[7] = kHelloFds;
  EXPECT_FALSE(decode_hello(bytes).ok());
  link.pd = 0;
  encode_hello(link, bytes);
  EXPECT_FALSE(decode_hello(bytes).ok());
  link.pd = kMaxLinks + 1;
  encode_hello(link, bytes);
  EXPECT_FALSE(decode_hello(bytes).ok());
}

TEST(SoftRing, EventsAreChecked) {
  EXPECT_TRUE(decode_ring_event(1, 2, 3, kRingFlagImm).ok());
  EXPECT_FALSE(decode_ring_event(1, 2, 3, 0).ok());
  EXPECT_FALSE(decode_ring_event(1, 2, kMaxMessageBytes + 1, kRingFlagImm).ok());
}

}  // namespace
}  // namespace tensorverbs::verbs::soft
