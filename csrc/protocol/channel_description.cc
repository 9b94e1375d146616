#include "protocol/channel_description.h"

#include <limits>

#include "core/byte_io.h"
#include "protocol/rdma_message.h"

namespace tensorverbs {

namespace {

constexpr std::uint32_t kMagic = 0x48435654;  // "TVCH"
// 2: the peer may send TENSOR_REQUESTS, which a peer of version 1 cannot read
constexpr std::uint8_t kVersion = 2;
constexpr std::size_t kMaxProvider = 32;
constexpr std::size_t kMaxEndpoint = 4096;

// Why the fields of `d` cannot describe a channel, or "".
std::string refusal(const ChannelDescription& d) {
  if (d.provider.empty()) return "it names no verbs provider";
  if (d.endpoint.empty()) return "it has no queue-pair endpoint";
  if (d.slots == 0 || d.slots > kMaxSlots) {
    return "it has " + std::to_string(d.slots) + " message slots (1 to " +
           std::to_string(kMaxSlots) + ")";
  }
  const std::uint64_t needed = std::uint64_t{d.slots} * kSlotBytes + 8;
  if (d.rx_length < needed) {
    return "its rx_length of " + std::to_string(d.rx_length) + " bytes cannot hold " +
           std::to_string(d.slots) + " message slots (" + std::to_string(needed) + " bytes)";
  }
  if (d.rx_addr > std::numeric_limits<std::uint64_t>::max() - d.rx_length) {
    return "its message buffer (rx_addr " + std::to_string(d.rx_addr) + ", " +
           std::to_string(d.rx_length) + " bytes) runs past the end of the address space";
  }
  if (d.max_message_bytes < kMinMessageBytes) {
    return "it announces max_message_bytes=" + std::to_string(d.max_message_bytes) +
           " (at least " + std::to_string(kMinMessageBytes) + ")";
  }
  return "";
}

}  // namespace

std::string ChannelDescription::serialize() const {
  return ByteWriter()
      .put(kMagic)
      .put(kVersion)
      .put_bytes(provider)
      .put_bytes(endpoint)
      .put(rx_addr)
      .put(rx_rkey)
      .put(rx_length)
      .put(slots)
      .put(max_message_bytes)
      .take();
}

Result<ChannelDescription> ChannelDescription::parse(std::string_view bytes) {
  ByteReader in(bytes);
  if (in.get<std::uint32_t>() != kMagic || in.get<std::uint8_t>() != kVersion) {
    return Status(Code::kInvalidArgument, "it is not a channel description of this version");
  }
  ChannelDescription out;
  out.provider = std::string(in.get_bytes(kMaxProvider));
  out.endpoint = std::string(in.get_bytes(kMaxEndpoint));
  out.rx_addr = in.get<std::uint64_t>();
  out.rx_rkey = in.get<std::uint32_t>();
  out.rx_length = in.get<std::uint64_t>();
  out.slots = in.get<std::uint32_t>();
  out.max_message_bytes = in.get<std::uint64_t>();
  if (!in.done()) {
    return Status(Code::kInvalidArgument,
                  "its " + std::to_string(bytes.size()) + " bytes are not a channel description");
  }
  std::string why = refusal(out);
  if (!why.empty()) return Status(Code::kInvalidArgument, std::move(why));
  return out;
}

}  // namespace tensorverbs
