#include <gtest/gtest.h>

#include <string>

#include "protocol/channel_description.h"
#include "protocol/rdma_message.h"

namespace tensorverbs {
namespace {

ChannelDescription sample() {
  ChannelDescription d;
  d.provider = "soft";
  d.endpoint = std::string("\x01\x02\x00\x03", 4);
  d.rx_addr = 0x7f0000001000;
  d.rx_rkey = 0xabcd;
  d.slots = 16;
  d.rx_length = 16 * kSlotBytes + 8;
  d.max_message_bytes = 1u << 30;
  return d;
}

TEST(ChannelDescription, RoundTrips) {
  const ChannelDescription d = sample();
  const auto back = ChannelDescription::parse(d.serialize());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back.value().provider, d.provider);
  EXPECT_EQ(back.value().endpoint, d.endpoint);
  EXPECT_EQ(back.value().rx_addr, d.rx_addr);
  EXPECT_EQ(back.value().rx_rkey, d.rx_rkey);
  EXPECT_EQ(back.value().rx_length, d.rx_length);
  EXPECT_EQ(back.value().slots, d.slots);
  EXPECT_EQ(back.value().max_message_bytes, d.max_message_bytes);
}

// Why `bytes` are refused ("" if they are not).
std::string refused(const std::string& bytes) {
  const auto parsed = ChannelDescription::parse(bytes);
  return parsed.ok() ? "" : parsed.status().message();
}

std::string refused(const ChannelDescription& d) { return refused(d.serialize()); }

TEST(ChannelDescription, RejectsWhatIsNotOne) {
  const std::string bytes = sample().serialize();
  EXPECT_NE(refused(""), "");
  EXPECT_NE(refused(bytes.substr(0, bytes.size() - 1)), "");  // truncated
  EXPECT_NE(refused(bytes + "x"), "");                         // trailing bytes
  std::string wrong = bytes;
  wrong[4] = 1;  // the version before TENSOR_REQUESTS
  EXPECT_NE(refused(wrong), "");
  wrong[4] = 3;
  EXPECT_NE(refused(wrong), "");
  ChannelDescription d = sample();
  d.endpoint = std::string(5000, 'e');
  EXPECT_NE(refused(d), "");
}

TEST(ChannelDescription, RejectsFieldsOutOfBoundsSayingWhich) {
  ChannelDescription d = sample();
  d.slots = 0;
  EXPECT_NE(refused(d).find("message slots"), std::string::npos) << refused(d);
  d.slots = kMaxSlots + 1;
  EXPECT_NE(refused(d).find("message slots"), std::string::npos) << refused(d);
  d = sample();
  d.rx_length = 16 * kSlotBytes;  // no room for the ACK word
  EXPECT_NE(refused(d).find("rx_length"), std::string::npos) << refused(d);
  d = sample();
  d.rx_addr = ~std::uint64_t{0} - d.rx_length + 1;  // its last byte past the end
  EXPECT_NE(refused(d).find("rx_addr"), std::string::npos) << refused(d);
  d.rx_addr -= 1;
  EXPECT_EQ(refused(d), "");
  d = sample();
  d.endpoint.clear();
  EXPECT_NE(refused(d).find("endpoint"), std::string::npos) << refused(d);
  d = sample();
  d.provider.clear();
  EXPECT_NE(refused(d).find("provider"), std::string::npos) << refused(d);
  for (std::uint64_t size : {std::uint64_t{0}, std::uint64_t{1}, kMinMessageBytes - 1}) {
    d = sample();
    d.max_message_bytes = size;
    EXPECT_NE(refused(d).find("max_message_bytes=" + std::to_string(size)), std::string::npos)
        << refused(d);
  }
  d.max_message_bytes = kMinMessageBytes;
  EXPECT_EQ(refused(d), "");
}

}  // namespace
}  // namespace tensorverbs
