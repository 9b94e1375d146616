#include "protocol/meta_data_cache.h"

namespace tensorverbs {

std::string MetaDataCache::key(std::int32_t peer, const std::string& name) {
  return std::to_string(peer) + "/" + name;
}

std::optional<TensorMeta> MetaDataCache::find(std::int32_t peer, const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = metas_.find(key(peer, name));
  if (it == metas_.end()) return std::nullopt;
  return it->second;
}

void MetaDataCache::update(std::int32_t peer, const std::string& name, const TensorMeta& meta) {
  std::lock_guard<std::mutex> lock(mu_);
  metas_[key(peer, name)] = meta;
}

}  // namespace tensorverbs
