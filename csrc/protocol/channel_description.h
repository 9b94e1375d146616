// ChannelDescription: what one side of a verbs channel tells the other through the
// control plane (TensorFlow's GetRemoteAddress: the queue pair's endpoint and the address
// and key of the message buffer), as bytes. The parser is strict and fuzzed: the bytes
// come from a peer, and what it accepts is within the bounds the protocol works with.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tensorverbs {

// The smallest operation size a peer may announce: every device takes operations of 2 GiB
// (InfiniBand requires 2^31 bytes); below this, a tensor would split into absurdly many.
inline constexpr std::uint64_t kMinMessageBytes = std::uint64_t{64} << 10;
inline constexpr std::uint32_t kMaxSlots = 1024;

struct ChannelDescription {
  std::string provider;           // "soft", "ibverbs"
  std::string endpoint;           // the queue pair's, opaque to the protocol
  std::uint64_t rx_addr = 0;      // the message buffer the peer writes messages into
  std::uint32_t rx_rkey = 0;
  std::uint64_t rx_length = 0;
  std::uint32_t slots = 0;        // message slots (the peer's credits)
  std::uint64_t max_message_bytes = 0;  // largest single operation this side can take

  std::string serialize() const;
  // kInvalidArgument saying what is wrong for bytes that are not a description (wrong
  // version, lengths) or whose fields are out of bounds or contradict each other.
  static Result<ChannelDescription> parse(std::string_view bytes);
};

}  // namespace tensorverbs
