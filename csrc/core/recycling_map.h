// RecyclingMap: an unordered_map that keeps the nodes of the entries it erases and gives
// them to the next insertions (C++17 node handles), so that a table whose size stays about
// steady (the requests a channel has in flight) allocates nothing per entry.
#pragma once

#include <cstddef>
#include <functional>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tensorverbs {

template <class Key, class Value, class Hash = std::hash<Key>>
class RecyclingMap {
 public:
  using Map = std::unordered_map<Key, Value, Hash>;

  // Keeps at most `spare` nodes of erased entries.
  explicit RecyclingMap(std::size_t spare = 256) : most_spare_(spare) {}

  std::size_t size() const { return map_.size(); }
  bool empty() const { return map_.empty(); }
  bool contains(const Key& key) const { return map_.count(key) != 0; }

  // The value of `key`; nullptr if there is none.
  Value* find(const Key& key) {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }

  // Adds (key, value) unless `key` is there already; whether it did.
  bool insert(const Key& key, Value value) {
    if (map_.count(key)) return false;
    if (spare_.empty()) {
      map_.emplace(key, std::move(value));
      return true;
    }
    typename Map::node_type node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = key;
    node.mapped() = std::move(value);
    map_.insert(std::move(node));
    return true;
  }

  // Removes `key`'s entry, its value destroyed (assigned a fresh Value) and its node kept;
  // whether there was one.
  bool erase(const Key& key) {
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    typename Map::node_type node = map_.extract(it);
    if (spare_.size() < most_spare_) {
      node.mapped() = Value();
      spare_.push_back(std::move(node));
    }
    return true;
  }

  // Every entry, moved out (the map is left empty; its spare nodes stay).
  Map take_all() {
    Map all;
    all.swap(map_);
    return all;
  }

 private:
  Map map_;
  std::vector<typename Map::node_type> spare_;
  std::size_t most_spare_;
};

}  // namespace tensorverbs
