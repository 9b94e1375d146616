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
  if (destination && destination->fits(meta) && size >= kRegisterFrom && !prefers_pool) {
    auto registered = pd.register_memory(destination->data, size,
                                         verbs::kLocalWrite | verbs::kRemoteWrite);
    if (registered.ok()) {  // else (memory the device cannot register) through the pool
      landing->destination_ = destination->keepalive;
      landing->registration_ = registered.take();
      landing->region_ = landing->registration_.get();
      landing->data_ = destination->data;
      landing->size_ = size;
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

TensorLanding::~TensorLanding() = default;

}  // namespace tensorverbs
