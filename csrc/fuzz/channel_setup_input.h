// The input of fuzz_channel_setup (and its seeds): which description a hostile peer hands
// a task, as the changes it makes to its genuine one. Little-endian fields, in order; an
// input that ends early reads zeros for the rest (change nothing).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/byte_io.h"

namespace tensorverbs::fuzzing {

enum ChannelSetupFlags : std::uint8_t {
  kOffered = 1,          // the peer sets the channel up (else it answers the task's set-up)
  kSetMaxMessage = 2,    // max_message_bytes := max_message_bytes
  kSetSlots = 4,         // slots := slots
  kSetRxLength = 8,      // rx_length := rx_length
  kMoveRx = 16,          // rx_addr += rx_shift
  kFlipRkey = 32,        // rx_rkey ^= rkey_flip
  kCutEndpoint = 64,     // the endpoint's first endpoint_keep bytes only
  kRaw = 128,            // the description is `raw`, whatever it says
};

struct ChannelSetupInput {
  std::uint8_t flags = 0;
  std::uint8_t task_slots = 0;   // the tasks' message slots: 1, 4 or 16 (by this mod 3)
  std::uint64_t max_message_bytes = 0;
  std::uint32_t slots = 0;
  std::uint64_t rx_length = 0;
  std::uint64_t rx_shift = 0;
  std::uint32_t rkey_flip = 0;
  std::uint16_t endpoint_keep = 0;
  std::uint32_t tensor_bytes = 0;  // what then moves each way (mod 1 MiB)
  std::string raw;                 // the rest

  static ChannelSetupInput read(std::string_view bytes) {
    ByteReader in(bytes);
    ChannelSetupInput out;
    out.flags = in.get<std::uint8_t>();
    out.task_slots = in.get<std::uint8_t>();
    out.max_message_bytes = in.get<std::uint64_t>();
    out.slots = in.get<std::uint32_t>();
    out.rx_length = in.get<std::uint64_t>();
    out.rx_shift = in.get<std::uint64_t>();
    out.rkey_flip = in.get<std::uint32_t>();
    out.endpoint_keep = in.get<std::uint16_t>();
    out.tensor_bytes = in.get<std::uint32_t>();
    out.raw = std::string(in.get_bytes(bytes.size()));
    return out;
  }

  std::string write() const {
    return ByteWriter()
        .put(flags)
        .put(task_slots)
        .put(max_message_bytes)
        .put(slots)
        .put(rx_length)
        .put(rx_shift)
        .put(rkey_flip)
        .put(endpoint_keep)
        .put(tensor_bytes)
        .put_bytes(raw)
        .take();
  }
};

}  // namespace tensorverbs::fuzzing
