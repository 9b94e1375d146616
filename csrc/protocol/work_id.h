// The wr_id of the protocol's work requests: what the work is for (high byte) and which
// request or slot (low bits), so a completion is dispatched without a lookup table.
#pragma once

#include <cstdint>

namespace tensorverbs {

enum class WorkKind : std::uint8_t {
  kMessage = 1,       // a control message write (unsignaled; completes only on failure)
  kAck = 2,           // an explicit ACK write (unsignaled, but a stopping channel's fence)
  kTensorWrite = 3,   // the content write of a response (value: the peer's request index)
  kTensorRead = 4,    // the content read of a request, read mode (value: our request index)
  kRecv = 5,          // a posted receive (value: its slot in the receive queue)
};

inline std::uint64_t work_id(WorkKind kind, std::uint32_t value) {
  return (std::uint64_t{static_cast<std::uint8_t>(kind)} << 56) | value;
}
inline WorkKind work_kind(std::uint64_t wr_id) { return static_cast<WorkKind>(wr_id >> 56); }
inline std::uint32_t work_value(std::uint64_t wr_id) {
  return static_cast<std::uint32_t>(wr_id & 0xFFFFFFFFu);
}

// Immediates: a control message, an ACK; anything else is a request index.
inline constexpr std::uint32_t kImmMessage = 0xFFFFFFFF;
inline constexpr std::uint32_t kImmAck = 0xFFFFFFFE;

}  // namespace tensorverbs
