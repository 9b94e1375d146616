// What a sender holds for a receiver that asked and then went silent is bounded in time:
// a tensor whose meta-data went out waits for the receiver's re-request (write mode) or
// release (read mode) for the hold time at most; then the request is answered
// DEADLINE_EXCEEDED and the tensor goes back to the sender's table. The receiver here is a
// bare channel that asks and never does its part, as a peer that breaks the rules would.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "protocol/channel_description.h"
#include "protocol/rdma_channel.h"
#include "protocol/rdma_message_buffer.h"
#include "rendezvous_pair.h"
#include "bare_owner.h"
#include "soft_context.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

class SilentReceiver : public ::testing::TestWithParam<bool> {  // read mode?
 protected:
  void SetUp() override {
    Options options;
    options.read_mode = GetParam();
    options.hold_seconds = 1;
    auto ps = open_task(kPs, {"/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"}, options);
    ASSERT_TRUE(ps.ok()) << ps.status().message();
    ps_ = ps.take();
    soft_ = open_soft_context();
    ASSERT_TRUE(soft_.pd);
    auto cq = soft_.context->create_cq(256);
    ASSERT_TRUE(cq.ok());
    cq_ = cq.take();
    auto qp = soft_.context->create_qp(soft_.pd, cq_, cq_, verbs::QpCaps{64, 128});
    auto buffer = RdmaMessageBuffer::create(*soft_.pd, 4);
    ASSERT_TRUE(qp.ok() && buffer.ok());
    worker_ = std::make_shared<RdmaChannel>(owner_, kPs, 7, qp.take(), buffer.take(),
                                            std::uint64_t{1} << 30, "soft", 16);
    ASSERT_TRUE(worker_->start().ok());
    const std::string mine = worker_->description();
    auto theirs = ps_->channel(kWorker, 8, mine);
    ASSERT_TRUE(theirs.ok()) << theirs.status().message();
    ASSERT_TRUE(ps_->connect(kWorker, 8, mine).ok());
    auto parsed = ChannelDescription::parse(theirs.value());
    ASSERT_TRUE(parsed.ok());
    ASSERT_TRUE(worker_->connect(parsed.value()).ok());
    // the bare channel's completions: nobody else drains its queue
    poller_ = std::thread([this] {
      verbs::WorkCompletion wcs[16];
      while (!stop_) {
        const int n = cq_->wait(wcs, 16, 10);
        for (int i = 0; i < n; ++i) worker_->on_completion(wcs[i]);
        if (n > 0) worker_->after_batch();
      }
    });
  }

  void TearDown() override {
    stop_ = true;
    if (poller_.joinable()) poller_.join();
    if (worker_) worker_->fail(Status(Code::kCancelled, "the test ended"));
    if (ps_) ps_->stop();
  }

  // Whether `counter` of the bare receiver reached `value` within 30 s.
  bool reached(const std::atomic<std::uint64_t>& counter, std::uint64_t value) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (counter.load() < value && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // (nothing to wait on)
    }
    return counter.load() >= value;
  }

  BareOwner owner_{"/job:ps/replica:0/task:0"};
  std::unique_ptr<RdmaRendezvous> ps_;
  SoftContext soft_;
  std::shared_ptr<verbs::CompletionQueue> cq_;
  std::shared_ptr<RdmaChannel> worker_;
  std::thread poller_;
  std::atomic<bool> stop_{false};
};

TEST_P(SilentReceiver, ATensorWhoseReceiverNeverDoesItsPartGoesBackToTheSenderAfterTheHold) {
  const TensorValue sent = floats(std::size_t{1} << 14, 3.0f);  // 64 KiB: not inline
  ASSERT_TRUE(ps_->send(1, kWorker, "w", sent).ok());
  worker_->send(RdmaMessage{MessageType::kTensorRequest, 0, "w", 1, 0, 0, std::nullopt, 0, ""});
  ASSERT_TRUE(reached(owner_.counters().meta_data_responses, 1)) << ps_->describe_channels();
  EXPECT_EQ(ps_->pending().first, 0u);  // the response has it
  ASSERT_TRUE(reached(owner_.counters().error_statuses, 1))
      << "the ps holds the tensor for a receiver that never "
      << (GetParam() ? "released it" : "asked again") << "\n" << ps_->describe_channels();
  EXPECT_EQ(ps_->pending().first, 1u) << "the tensor did not go back to the ps's table";
}

INSTANTIATE_TEST_SUITE_P(Modes, SilentReceiver, ::testing::Bool(),
                         [](const auto& param) { return param.param ? "read" : "write"; });

}  // namespace
}  // namespace tensorverbs
