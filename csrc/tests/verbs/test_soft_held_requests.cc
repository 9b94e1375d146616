// HeldRequests: the soft responder's requests held for receives, within their byte budget.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "verbs/soft/held_requests.h"

namespace tensorverbs::verbs::soft {
namespace {

FrameHeader header(std::uint32_t seq) {
  FrameHeader h;
  h.op = FrameOp::kSend;
  h.seq = seq;
  return h;
}

TEST(SoftHeldRequests, KeepsSequenceOrderAndTheBudget) {
  HeldRequests held;
  ASSERT_TRUE(held.reserve(kMaxHeldBytes - 16));  // a payload being read elsewhere
  ASSERT_TRUE(held.reserve(8));
  held.push_back({header(2), std::vector<std::uint8_t>(8), false});
  EXPECT_FALSE(held.reserve(16));  // over the budget
  held.push_front({header(1), std::vector<std::uint8_t>(8), false});  // first in line: counted
  EXPECT_FALSE(held.reserve(1));
  EXPECT_EQ(held.pop_front().header.seq, 1u);
  EXPECT_TRUE(held.reserve(8));  // its bytes are back
  EXPECT_EQ(held.front().header.seq, 2u);
  held.clear();
  EXPECT_TRUE(held.empty());
  EXPECT_TRUE(held.reserve(kMaxHeldBytes));
}

}  // namespace
}  // namespace tensorverbs::verbs::soft
