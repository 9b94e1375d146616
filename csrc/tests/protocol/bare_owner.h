// BareOwner: the owner of a channel used on its own in a test: it counts messages, takes
// no requests, names every peer `name`.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "protocol/rdma_channel.h"

namespace tensorverbs {

class BareOwner : public ChannelOwner {
 public:
  explicit BareOwner(std::string name) : name_(std::move(name)) {}
  ProtocolCounters& counters() override { return counters_; }
  void on_tensor_request(const std::shared_ptr<RdmaChannel>&, const RdmaMessage&) override {}
  const std::string& task_name(std::int32_t) const override { return name_; }
  void wants_housekeeping() override {}

 private:
  ProtocolCounters counters_;
  std::string name_;
};

}  // namespace tensorverbs
