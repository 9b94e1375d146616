// On one host a peer's memory is read and written by shared memory once its segment is
// mapped (asked for on first use; the stream carries the operation meanwhile). Operations
// posted together behind one that took the stream take it too, to stay in order; each of
// them still asks for its segment, so that the next ones go by shared memory.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "conformance.h"
#include "soft_param.h"

namespace tensorverbs::verbs::testing {
namespace {

constexpr std::size_t kRegions = 8;
constexpr std::uint32_t kBytes = 4096;

class SoftSegments : public ::testing::TestWithParam<ConformanceParam> {
 protected:
  void SetUp() override {
    if (GetParam().config.same_host == "no") GTEST_SKIP() << "over TCP nothing is shared";
    for (auto* side : {&a_, &b_}) {
      *side = std::make_unique<Side>(GetParam());
      ASSERT_TRUE((*side)->ok()) << (*side)->error;
    }
    ASSERT_TRUE(connect_pair(*a_->qp, *b_->qp));
    for (std::size_t i = 0; i < kRegions; ++i) {  // a segment each
      regions_.push_back(b_->region(kBytes, kAllAccess, static_cast<std::uint8_t>(i + 1)));
    }
  }

  void TearDown() override {
    for (auto* side : {&a_, &b_}) {
      if (*side) (*side)->stop();
    }
  }

  // a reads every region of b, posted together, into `into`; whether all came right.
  ::testing::AssertionResult read_all(MemoryRegion& into, double timeout_s) {
    std::vector<SendWr> wrs;
    for (std::size_t i = 0; i < kRegions; ++i) {
      wrs.push_back(wr(i, WrOpcode::kRdmaRead, &into, i * kBytes, kBytes, regions_[i]->addr(),
                       regions_[i]->rkey()));
    }
    if (!a_->qp->post_send(wrs.data(), wrs.size()).ok()) return ::testing::AssertionFailure() << "post";
    const auto wcs = a_->completions(kRegions, timeout_s);
    if (wcs.size() != kRegions) {
      return ::testing::AssertionFailure() << wcs.size() << " of " << kRegions << " reads completed";
    }
    for (const auto& wc : wcs) {
      if (wc.status != WcStatus::kSuccess) return ::testing::AssertionFailure() << "a read failed";
    }
    for (std::size_t i = 0; i < kRegions; ++i) {
      if (!all_equal(into.data() + i * kBytes, kBytes, static_cast<std::uint8_t>(i + 1))) {
        return ::testing::AssertionFailure() << "region " << i << " read wrong bytes";
      }
    }
    return ::testing::AssertionSuccess();
  }

  std::unique_ptr<Side> a_, b_;
  std::vector<std::unique_ptr<MemoryRegion>> regions_;
};

TEST_P(SoftSegments, ReadsPostedTogetherMapEverySegmentTheyReach) {
  auto first = a_->region(kRegions * kBytes, kAllAccess, 0);
  ASSERT_TRUE(read_all(*first, 20));  // by the stream, b answering
  // b makes no progress any more: what still needs it waits, what goes by shared memory not
  b_->stop();
  auto second = a_->region(kRegions * kBytes, kAllAccess, 0);
  EXPECT_TRUE(read_all(*second, 5));
}

INSTANTIATE_TEST_SUITE_P(Soft, SoftSegments, soft_params(), conformance_name);

}  // namespace
}  // namespace tensorverbs::verbs::testing
