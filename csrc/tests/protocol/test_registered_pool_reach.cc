// What a peer reaches of a task's registered pool, on the soft provider over shared memory
// and over TCP: with the window over one allocation (a landing), that allocation only;
// with the key of a pool block itself, nothing: no allocation of the block is remotely
// accessible but through a window over it.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "protocol/registered_pool.h"
#include "tests/verbs/conformance.h"
#include "tests/verbs/soft_param.h"

namespace tensorverbs {
namespace {

using namespace verbs::testing;

// a reaches (or tries to reach) the pool of b.
class PoolReach : public ::testing::TestWithParam<ConformanceParam> {
 protected:
  void SetUp() override {
    a_ = std::make_unique<Side>(GetParam());
    b_ = std::make_unique<Side>(GetParam());
    ASSERT_TRUE(a_->ok() && b_->ok()) << a_->error << b_->error;
    ASSERT_TRUE(connect_pair(*a_->qp, *b_->qp));
    pool_ = std::make_shared<RegisteredPool>(b_->pd, 1 << 20, 16 << 20);
    landing_ = pool_->allocate(4096).take();
    other_ = pool_->allocate(4096).take();
    ASSERT_TRUE(landing_ && other_);
    ASSERT_EQ(&landing_->region(), &other_->region());  // one block
    std::memset(other_->data(), kPoison, other_->size());
    local_ = a_->region(4096, kAllAccess, 0x33);
  }

  void TearDown() override {
    if (a_) a_->stop();
    if (b_) b_->stop();
  }

  // One `opcode` of `length` bytes by a at (addr, rkey); its status.
  verbs::WcStatus access(verbs::WrOpcode opcode, std::uint64_t addr, std::uint32_t rkey,
                         std::uint32_t length = 64) {
    verbs::SendWr w = wr(3, opcode, local_.get(), 0, length, addr, rkey);
    EXPECT_TRUE(a_->qp->post_send(&w, 1).ok());
    auto wcs = a_->completions(1);
    return wcs.empty() ? verbs::WcStatus::kGeneralErr : wcs[0].status;
  }

  std::uint64_t addr_of(const PoolBuffer& buffer) const {
    return reinterpret_cast<std::uint64_t>(buffer->data());
  }

  std::unique_ptr<Side> a_, b_;
  std::shared_ptr<RegisteredPool> pool_;
  PoolBuffer landing_, other_;
  std::unique_ptr<verbs::MemoryRegion> local_;
};

TEST_P(PoolReach, ABlocksOwnKeyWritesNothing) {
  EXPECT_EQ(access(verbs::WrOpcode::kRdmaWrite, addr_of(other_), other_->region().rkey()),
            verbs::WcStatus::kRemAccessErr);
  EXPECT_TRUE(all_equal(other_->data(), other_->size(), kPoison));
}

TEST_P(PoolReach, ABlocksOwnKeyReadsNothing) {
  EXPECT_EQ(access(verbs::WrOpcode::kRdmaRead, addr_of(other_), other_->region().rkey()),
            verbs::WcStatus::kRemAccessErr);
  EXPECT_TRUE(all_equal(local_->data(), local_->length(), 0x33));
}

TEST_P(PoolReach, ALandingsWindowReachesThatLandingOnly) {
  auto window = b_->pd->bind_window(landing_->region(), addr_of(landing_), landing_->size(),
                                    verbs::kRemoteWrite);
  ASSERT_TRUE(window.ok()) << window.status().message();
  const std::uint32_t rkey = window.value()->rkey();
  EXPECT_EQ(access(verbs::WrOpcode::kRdmaWrite, window.value()->addr(), rkey, 4096),
            verbs::WcStatus::kSuccess);
  EXPECT_TRUE(all_equal(landing_->data(), landing_->size(), 0x33));
  EXPECT_EQ(access(verbs::WrOpcode::kRdmaWrite, addr_of(other_), rkey),
            verbs::WcStatus::kRemAccessErr);
  EXPECT_TRUE(all_equal(other_->data(), other_->size(), kPoison));
}

INSTANTIATE_TEST_SUITE_P(Soft, PoolReach, soft_params(), conformance_name);

}  // namespace
}  // namespace tensorverbs
