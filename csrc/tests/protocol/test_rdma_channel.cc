// RdmaChannel on its own (over the soft provider): connect() may run while other threads
// already use the channel, as when both tasks set it up at once; what connect() settles
// (the size of one operation) is read safely meanwhile (ThreadSanitizer checks it). The
// peer's requests it answers are bounded: one past the most a task may have in flight is
// refused, and the channel goes on.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "protocol/channel_description.h"
#include "protocol/rdma_channel.h"
#include "protocol/rdma_message_buffer.h"
#include "bare_owner.h"
#include "soft_context.h"

namespace tensorverbs {
namespace {

class RdmaChannelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SoftContext soft = open_soft_context();
    ASSERT_TRUE(soft.pd);
    context_ = soft.context;
    pd_ = soft.pd;
    auto cq = context_->create_cq(256);
    ASSERT_TRUE(cq.ok());
    cq_ = cq.take();
  }

  std::shared_ptr<RdmaChannel> make_channel(std::uint64_t max_message_bytes) {
    auto qp = context_->create_qp(pd_, cq_, cq_, verbs::QpCaps{128, 128});
    auto buffer = RdmaMessageBuffer::create(*pd_, 2);
    EXPECT_TRUE(qp.ok() && buffer.ok());
    if (!qp.ok() || !buffer.ok()) return nullptr;
    auto channel = std::make_shared<RdmaChannel>(owner_, 1, 1, qp.take(), buffer.take(),
                                                 max_message_bytes, "soft", 32);
    EXPECT_TRUE(channel->start().ok());
    return channel;
  }

  BareOwner owner_{"/job:peer/replica:0/task:0"};
  std::shared_ptr<verbs::Context> context_;
  std::shared_ptr<verbs::ProtectionDomain> pd_;
  std::shared_ptr<verbs::CompletionQueue> cq_;
};

TEST_F(RdmaChannelTest, TheOperationSizeConnectSettlesIsReadSafelyMeanwhile) {
  auto mine = make_channel(std::uint64_t{1} << 30);
  auto theirs = make_channel(std::uint64_t{1} << 20);
  ASSERT_TRUE(mine && theirs);
  auto remote = ChannelDescription::parse(theirs->description());
  ASSERT_TRUE(remote.ok()) << remote.status().message();
  std::atomic<bool> connected{false};
  std::thread user([&] {
    constexpr std::uint64_t kTensor = (std::uint64_t{3} << 20) + 5;
    while (!connected.load(std::memory_order_relaxed)) (void)mine->last_operation_bytes(kTensor);
  });
  const Status status = mine->connect(remote.value());
  connected = true;
  user.join();
  ASSERT_TRUE(status.ok()) << status.message();
  // operations of the smaller of both sizes: the last of 3 MiB + 5 bytes is 5 bytes
  EXPECT_EQ(mine->last_operation_bytes((std::uint64_t{3} << 20) + 5), 5u);
}

TEST_F(RdmaChannelTest, APeersRequestsPastTheMostATaskMayHaveInFlightAreRefused) {
  auto channel = make_channel(std::uint64_t{1} << 30);
  ASSERT_TRUE(channel);
  const auto request = [](std::uint32_t index) {
    return RdmaMessage{MessageType::kTensorRequest, index, "t" + std::to_string(index), 1, 0, 0,
                       std::nullopt, 0, ""};
  };
  for (std::uint32_t i = 0; i < RdmaChannel::kMaxPeerRequests; ++i) {
    ASSERT_TRUE(channel->add_response(request(i), nullptr)) << i;
  }
  EXPECT_FALSE(channel->add_response(request(RdmaChannel::kMaxPeerRequests), nullptr));
  EXPECT_FALSE(channel->error()) << channel->error()->message();
  channel->remove_response(7);  // one ends: room for the next
  EXPECT_TRUE(channel->add_response(request(RdmaChannel::kMaxPeerRequests + 1), nullptr));
  for (std::uint32_t i = 0; i <= RdmaChannel::kMaxPeerRequests + 1; ++i) channel->remove_response(i);
}

}  // namespace
}  // namespace tensorverbs
