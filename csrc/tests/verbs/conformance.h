// The conformance suite every verbs provider passes (test_conformance.cc): a parametrized
// fixture whose parameter opens a context of one provider. A provider instantiates it in a
// file of its own, e.g.
//   INSTANTIATE_TEST_SUITE_P(Soft, Conformance, ::testing::Values(ConformanceParam{...}),
//                            conformance_name);
// Each side has a context, a PD, one CQ for both queues, a QP, and a thread collecting
// completions (the stand-in for the protocol's completion thread). Real bytes are compared;
// every wait has a timeout.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <algorithm>
#include <cstring>
#include <functional>
#include <random>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "completions.h"
#include "verbs/context.h"
#include "verbs/device.h"
#include "verbs/work.h"

namespace tensorverbs::verbs::testing {

struct ConformanceParam {
  std::string name;  // the test-name suffix: letters, digits, '_'
  // Opens a context of the provider (config.provider etc. set by the factory itself).
  std::function<Result<std::shared_ptr<Context>>(const VerbsConfig&)> open;
  VerbsConfig config;
  std::size_t max_bytes = 64u << 20;  // the largest single transfer tried
  // The device reports a local protection error as a flush of the request (soft-RoCE since
  // Linux 6.x flushes the failed request with the rest of the send queue).
  bool flushes_local_errors = false;
};

inline std::string conformance_name(const ::testing::TestParamInfo<ConformanceParam>& info) {
  return info.param.name;
}

inline constexpr std::uint32_t kAllAccess = kLocalWrite | kRemoteWrite | kRemoteRead;

// One side of a connection.
class Side {
 public:
  Side(const ConformanceParam& param, int send_depth = 64, int recv_depth = 64);
  ~Side();
  Side(const Side&) = delete;
  Side& operator=(const Side&) = delete;

  bool ok() const { return error.empty(); }
  // The next n completions (fewer when they do not come within timeout_s).
  std::vector<WorkCompletion> completions(std::size_t n, double timeout_s = 20.0);
  // Completions gathered for `quiet_s` seconds (expecting none, say).
  std::vector<WorkCompletion> drain(double quiet_s);
  std::unique_ptr<MemoryRegion> region(std::size_t n, std::uint32_t access = kAllAccess,
                                       std::uint8_t fill = 0);
  // Ends the collector (before the CQ or context go). Its wake-up may be left for the next
  // wait on the CQ: a test that waits there after stop() uses wait_for (completions.h).
  void stop();

  std::string error;
  std::shared_ptr<Context> ctx;
  std::shared_ptr<ProtectionDomain> pd;
  std::shared_ptr<CompletionQueue> cq;
  std::shared_ptr<QueuePair> qp;

 private:
  void collect();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<WorkCompletion> wcs_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Connects two queue pairs (a's connect first, as the protocol's set-up does).
::testing::AssertionResult connect_pair(QueuePair& a, QueuePair& b);

// -- helpers of the suite --
inline constexpr std::size_t kGuard = 64;
inline constexpr std::uint8_t kPoison = 0xEE;

inline void fill_random(std::uint8_t* p, std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const std::uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  for (; i < n; ++i) p[i] = static_cast<std::uint8_t>(rng());
}

inline bool all_equal(const std::uint8_t* p, std::size_t n, std::uint8_t value) {
  return std::all_of(p, p + n, [value](std::uint8_t b) { return b == value; });
}

inline SendWr wr(std::uint64_t id, WrOpcode opcode, const MemoryRegion* local, std::size_t offset,
          std::uint32_t length, std::uint64_t remote_addr = 0, std::uint32_t rkey = 0) {
  SendWr w;
  w.wr_id = id;
  w.opcode = opcode;
  if (local != nullptr && length > 0) w.sge = local->sge(offset, length);
  w.remote_addr = remote_addr;
  w.rkey = rkey;
  return w;
}

inline std::vector<std::size_t> sizes(std::size_t max, bool with_large) {
  std::vector<std::size_t> out{0, 1, 4096, 1u << 20};
  if (with_large) out.push_back(64u << 20);
  out.erase(std::remove_if(out.begin(), out.end(), [max](std::size_t s) { return s > max; }),
            out.end());
  return out;
}

class Conformance : public ::testing::TestWithParam<ConformanceParam> {
 protected:
  void SetUp() override;
  void TearDown() override;
  std::unique_ptr<Side> make_side(int send_depth = 64, int recv_depth = 64);

  std::unique_ptr<Side> a_, b_;
};

}  // namespace tensorverbs::verbs::testing
