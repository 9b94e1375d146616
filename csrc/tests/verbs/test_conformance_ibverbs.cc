// The conformance suite (conformance.h) on the ibverbs provider: one side on the first
// active device, the other on the second (rxe0 and rxe1 in the soft-RoCE guest; one device
// twice where there is only one). Transfers go up to the device's largest operation
// (max_msg_sz). Where no device is active the suite has no instances here, and
// IbverbsConformance.NeedsAnActiveDevice says why (it fails instead with
// TENSORVERBS_TEST_REQUIRE_IBVERBS=1).
#include <gtest/gtest.h>

#if TENSORVERBS_HAVE_IBVERBS

#include <algorithm>
#include <atomic>
#include <memory>
#include <vector>

#include "conformance.h"
#include "ibverbs_fixture.h"

namespace tensorverbs::verbs::testing {
namespace {

std::vector<ConformanceParam> ibverbs_params() {
  std::string why;
  const std::vector<std::string> devices = active_devices(&why);
  if (devices.empty()) return {};
  ConformanceParam param;
  param.name = "ibverbs";
  param.config.provider = "ibverbs";
  for (const DeviceAttr& device : ibverbs_provider()->devices()) {
    if (device.name == devices[0] && device.max_msg_sz != 0) {
      param.max_bytes = std::min(kLargestIbverbsTransfer, static_cast<std::size_t>(device.max_msg_sz));
    }
    if (device.name == devices[0]) param.flushes_local_errors = device.name.rfind("rxe", 0) == 0;
  }
  // each side opened takes the next device: a on the first, b on the second
  auto next = std::make_shared<std::atomic<std::size_t>>(0);
  param.open = [devices, next](const VerbsConfig& config) {
    VerbsConfig mine = config;
    mine.device = devices[next->fetch_add(1) % devices.size()];
    return ibverbs_provider()->open(mine, "");
  };
  return {param};
}

INSTANTIATE_TEST_SUITE_P(Ibverbs, Conformance, ::testing::ValuesIn(ibverbs_params()),
                         conformance_name);
// no instance without a device (in a build where no other provider instantiates it either)
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Conformance);

TEST(IbverbsConformance, NeedsAnActiveDevice) {
  IBVERBS_NEED_DEVICES(names);
  EXPECT_FALSE(names.empty());
}

}  // namespace
}  // namespace tensorverbs::verbs::testing

#endif  // TENSORVERBS_HAVE_IBVERBS
