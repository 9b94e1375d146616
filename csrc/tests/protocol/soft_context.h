// A soft-provider context on loopback and a protection domain of it: what the protocol's
// tests of one component (a channel, a message buffer, the pool) stand on.
#pragma once

#include <gtest/gtest.h>

#include <memory>

#include "verbs/soft/soft_provider.h"

namespace tensorverbs {

struct SoftContext {
  std::shared_ptr<verbs::Context> context;
  std::shared_ptr<verbs::ProtectionDomain> pd;
};

// Opens one (a test failure, and nulls, if it cannot).
inline SoftContext open_soft_context() {
  verbs::VerbsConfig config;
  config.provider = "soft";
  auto context = verbs::soft_provider().open(config, "127.0.0.1");
  EXPECT_TRUE(context.ok()) << context.status().message();
  if (!context.ok()) return {};
  SoftContext out{context.take(), nullptr};
  auto pd = out.context->alloc_pd();
  EXPECT_TRUE(pd.ok()) << pd.status().message();
  if (pd.ok()) out.pd = pd.take();
  return out;
}

}  // namespace tensorverbs
