#include "protocol/shared_registration.h"

#include <cstring>
#include <utility>

#include "protocol/tensor_source.h"

namespace tensorverbs {

TensorValue register_once(TensorValue value, std::size_t each, RegisteredPool& pool,
                          verbs::ProtectionDomain& pd, ProtocolCounters& counters) {
  const std::size_t size = value.size();
  if (size == 0 || value.region || pool.region_of(value.data, size)) return value;
  auto* data = const_cast<std::uint8_t*>(value.data);  // only ever read
  Result<std::unique_ptr<verbs::MemoryRegion>> registered =
      each >= kStageBelow ? pd.register_memory(data, size, 0)
                          : Status(Code::kUnavailable, "small: staged");
  if (registered.ok()) {
    value.region = registered.take();
    counters.add(counters.source_registrations);
  } else if (auto staged = pool.allocate(size); staged.ok()) {
    PoolBuffer buffer = staged.take();
    std::memcpy(buffer->data(), value.data, size);
    value.data = buffer->data();
    value.keepalive = std::move(buffer);
    counters.add(counters.staging_copies);
  }
  return value;
}

}  // namespace tensorverbs
