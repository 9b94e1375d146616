// KeyTable: the keys of one context, for its own checks and, in a shared segment, for the
// peers on this host, which map it and check a one-sided access themselves before copying.
//
// Keys are KeySequence's: unpredictable, never 0, none repeating within 2^32 keys. A key
// lives in the entry of the first free slot at most kProbe slots after its home slot (the
// key modulo the slot count); whoever looks a key up, here or in a peer, scans those
// slots for it, so no part of a key names its slot.
//
// Segment layout: a 4 KiB header (magic, version, the context's `waiting` flag, the slot
// count) and then one 64-byte entry per slot: rkey | access | segment id (0: not shared
// memory) | PD number | offset of the range in its segment | address | length | in-flight
// count | queue pair (0: any queue pair of the PD; else the window is bound to that
// queue pair of the owner, and only its peer gets through). Publishing writes the rkey
// last; removal clears it first.
//
// The in-flight guard: a peer increments the entry's count, then re-reads the rkey and
// the range (seq_cst), copies, and decrements. The owner clears the rkey, then reads the
// count (seq_cst): when it reads 0, any later access sees the cleared rkey, so none can
// still touch the range. A slot is reused only once its count is 0. A peer that dies
// mid-copy leaves the count up: the slot (and a window's quiesced()) then stays busy for
// the life of the context, keeping its range out of use, which is the safe side.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "verbs/soft/key_sequence.h"
#include "verbs/soft/shared_segment.h"

namespace tensorverbs::verbs::soft {

inline constexpr std::uint32_t kMaxKeySlots = 1u << 16;
inline constexpr std::uint32_t kProbe = 32;  // how far past its home slot a key may live
inline constexpr std::size_t kTableHeaderBytes = 4096;
inline constexpr std::size_t kEntryBytes = 64;
inline constexpr std::uint64_t kTableMagic = 0x3242'544B'5654ULL;  // "TVKTB2"

struct TableHeader {
  std::atomic<std::uint64_t> magic;
  std::atomic<std::uint32_t> version;
  std::atomic<std::uint32_t> waiting;  // 1 while the owner sleeps: peers ring its doorbell
  std::atomic<std::uint32_t> slots;
};

struct KeyEntry {
  std::atomic<std::uint32_t> rkey;
  std::atomic<std::uint32_t> access;
  std::atomic<std::uint32_t> segment_id;
  std::atomic<std::uint32_t> pd;
  std::atomic<std::uint64_t> segment_offset;
  std::atomic<std::uint64_t> addr;
  std::atomic<std::uint64_t> length;
  std::atomic<std::uint64_t> in_flight;
  std::atomic<std::uint32_t> qp;
  std::uint32_t unused[3];
};
static_assert(sizeof(KeyEntry) == kEntryBytes);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free);

// What this process knows of one of its keys.
struct RegionInfo {
  std::uint32_t pd = 0;  // the protection domain's number
  std::uint8_t* data = nullptr;  // the first byte, in this process
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  std::uint32_t access = 0;
  std::uint32_t segment_id = 0;  // 0: not shared memory
  std::uint64_t segment_offset = 0;
  std::shared_ptr<SharedSegment> segment;  // keeps allocated memory mapped while the key lives
  std::uint32_t qp = 0;  // a window bound to this queue pair of the owner (0: none)
  std::uint32_t key = 0;
};

// Why an access to [addr, +length) of `key` is refused, or "" when `region` allows it.
std::string check_access(const RegionInfo& region, std::uint32_t key, std::uint64_t addr,
                         std::uint64_t length, std::uint32_t need);

// The owner's queue pair that a one-sided access comes through: its protection domain and
// its number. A key serves queue pairs of its region's domain; a window bound to a queue
// pair, that one only.
struct Through {
  std::uint32_t pd = 0;
  std::uint32_t qp = 0;
};

