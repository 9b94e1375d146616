#include "protocol/held_messages.h"

#include <algorithm>

#include "core/status.h"
#include "protocol/rdma_channel.h"

namespace tensorverbs {

namespace {
thread_local HeldMessages* g_current = nullptr;
}  // namespace

HeldMessages::HeldMessages() : outermost_(g_current == nullptr) {
  if (outermost_) g_current = this;
}

HeldMessages::~HeldMessages() {
  if (!outermost_) return;
  g_current = nullptr;  // (before: a release sends on this thread)
  for (const std::shared_ptr<RdmaChannel>& channel : channels_) {
    try {
      channel->release_held();
    } catch (...) {  // (no memory to post what waited: a destructor may not throw)
      try {
        channel->fail(Status(Code::kResourceExhausted,
                             channel->name() + ": no memory to send the messages held"));
      } catch (...) {
      }
    }
  }
}

HeldMessages* HeldMessages::current() { return g_current; }

bool HeldMessages::holds(const RdmaChannel* channel) const {
  return std::any_of(
      channels_.begin(), channels_.end(),
      [channel](const std::shared_ptr<RdmaChannel>& held) { return held.get() == channel; });
}

void HeldMessages::add(std::shared_ptr<RdmaChannel> channel) {
  channels_.push_back(std::move(channel));
}

}  // namespace tensorverbs
