// Helpers of the ibverbs provider's tests: two ends (context, PD, one CQ for both queues,
// an RC queue pair) on the first two active devices (rxe0 and rxe1 in the soft-RoCE guest;
// one device twice where there is only one), connected to each other.
//
// Where no device is active the tests that need one skip, saying why; with
// TENSORVERBS_TEST_REQUIRE_IBVERBS=1 (the soft-RoCE lane) they fail instead.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "completions.h"
#include "verbs/context.h"
#include "verbs/ibverbs/ibverbs_provider.h"
#include "verbs/provider.h"
#include "verbs/work.h"

namespace tensorverbs::verbs::testing {

inline bool ibverbs_required() {
  const char* value = std::getenv("TENSORVERBS_TEST_REQUIRE_IBVERBS");
  return value != nullptr && std::string(value) == "1";
}

// The names of the devices with an active port; empty with `why` set where there is none.
inline std::vector<std::string> active_devices(std::string* why) {
  const Provider* provider = ibverbs_provider();
  if (provider == nullptr) {
    *why = "built without rdma-core's headers";
    return {};
  }
  const Availability availability = provider->availability();
  if (!availability.available) {
    *why = "ibverbs provider unavailable: " + availability.reason;
    return {};
  }
  std::vector<std::string> out;
  for (const DeviceAttr& device : provider->devices()) {
    for (const PortAttr& port : device.ports) {
      if (port.state == "ACTIVE") {
        out.push_back(device.name);
        break;
      }
    }
  }
  return out;
}

// In a test body: skip (or fail where a device is required) without an active device.
#define IBVERBS_NEED_DEVICES(names)                                                     \
  std::string ibverbs_why_;                                                             \
  const std::vector<std::string> names = ::tensorverbs::verbs::testing::active_devices( \
      &ibverbs_why_);                                                                   \
  if (names.empty()) {                                                                  \
    if (::tensorverbs::verbs::testing::ibverbs_required()) {                            \
      FAIL() << ibverbs_why_ << " (TENSORVERBS_TEST_REQUIRE_IBVERBS=1)";                \
    }                                                                                   \
    GTEST_SKIP() << ibverbs_why_;                                                       \
  }

struct End {
  std::shared_ptr<Context> ctx;
  std::shared_ptr<ProtectionDomain> pd;
  std::shared_ptr<CompletionQueue> cq;
  std::shared_ptr<QueuePair> qp;
};

inline VerbsConfig config_for(const std::string& device) {
  VerbsConfig config;
  config.provider = "ibverbs";
  config.device = device;
  return config;
}

// An end on `config.device`; failures are test failures.
inline End open_end(const VerbsConfig& config, QpCaps caps = {64, 64}, int cq_depth = 256) {
  End end;
  Result<std::shared_ptr<Context>> ctx = ibverbs_provider()->open(config, "");
  EXPECT_TRUE(ctx.ok()) << ctx.status().message();
  if (!ctx.ok()) return end;
  end.ctx = ctx.take();
  Result<std::shared_ptr<ProtectionDomain>> pd = end.ctx->alloc_pd();
  Result<std::shared_ptr<CompletionQueue>> cq = end.ctx->create_cq(cq_depth);
  EXPECT_TRUE(pd.ok() && cq.ok()) << pd.status().message() << cq.status().message();
  if (!pd.ok() || !cq.ok()) return end;
  end.pd = pd.take();
  end.cq = cq.take();
  Result<std::shared_ptr<QueuePair>> qp = end.ctx->create_qp(end.pd, end.cq, end.cq, caps);
  EXPECT_TRUE(qp.ok()) << qp.status().message();
  if (qp.ok()) end.qp = qp.take();
  return end;
}

inline void connect(End& a, End& b) {
  const Status ab = a.qp->connect(b.qp->endpoint());
  ASSERT_TRUE(ab.ok()) << ab.message();
  const Status ba = b.qp->connect(a.qp->endpoint());
  ASSERT_TRUE(ba.ok()) << ba.message();
}

// The largest single transfer the tests try: a device's max_msg_sz, up to 16 MiB (soft-RoCE
// allows 8 MiB on Linux 6.1 and 2 GiB since, more than the lane's guest holds twice over).
constexpr std::size_t kLargestIbverbsTransfer = std::size_t{16} << 20;

// Two connected ends on the first two active devices.
class IbverbsPair : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    devices_ = active_devices(&why);
    if (devices_.empty()) {
      if (ibverbs_required()) FAIL() << why << " (TENSORVERBS_TEST_REQUIRE_IBVERBS=1)";
      GTEST_SKIP() << why;
    }
    a_ = open_end(config_for(first()));
    b_ = open_end(config_for(second()));
    ASSERT_TRUE(a_.qp && b_.qp);
    connect(a_, b_);
  }
  const std::string& first() const { return devices_[0]; }
  const std::string& second() const { return devices_[devices_.size() > 1 ? 1 : 0]; }

  std::vector<std::string> devices_;
  End a_, b_;
};

}  // namespace tensorverbs::verbs::testing
