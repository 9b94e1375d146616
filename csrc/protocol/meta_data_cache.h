// MetaDataCache: the meta-data (dtype, shape, size) of the tensors each peer sent this task,
// by peer and name (TensorFlow's RdmaMemoryMgr keeps it as its tensor meta-data cache). A
// request that finds its tensor's meta-data here allocates the landing before it asks, so
// the tensor is written at once. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "protocol/tensor_meta.h"

namespace tensorverbs {

class MetaDataCache {
 public:
  // What `peer` last sent as `name`, if anything.
  std::optional<TensorMeta> find(std::int32_t peer, const std::string& name) const;
  void update(std::int32_t peer, const std::string& name, const TensorMeta& meta);

 private:
  static std::string key(std::int32_t peer, const std::string& name);

  mutable std::mutex mu_;
  std::unordered_map<std::string, TensorMeta> metas_;  // key: peer id, '/', name
};

}  // namespace tensorverbs
