// A message buffer of two slots, connected to nowhere, for the tests of the messages that
// gather what waits for a slot (TENSOR_REQUESTS, TENSOR_INLINES): what is sent, and what
// was posted, decoded.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "protocol/rdma_message.h"
#include "protocol/rdma_message_buffer.h"
#include "soft_context.h"

namespace tensorverbs::test {

class GatheringBuffer : public ::testing::Test {
 protected:
  void SetUp() override {
    soft_ = open_soft_context();
    ASSERT_TRUE(soft_.pd);
    auto buffer = RdmaMessageBuffer::create(*soft_.pd, 2);
    ASSERT_TRUE(buffer.ok());
    buffer_ = buffer.take();
    buffer_->connect(0x10000, 7);
  }

  // Sends a message; returns (sequence, started a TENSOR_REQUESTS or TENSOR_INLINES).
  std::pair<std::uint64_t, bool> send(RdmaMessage message) {
    std::uint64_t sequence = 0;
    bool batched = false;
    EXPECT_TRUE(buffer_->send(message, &wrs_, &sequence, &batched).ok());
    return {sequence, batched};
  }

  // The messages posted so far, decoded, and forgotten.
  std::vector<RdmaMessage> posted() {
    std::vector<RdmaMessage> out;
    for (const verbs::SendWr& wr : wrs_) {
      const auto* data = reinterpret_cast<const std::uint8_t*>(wr.sge.addr);
      const DecodeResult decoded = decode(data, wr.sge.length);
      EXPECT_TRUE(decoded.message.has_value()) << decoded.error.message;
      if (decoded.message) out.push_back(*decoded.message);
    }
    wrs_.clear();
    return out;
  }

  static RdmaMessage request(std::uint32_t index, std::optional<TensorMeta> meta = std::nullopt,
                             std::uint32_t rkey = 0) {
    return RdmaMessage{MessageType::kTensorRequest, index, "t" + std::to_string(index),
                       static_cast<std::int64_t>(index) + 100, rkey ? 0x2000u : 0u, rkey, meta,
                       0, ""};
  }

  SoftContext soft_;
  std::unique_ptr<RdmaMessageBuffer> buffer_;
  std::vector<verbs::SendWr> wrs_;
};

}  // namespace tensorverbs::test
