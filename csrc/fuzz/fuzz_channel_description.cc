// libFuzzer: ChannelDescription::parse takes any bytes; what it accepts serializes back to
// the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "protocol/channel_description.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  const auto parsed = tensorverbs::ChannelDescription::parse(bytes);
  if (parsed.ok() && parsed.value().serialize() != bytes) std::abort();
  return 0;
}
