// TensorSource: the registered bytes of a tensor about to be written (or read by the peer):
// memory of the pool needs nothing; other memory is registered for the transfer, except
// small tensors (below kStageBelow bytes, where a copy costs less than a registration) and
// memory that cannot be registered, which are staged into the pool; a value registered
// already (the sends of a broadcast share one registration) uses its own. This is the one
// place that decides how a tensor's bytes meet registered memory on the sending side.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "core/status.h"
#include "protocol/protocol_counters.h"
#include "protocol/registered_pool.h"
#include "protocol/tensor_value.h"
#include "verbs/memory_region.h"
#include "verbs/memory_window.h"
#include "verbs/protection_domain.h"
#include "verbs/work.h"

namespace tensorverbs {

inline constexpr std::size_t kStageBelow = 64 << 10;

class TensorSource {
 public:
  // Binds a window for the peer over [addr, +length) of a region, remote read access.
  using BindWindow = std::function<Result<std::unique_ptr<verbs::MemoryWindow>>(
      const verbs::MemoryRegion&, std::uint64_t, std::size_t)>;

  // With `bind` (read mode: the peer reads the bytes), a window gives the peer access.
  static Result<std::unique_ptr<TensorSource>> prepare(const TensorValue& value,
                                                     RegisteredPool& pool,
                                                     verbs::ProtectionDomain& pd,
                                                     ProtocolCounters& counters,
                                                     const BindWindow& bind);
  ~TensorSource();

  std::uint64_t addr() const { return addr_; }
  std::uint64_t length() const { return length_; }
  std::uint32_t lkey() const { return lkey_; }
  // The window over the bytes (read mode), else null.
  const verbs::MemoryWindow* window() const { return window_.get(); }
  // Ends the peer's access; false if a read may still be under way (keep this alive, and
  // the tensor's memory, until quiesced()).
  bool revoke();
  bool quiesced();

 private:
  TensorSource() = default;
  std::uint64_t addr_ = 0, length_ = 0;
  std::uint32_t lkey_ = 0;
  std::unique_ptr<verbs::MemoryRegion> registration_;
  std::shared_ptr<const verbs::MemoryRegion> shared_;  // the value's own (a broadcast's)
  PoolBuffer staged_;
  std::unique_ptr<verbs::MemoryWindow> window_;
};

}  // namespace tensorverbs
