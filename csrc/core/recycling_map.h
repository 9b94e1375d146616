// RecyclingMap: an unordered_map that keeps the nodes of the entries it erases and gives
// them to the next insertions (C++17 node handles), so that a table whose size stays about
// steady (the requests a channel has in flight) allocates nothing per entry. A kept node's
// value is emptied by `Reset` (by default assigned a fresh Value; a container's clear()
// keeps its memory for the next) and its key is assigned the next key (a string's memory
// serves the next too).
#pragma once

#include <cstddef>
#include <functional>
#include <iterator>
#include <unordered_map>
#include <utility>
#include <vector>

namespace tensorverbs {

// Empties a value by assigning it a fresh one.
struct AssignFresh {
  template <class Value>
  void operator()(Value& value) const {
    value = Value();
  }
};

// Empties a container by clear(), which keeps its memory.
struct ClearKeeping {
  template <class Container>
  void operator()(Container& container) const {
    container.clear();
  }
};

template <class Key, class Value, class Hash = std::hash<Key>, class Reset = AssignFresh>
class RecyclingMap {
 public:
  using Map = std::unordered_map<Key, Value, Hash>;
  using mapped_type = Value;

  // Nodes of erased entries, kept for the next insertions (at most `most`). Maps of one
  // type may share one (under one lock), so that a map whose size comes and goes (a step's
  // table: many keys, then none) finds the nodes the one before it left.
  struct Spares {
    std::vector<typename Map::node_type> nodes;
    std::size_t most = 0;
  };

  // Keeps at most `spare` nodes of erased entries, or as many as it held entries at once, up
  // to `grow_to` (a map that once held a batch in flight keeps the nodes for the next, as a
  // vector keeps its capacity; the default bounds what a peer's burst of requests leaves
  // kept to a few hundred KiB a map).
  explicit RecyclingMap(std::size_t spare = 256, std::size_t grow_to = 4096)
      : own_{{}, spare}, grow_to_(grow_to) {}

  // From now on keeps and takes its spare nodes in `shared` (which outlives it; its own go
  // there, as far as there is room).
  void share(Spares* shared) {
    if (shared_ == shared) return;
    shared_ = shared;
    while (!own_.nodes.empty() && keep(std::move(own_.nodes.back()))) own_.nodes.pop_back();
    own_.nodes.clear();
  }

  std::size_t size() const { return map_.size(); }
  bool empty() const { return map_.empty(); }
  // The nodes kept for the next insertions (its own, or the shared ones).
  std::size_t spare() const { return (shared_ ? *shared_ : own_).nodes.size(); }
  bool contains(const Key& key) const { return map_.count(key) != 0; }

  // The value of `key`; nullptr if there is none.
  Value* find(const Key& key) {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }
  const Value* find(const Key& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }

  // Adds (key, value) unless `key` is there already; whether it did.
  bool insert(const Key& key, Value value) {
    if (contains(key)) return false;
    add(key)->second = std::move(value);
    return true;
  }

  // The value of `key`, added empty (on a kept node if there is one) when there is none.
  Value& operator[](const Key& key) {
    if (Value* there = find(key)) return *there;
    return add(key)->second;
  }

  // Removes `key`'s entry, its value emptied (Reset) and its node kept; whether there was one.
  bool erase(const Key& key) noexcept {
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    erase(it);
    return true;
  }

  // Removes the entry at `it`, as erase(key); the iterator after it.
  typename Map::iterator erase(typename Map::iterator it) noexcept {
    auto next = std::next(it);
    typename Map::node_type node = map_.extract(it);
    Reset()(node.mapped());
    keep(std::move(node));
    return next;
  }

  // Removes every entry, as erase() does.
  void clear() noexcept {
    while (!map_.empty()) erase(map_.begin());
  }

  typename Map::iterator begin() { return map_.begin(); }
  typename Map::iterator end() { return map_.end(); }
  typename Map::const_iterator begin() const { return map_.begin(); }
  typename Map::const_iterator end() const { return map_.end(); }

  // Every entry, moved out (the map is left empty; its spare nodes stay).
  Map take_all() {
    Map all;
    all.swap(map_);
    return all;
  }

 private:
  Spares& spares() { return shared_ ? *shared_ : own_; }

  // Keeps `node` (emptied) as a spare if there is room, else frees it; whether it kept it.
  bool keep(typename Map::node_type&& node) noexcept {
    Spares& spare = spares();
    if (spare.nodes.size() >= spare.most) return false;
    try {
      spare.nodes.push_back(std::move(node));
    } catch (...) {  // no memory to keep it: the node is freed instead
      return false;
    }
    return true;
  }

  // The entry of `key`, which has none, with an empty value: on a kept node if there is one.
  typename Map::iterator add(const Key& key) {
    Spares& spare = spares();
    if (spare.nodes.empty()) {
      if (!shared_ && map_.size() >= own_.most && own_.most < grow_to_) own_.most = map_.size() + 1;
      return map_.try_emplace(key).first;
    }
    typename Map::node_type node = std::move(spare.nodes.back());
    spare.nodes.pop_back();
    node.key() = key;
    return map_.insert(std::move(node)).position;
  }

  Map map_;
  Spares own_;
  std::size_t grow_to_;
  Spares* shared_ = nullptr;
};

}  // namespace tensorverbs
