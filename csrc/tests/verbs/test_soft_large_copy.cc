// The soft provider's large shared-memory copies, which run off the queue pair's mutex on
// the context's copy helpers: held while the copy is stalled (its source pages missing,
// see missing_pages.h), what was posted after it waits behind it, and a queue pair that
// fails meanwhile flushes nothing before the copy ends (the caller may free its memory on
// the flush).
#include <gtest/gtest.h>

#include "tests/missing_pages.h"
#include "tests/verbs/soft_param.h"
#include "verbs/soft/soft_queue_pair.h"

namespace tensorverbs::verbs::testing {
namespace {

using testing_memory::MissingPages;

constexpr std::size_t kLarge = std::size_t{soft::kAsyncCopyBytes} * 2;

class SoftLargeCopy : public Conformance {
 protected:
  void SetUp() override {
    Conformance::SetUp();
    if (HasFatalFailure()) return;
    target_ = b_->region(kLarge + 4096, kAllAccess, kPoison);
    small_ = a_->region(4096);
    fill_random(small_->data(), 4096, 5);
    // the first writes into the target have the writer map its memory (they go through
    // the stream meanwhile); the later ones copy
    for (std::uint64_t id = 100; id < 103; ++id) {
      SendWr w = wr(id, WrOpcode::kRdmaWrite, small_.get(), 0, 4096, target_->addr(), target_->rkey());
      ASSERT_TRUE(a_->qp->post_send(&w, 1).ok());
      auto wcs = a_->completions(1);
      ASSERT_EQ(wcs.size(), 1u);
      ASSERT_TRUE(wcs[0].ok()) << a_->qp->error_detail();
    }
  }

  // A write of `pages` (kLarge bytes, registered) into the target, then a 4 KiB write
  // with immediate after it.
  void post_large_then_small(MissingPages& pages) {
    auto region = a_->pd->register_memory(pages.data(), kLarge, kLocalWrite);
    ASSERT_TRUE(region.ok()) << region.status().message();
    source_ = region.take();
    SendWr ws[2] = {wr(1, WrOpcode::kRdmaWrite, source_.get(), 0, kLarge, target_->addr(),
                       target_->rkey()),
                    wr(2, WrOpcode::kRdmaWriteWithImm, small_.get(), 0, 4096,
                       target_->addr() + kLarge, target_->rkey())};
    ws[1].imm = 77;
    ASSERT_TRUE(a_->qp->post_send(ws, 2).ok());
    ASSERT_TRUE(pages.wait_touched()) << "the large copy never started: " << a_->qp->error_detail();
  }

  std::unique_ptr<MemoryRegion> target_, small_, source_;
};

TEST_P(SoftLargeCopy, WhatIsPostedAfterALargeCopyWaitsBehindIt) {
  MissingPages pages(kLarge);
  if (!pages.unavailable().empty()) GTEST_SKIP() << pages.unavailable();
  std::vector<std::uint8_t> content(kLarge);
  fill_random(content.data(), kLarge, 9);
  RecvWr r{9};
  ASSERT_TRUE(b_->qp->post_recv(&r, 1).ok());
  post_large_then_small(pages);
  if (HasFatalFailure()) return;
  // stalled: neither write completed, no immediate arrived, and the small write's bytes
  // are not there yet
  EXPECT_TRUE(a_->drain(0.1).empty());
  EXPECT_TRUE(b_->drain(0.1).empty());
  EXPECT_TRUE(all_equal(target_->data() + kLarge, 4096, kPoison));
  ASSERT_TRUE(pages.fill(content));
  auto wcs = a_->completions(2, 60);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_TRUE(wcs[0].ok() && wcs[1].ok()) << a_->qp->error_detail();
  auto rwcs = b_->completions(1, 60);
  ASSERT_EQ(rwcs.size(), 1u);
  EXPECT_EQ(rwcs[0].imm, 77u);
  EXPECT_EQ(std::memcmp(target_->data(), content.data(), kLarge), 0);
  EXPECT_EQ(std::memcmp(target_->data() + kLarge, small_->data(), 4096), 0);
}

TEST_P(SoftLargeCopy, AQueuePairFailingDuringALargeCopyFlushesOnceTheCopyEnded) {
  MissingPages pages(kLarge);
  if (!pages.unavailable().empty()) GTEST_SKIP() << pages.unavailable();
  post_large_then_small(pages);
  if (HasFatalFailure()) return;
  a_->qp->to_error("failed by the test");
  // the copy still reads the caller's memory: no flush yet, for it or what follows it
  EXPECT_TRUE(a_->drain(0.1).empty());
  ASSERT_TRUE(pages.fill(std::vector<std::uint8_t>(kLarge, 1)));
  auto wcs = a_->completions(2, 60);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kWrFlushErr);
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_EQ(wcs[1].status, WcStatus::kWrFlushErr);
}

TEST_P(SoftLargeCopy, AQueuePairDestroyedDuringALargeCopyWaitsForIt) {
  MissingPages pages(kLarge);
  if (!pages.unavailable().empty()) GTEST_SKIP() << pages.unavailable();
  post_large_then_small(pages);
  if (HasFatalFailure()) return;
  std::vector<std::uint8_t> content(kLarge, 3);
  a_->stop();
  // the destruction waits for the copy (which the fill lets go, before or after it began):
  // nothing may write the target or read the source once it returned
  std::thread destroying([&] { a_->qp.reset(); });
  EXPECT_TRUE(pages.fill(content));
  destroying.join();
  source_.reset();  // the copy ended before the queue pair went: this memory is the caller's again
  EXPECT_EQ(std::memcmp(target_->data(), content.data(), kLarge), 0);
}

INSTANTIATE_TEST_SUITE_P(Soft, SoftLargeCopy, ::testing::Values(soft_param("soft_shm", "auto")),
                         conformance_name);

}  // namespace
}  // namespace tensorverbs::verbs::testing
