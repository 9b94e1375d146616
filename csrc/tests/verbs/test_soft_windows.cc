// The soft provider's windows and keys against peers who guess or pass keys around: a
// window bound to a queue pair lets only that queue pair's peer through (on one host,
// where the peer's provider checks the key table it maps, and over TCP, where this side
// checks each frame), and keys are unpredictable: none repeats, and the slot a key takes
// says nothing about it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "conformance.h"
#include "soft_param.h"

namespace tensorverbs::verbs::testing {
namespace {

// b has two queue pairs: one connected to a, the other to c.
class SoftWindows : public ::testing::TestWithParam<ConformanceParam> {
 protected:
  void SetUp() override {
    for (auto* side : {&a_, &b_, &c_}) {
      *side = std::make_unique<Side>(GetParam());
      ASSERT_TRUE((*side)->ok()) << (*side)->error;
    }
    auto other = b_->ctx->create_qp(b_->pd, b_->cq, b_->cq, QpCaps{64, 64});
    ASSERT_TRUE(other.ok()) << other.status().message();
    b_to_c_ = other.take();
    ASSERT_TRUE(connect_pair(*a_->qp, *b_->qp));
    ASSERT_TRUE(connect_pair(*c_->qp, *b_to_c_));
  }

  void TearDown() override {
    for (auto* side : {&a_, &b_, &c_}) {
      if (*side) (*side)->stop();
    }
  }

  // One `opcode` (write or read) of 4096 bytes by `side` at (addr, rkey); its status.
  static WcStatus access(Side& side, WrOpcode opcode, std::uint64_t addr, std::uint32_t rkey,
                         MemoryRegion& local) {
    SendWr w = wr(9, opcode, &local, 0, 4096, addr, rkey);
    EXPECT_TRUE(side.qp->post_send(&w, 1).ok());
    auto wcs = side.completions(1);
    return wcs.empty() ? WcStatus::kGeneralErr : wcs[0].status;
  }

  // A window bound to b's queue pair to a, over the second page of a region with local
  // access only (as the registered pool's).
  void expect_only_a_gets_through(WrOpcode opcode, std::uint32_t window_access) {
    auto region = b_->region(2 * 4096, kLocalWrite, kPoison);
    fill_random(region->data() + 4096, 4096, 5);
    auto window = b_->qp->bind_window(*region, region->addr() + 4096, 4096, window_access);
    ASSERT_TRUE(window.ok()) << window.status().message();
    const MemoryWindow& w = *window.value();
    const std::vector<std::uint8_t> before(region->data() + 4096, region->data() + 2 * 4096);
    auto from_c = c_->region(4096, kAllAccess, 0x11);
    EXPECT_EQ(access(*c_, opcode, w.addr(), w.rkey(), *from_c), WcStatus::kRemAccessErr);
    EXPECT_TRUE(all_equal(from_c->data(), 4096, 0x11));  // c read nothing
    EXPECT_EQ(std::memcmp(region->data() + 4096, before.data(), 4096), 0);  // nor wrote
    EXPECT_TRUE(all_equal(region->data(), 4096, kPoison));
    auto from_a = a_->region(4096, kAllAccess, 0x22);
    EXPECT_EQ(access(*a_, opcode, w.addr(), w.rkey(), *from_a), WcStatus::kSuccess)
        << a_->qp->error_detail();
    EXPECT_EQ(std::memcmp(region->data() + 4096, from_a->data(), 4096), 0);
  }

  std::unique_ptr<Side> a_, b_, c_;
  std::shared_ptr<QueuePair> b_to_c_;
};

TEST_P(SoftWindows, AWriteWindowOfAQueuePairIsForItsPeerOnly) {
  expect_only_a_gets_through(WrOpcode::kRdmaWrite, kRemoteWrite);
}

TEST_P(SoftWindows, AReadWindowOfAQueuePairIsForItsPeerOnly) {
  expect_only_a_gets_through(WrOpcode::kRdmaRead, kRemoteRead);
}

INSTANTIATE_TEST_SUITE_P(Soft, SoftWindows, soft_params(), conformance_name);

// The keys of `count` windows bound and revoked one after the other (each takes the slot
// the one before freed) and of `count` registrations made and dropped the same way.
std::vector<std::uint32_t> keys_in_turn(Side& side, std::size_t count, bool windows) {
  auto region = side.region(4096, kLocalWrite);
  std::vector<std::uint32_t> keys;
  keys.reserve(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (windows) {
      auto window = side.pd->bind_window(*region, region->addr(), 64, kRemoteWrite);
      EXPECT_TRUE(window.ok()) << window.status().message();
      if (!window.ok()) break;
      keys.push_back(window.value()->rkey());
    } else {
      auto registered = side.pd->register_memory(region->data(), 64, kLocalWrite | kRemoteWrite);
      EXPECT_TRUE(registered.ok()) << registered.status().message();
      if (!registered.ok()) break;
      keys.push_back(registered.value()->rkey());
    }
  }
  return keys;
}

void expect_unpredictable(std::vector<std::uint32_t> keys) {
  std::set<std::uint32_t> low, high;
  for (std::uint32_t key : keys) {
    low.insert(key & 0xFFFF);
    high.insert(key >> 16);
  }
  // drawn at random, 100000 keys give ~52000 different halves; a slot in either: 1
  EXPECT_GT(low.size(), keys.size() / 3);
  EXPECT_GT(high.size(), keys.size() / 3);
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end()) << "a key came back";
  EXPECT_EQ(std::count(keys.begin(), keys.end(), 0u), 0);
}

TEST(SoftKeys, WindowKeysAreUnpredictableAndNeverRepeat) {
  Side side(soft_param("soft_shm", "auto"));
  ASSERT_TRUE(side.ok()) << side.error;
  expect_unpredictable(keys_in_turn(side, 100000, true));
}

TEST(SoftKeys, RegionKeysAreUnpredictableAndNeverRepeat) {
  Side side(soft_param("soft_shm", "auto"));
  ASSERT_TRUE(side.ok()) << side.error;
  expect_unpredictable(keys_in_turn(side, 100000, false));
}

}  // namespace
}  // namespace tensorverbs::verbs::testing
