#include "protocol/tensor_source.h"

#include <cstring>

namespace tensorverbs {

Result<std::unique_ptr<TensorSource>> TensorSource::prepare(const TensorValue& value,
                                                           RegisteredPool& pool,
                                                           verbs::ProtectionDomain& pd,
                                                           ProtocolCounters& counters,
                                                           const BindWindow& bind) {
  const bool remote_read = static_cast<bool>(bind);
  std::unique_ptr<TensorSource> source(new TensorSource());
  const std::size_t size = value.size();
  if (size == 0) return source;
  const verbs::MemoryRegion* region = pool.region_of(value.data, size);
  if (!region && value.region) {
    source->shared_ = value.region;
    region = source->shared_.get();
  }
  auto* data = const_cast<std::uint8_t*>(value.data);  // only ever read
  if (!region && size >= kStageBelow) {
    auto registered = pd.register_memory(data, size, 0);  // a window gives the peer its read
    if (registered.ok()) {
      source->registration_ = registered.take();
      region = source->registration_.get();
      counters.add(counters.source_registrations);
    }
  }
  if (!region) {  // small, or not registrable: a copy into the pool
    auto staged = pool.allocate(size);
    if (!staged.ok()) return staged.status();
    source->staged_ = staged.take();
    std::memcpy(source->staged_->data(), value.data, size);
    data = source->staged_->data();
    region = &source->staged_->region();
    counters.add(counters.staging_copies);
  }
  source->addr_ = reinterpret_cast<std::uint64_t>(data);
  source->length_ = size;
  source->lkey_ = region->lkey();
  if (remote_read) {
    auto window = bind(*region, source->addr_, size);
    if (!window.ok()) return window.status();
    source->window_ = window.take();
    counters.add(counters.windows);
  }
  return source;
}

TensorSource::~TensorSource() = default;

bool TensorSource::revoke() { return !window_ || window_->revoke(); }

bool TensorSource::quiesced() { return !window_ || window_->quiesced(); }

}  // namespace tensorverbs
