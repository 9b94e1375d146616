#include "protocol/tensor_landing.h"

namespace tensorverbs {

Result<std::shared_ptr<TensorLanding>> TensorLanding::prepare(const TensorMeta& meta,
                                                              const RecvDestination* destination,
                                                              bool prefers_pool,
                                                              RegisteredPool& pool,
                                                              verbs::ProtectionDomain& pd,
                                                              ProtocolCounters& counters) {
  std::shared_ptr<TensorLanding> landing(new TensorLanding());
  const auto size = static_cast<std::size_t>(meta.nbytes);
  const bool fits = destination && destination->fits(meta) && size > 0;
  const verbs::MemoryRegion* pooled = fits ? pool.region_of(destination->data, size) : nullptr;
  if (pooled) {  // registered already, and as reachable as the pool is
    landing->land_in(*destination, *pooled);
    return landing;
  }
  if (fits && size >= kRegisterFrom && !prefers_pool) {
    // local access: the peer writes through the window bound over it
    auto registered = pd.register_memory(destination->data, size, verbs::kLocalWrite);
    if (registered.ok()) {  // else (memory the device cannot register) through the pool
      landing->registration_ = registered.take();
      landing->land_in(*destination, *landing->registration_);
      counters.add(counters.landing_registrations);
      return landing;
    }
  }
  auto buffer = pool.allocate(size);
  if (!buffer.ok()) return buffer.status();
  landing->pooled_ = buffer.take();
  landing->region_ = &landing->pooled_->region();
  landing->data_ = landing->pooled_->data();
  landing->size_ = size;
  return landing;
}

void TensorLanding::land_in(const RecvDestination& destination, const verbs::MemoryRegion& region) {
  destination_ = destination.keepalive;
  region_ = &region;
  data_ = destination.data;
  size_ = static_cast<std::size_t>(destination.nbytes);
}

TensorLanding::~TensorLanding() = default;

}  // namespace tensorverbs
