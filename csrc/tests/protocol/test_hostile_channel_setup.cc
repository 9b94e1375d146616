// A peer's channel description is input like any other: a task refuses one it cannot work
// with (an operation size below what the protocol needs, a message buffer that contradicts
// itself or this task's) with an error that names the peer, before anything uses it.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include "protocol/channel_description.h"
#include "protocol/rdma_message.h"
#include "rendezvous_pair.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

const char* const kPsName = "/job:ps/replica:0/task:0";

class HostileChannelSetup : public ::testing::Test {
 protected:
  void SetUp() override {
    for (std::int32_t task : {kPs, kWorker}) {
      auto opened = open_task(task, {kPsName, "/job:worker/replica:0/task:0"});
      ASSERT_TRUE(opened.ok()) << opened.status().message();
      (task == kPs ? ps_ : worker_) = opened.take();
    }
    renew_ps_side(8);
  }

  // A new channel of the ps to the worker (its queue pair takes one peer only), as the ps
  // describes it.
  void renew_ps_side(std::uint64_t worker_incarnation) {
    auto described = ps_->channel(kWorker, worker_incarnation, {});
    ASSERT_TRUE(described.ok()) << described.status().message();
    auto parsed = ChannelDescription::parse(described.value());
    ASSERT_TRUE(parsed.ok()) << parsed.status().message();
    ps_side_ = parsed.take();
  }

  void TearDown() override {
    if (worker_) worker_->stop();
    if (ps_) ps_->stop();
  }

  // The ps's description with `edit` applied (what a lying ps would send).
  std::string lying(const std::function<void(ChannelDescription&)>& edit) const {
    ChannelDescription d = ps_side_;
    edit(d);
    return d.serialize();
  }

  // Both ways a description reaches the worker: as the answer to its own set-up, and
  // offered by the ps setting the channel up. Each must be refused, naming the ps and `what`.
  void expect_refused(const std::string& bytes, const std::string& what) {
    ASSERT_TRUE(worker_->channel(kPs, 7, {}).ok());
    const Status answered = worker_->connect(kPs, 7, bytes);
    EXPECT_FALSE(answered.ok()) << what;
    EXPECT_NE(answered.message().find(kPsName), std::string::npos) << answered.message();
    EXPECT_NE(answered.message().find(what), std::string::npos) << answered.message();
    EXPECT_FALSE(worker_->ready(kPs));

    auto offered = worker_->channel(kPs, 9, bytes);
    Status set_up = offered.ok() ? worker_->connect(kPs, 9, bytes) : offered.status();
    EXPECT_FALSE(set_up.ok()) << what;
    EXPECT_NE(set_up.message().find(kPsName), std::string::npos) << set_up.message();
    EXPECT_NE(set_up.message().find(what), std::string::npos) << set_up.message();
    EXPECT_FALSE(worker_->ready(kPs));
  }

  std::unique_ptr<RdmaRendezvous> ps_, worker_;
  ChannelDescription ps_side_;
};

TEST_F(HostileChannelSetup, AnOperationSizeTooSmallForTheProtocolIsRefused) {
  for (std::uint64_t size : {std::uint64_t{1}, std::uint64_t{kSlotBytes - 1},
                             std::uint64_t{(64 << 10) - 1}}) {
    SCOPED_TRACE(size);
    expect_refused(lying([size](ChannelDescription& d) { d.max_message_bytes = size; }),
                   "max_message_bytes");
  }
}

TEST_F(HostileChannelSetup, AnyOperationSizeFromTheMinimumUpIsTaken) {
  std::uint64_t incarnation = 10;
  for (std::uint64_t size : {std::uint64_t{64} << 10, std::numeric_limits<std::uint64_t>::max()}) {
    SCOPED_TRACE(size);
    renew_ps_side(++incarnation);
    const std::string bytes = lying([size](ChannelDescription& d) { d.max_message_bytes = size; });
    auto mine = worker_->channel(kPs, incarnation, {});
    ASSERT_TRUE(mine.ok()) << mine.status().message();
    const Status connected = worker_->connect(kPs, incarnation, bytes);
    EXPECT_TRUE(connected.ok()) << connected.message();
  }
}

TEST_F(HostileChannelSetup, AMessageBufferThatContradictsItselfOrThisTaskIsRefused) {
  expect_refused(lying([](ChannelDescription& d) {
                   d.slots = 5;
                   d.rx_length = 5 * kSlotBytes + 8;
                 }),
                 "message slots");
  expect_refused(lying([](ChannelDescription& d) { d.rx_length = d.slots * kSlotBytes; }),
                 "rx_length");
  expect_refused(lying([](ChannelDescription& d) {
                   d.rx_addr = std::numeric_limits<std::uint64_t>::max() - 4096;
                 }),
                 "rx_addr");
  expect_refused(lying([](ChannelDescription& d) { d.provider = "ibverbs"; }), "provider");
  expect_refused(lying([](ChannelDescription& d) { d.endpoint.clear(); }), "endpoint");
}

}  // namespace
}  // namespace tensorverbs
