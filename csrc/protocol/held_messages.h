// HeldMessages: while one lives on a thread, the control messages that thread sends with
// RdmaChannel::send (requests, cancels, releases) wait in their channels' message buffers,
// and go out as it ends: the requests of a batch of recvs
// reach each peer in as few TENSOR_REQUESTS messages as they fill (one round of messages
// per peer), not one message per tensor. Meanwhile every message of a held channel waits
// (in order), whichever thread sends it. Scopes nest: the outermost releases.
#pragma once

#include <memory>
#include <vector>

namespace tensorverbs {

class RdmaChannel;

class HeldMessages {
 public:
  HeldMessages();
  ~HeldMessages();
  HeldMessages(const HeldMessages&) = delete;
  HeldMessages& operator=(const HeldMessages&) = delete;

  // The outermost scope of this thread, or nullptr.
  static HeldMessages* current();
  // Whether `channel` is held by this scope.
  bool holds(const RdmaChannel* channel) const;
  // Room for one more channel, so that the add() that follows cannot fail.
  void make_room() {
    if (channels_.size() == channels_.capacity()) channels_.reserve(2 * channels_.size() + 4);
  }
  // `channel` (held already: RdmaChannel does it) is released as this scope ends.
  void add(std::shared_ptr<RdmaChannel> channel);

 private:
  bool outermost_;
  std::vector<std::shared_ptr<RdmaChannel>> channels_;
};

}  // namespace tensorverbs