// Why a peer's access to [addr, +length) of `key` through `via` is refused, or "" when
// `region` (null: the key is not registered) allows it.
std::string check_remote(const RegionInfo* region, std::uint32_t key, const Through& via,
                         std::uint64_t addr, std::uint64_t length, std::uint32_t need);

class KeyTable {
 public:
  static Result<std::unique_ptr<KeyTable>> create(std::uint32_t slots = kMaxKeySlots);

  const SharedSegment& segment() const { return *segment_; }
  TableHeader& header() const;

  // A number for a segment that peers may map (never 0).
  std::uint32_t add_segment(const std::shared_ptr<SharedSegment>& segment);
  std::shared_ptr<SharedSegment> find_segment(std::uint32_t id);

  // Publishes a region; its key.
  Result<std::uint32_t> add(RegionInfo info);
  // Withdraws `key`: true when no access through it can still be under way.
  bool remove(std::uint32_t key);
  // After remove(): true once no access through `key` can be under way.
  bool quiesced(std::uint32_t key);
  // The in-flight count of `key`'s slot (for tests and diagnostics).
  std::uint64_t in_flight(std::uint32_t key) const;

  // Calls fn(const RegionInfo*) with the region of `key` (nullptr when there is none),
  // holding the table's lock, so that the region stays registered meanwhile.
  template <typename F>
  auto with_region(std::uint32_t key, F&& fn) const {
    std::shared_lock lock(mu_);
    const std::uint32_t slot = find_locked(key);
    return fn(slot == kNone ? nullptr : &regions_[slot]);
  }

  ~KeyTable();
  KeyTable(const KeyTable&) = delete;
  KeyTable& operator=(const KeyTable&) = delete;

 private:
  static constexpr std::uint32_t kNone = ~0u;

  KeyTable(std::shared_ptr<SharedSegment> segment, std::uint32_t slots, KeySequence keys);
  KeyEntry& entry(std::uint32_t slot) const;
  std::uint32_t find_locked(std::uint32_t key) const;  // the slot of live `key`, or kNone
  std::uint32_t place_locked(std::uint32_t key) const;  // a free slot for `key`, or kNone
  void reclaim_locked();

  std::shared_ptr<SharedSegment> segment_;
  mutable std::shared_mutex mu_;
  std::vector<RegionInfo> regions_;  // by slot
  std::vector<std::uint32_t> held_;  // by slot: the key (live or draining) holding it, or 0
  std::uint32_t used_ = 0;           // slots held
  std::unordered_map<std::uint32_t, std::uint32_t> draining_;  // removed key -> its slot
  std::unordered_map<std::uint32_t, std::weak_ptr<SharedSegment>> segments_;
  std::uint32_t next_segment_id_ = 1;
  KeySequence keys_;
};

// A peer's key table, mapped here (writable: the in-flight counts are shared).
class KeyTableView {
 public:
  static Result<std::shared_ptr<KeyTableView>> map(UniqueFd fd);

  const std::atomic<std::uint32_t>& waiting() const;
  std::uint64_t device() const { return device_; }
  std::uint64_t inode() const { return inode_; }

  struct Pinned {
    KeyEntry* entry = nullptr;
    std::uint32_t segment_id = 0;
    std::uint64_t segment_offset = 0;  // of the first byte accessed
  };
  // Counts an access to [addr, +length) of `rkey` with `need`, through the owner's queue
  // pair `via`, in flight and checks it. Refused: why (nothing stays counted).
  Status pin(std::uint32_t rkey, const Through& via, std::uint64_t addr, std::uint64_t length,
             std::uint32_t need, Pinned* out) const;
  static void unpin(const Pinned& pinned);

 private:
  KeyTableView(std::shared_ptr<SharedSegment> segment, std::uint32_t slots, std::uint64_t device,
               std::uint64_t inode);
  KeyEntry& entry(std::uint32_t slot) const;

  std::shared_ptr<SharedSegment> segment_;
  std::uint32_t slots_;
  std::uint64_t device_;
  std::uint64_t inode_;
};

}  // namespace tensorverbs::verbs::soft
