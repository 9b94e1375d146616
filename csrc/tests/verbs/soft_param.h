// The soft provider as a parameter of the conformance fixtures (conformance.h): "soft_shm"
// (one host: shared memory and the Unix socket) and "soft_tcp" (same_host = "no":
// everything over TCP).
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "tests/verbs/conformance.h"
#include "verbs/soft/soft_provider.h"

namespace tensorverbs::verbs::testing {

inline ConformanceParam soft_param(const std::string& name, const std::string& same_host) {
  ConformanceParam param;
  param.name = name;
  param.config.provider = "soft";
  param.config.same_host = same_host;
  param.open = [](const VerbsConfig& config) { return soft_provider().open(config, "127.0.0.1"); };
  return param;
}

// Both ways of the soft provider.
inline auto soft_params() {
  return ::testing::Values(soft_param("soft_shm", "auto"), soft_param("soft_tcp", "no"));
}

}  // namespace tensorverbs::verbs::testing
