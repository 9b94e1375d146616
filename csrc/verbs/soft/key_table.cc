#include "verbs/soft/key_table.h"

#include <sys/stat.h>

#include <cinttypes>
#include <cstdio>

#include "verbs/work.h"

namespace tensorverbs::verbs::soft {
namespace {

std::string hex(std::uint64_t value) {
  char buf[24];
  std::snprintf(buf, sizeof(buf), "0x%" PRIx64, value);
  return buf;
}

std::string range_text(std::uint64_t addr, std::uint64_t length) {
  return "[" + hex(addr) + ", +" + std::to_string(length) + ")";
}

std::string access_text(std::uint32_t need) {
  if (need == kRemoteWrite) return "REMOTE_WRITE";
  if (need == kRemoteRead) return "REMOTE_READ";
  if (need == kLocalWrite) return "LOCAL_WRITE";
  return "access " + std::to_string(need);
}

bool inside(std::uint64_t base, std::uint64_t size, std::uint64_t addr, std::uint64_t length) {
  return addr >= base && length <= size && addr - base <= size - length;
}

template <typename T>
T* at(std::uint8_t* bytes) {
  return static_cast<T*>(static_cast<void*>(bytes));
}

}  // namespace

std::string check_access(const RegionInfo& region, std::uint32_t key, std::uint64_t addr,
                         std::uint64_t length, std::uint32_t need) {
  if (!inside(region.addr, region.length, addr, length)) {
    return range_text(addr, length) + " is outside the region of key " + hex(key) + " (" +
           range_text(region.addr, region.length) + ")";
  }
  if ((region.access & need) != need) {
    return "the region of key " + hex(key) + " does not allow " + access_text(need);
  }
  return "";
}

std::string check_remote(const RegionInfo* region, std::uint32_t key, const Through& via,
                         std::uint64_t addr, std::uint64_t length, std::uint32_t need) {
  if (region == nullptr || region->pd != via.pd) {
    return "rkey " + hex(key) + " is not registered at the peer";
  }
  if (region->qp != 0 && region->qp != via.qp) {
    return "rkey " + hex(key) + " is a window of another queue pair of the peer";
  }
  return check_access(*region, key, addr, length, need);
}

// ------------------------------------------------------------------------------ owner
Result<std::unique_ptr<KeyTable>> KeyTable::create(std::uint32_t slots) {
  if (slots < kProbe || slots > kMaxKeySlots) {
    return Status(Code::kInvalidArgument, "a key table has " + std::to_string(kProbe) + " to " +
                                              std::to_string(kMaxKeySlots) + " slots");
  }
  auto keys = KeySequence::create();
  if (!keys.ok()) return keys.status();
  auto segment = SharedSegment::create(kTableHeaderBytes + std::size_t{slots} * kEntryBytes,
                                       "tensorverbs-keys", false);
  if (!segment.ok()) return segment.status();
  return std::unique_ptr<KeyTable>(new KeyTable(segment.take(), slots, keys.take()));
}

KeyTable::KeyTable(std::shared_ptr<SharedSegment> segment, std::uint32_t slots, KeySequence keys)
    : segment_(std::move(segment)), regions_(slots), held_(slots, 0), keys_(keys) {
  TableHeader& head = header();
  head.version.store(2, std::memory_order_relaxed);
  head.waiting.store(0, std::memory_order_relaxed);
  head.slots.store(slots, std::memory_order_relaxed);
  head.magic.store(kTableMagic, std::memory_order_release);
}

KeyTable::~KeyTable() = default;

TableHeader& KeyTable::header() const { return *at<TableHeader>(segment_->data()); }

KeyEntry& KeyTable::entry(std::uint32_t slot) const {
  return *at<KeyEntry>(segment_->data() + kTableHeaderBytes + std::size_t{slot} * kEntryBytes);
}

std::uint32_t KeyTable::add_segment(const std::shared_ptr<SharedSegment>& segment) {
  std::unique_lock lock(mu_);
  if (segments_.size() >= 1024 && segments_.size() % 1024 == 0) {
    for (auto it = segments_.begin(); it != segments_.end();) {
      it = it->second.expired() ? segments_.erase(it) : std::next(it);
    }
  }
  std::uint32_t id = next_segment_id_++;
  if (id == 0) id = next_segment_id_++;
  segments_[id] = segment;
  return id;
}

std::shared_ptr<SharedSegment> KeyTable::find_segment(std::uint32_t id) {
  std::unique_lock lock(mu_);
  const auto it = segments_.find(id);
  if (it == segments_.end()) return nullptr;
  auto segment = it->second.lock();
  if (!segment) segments_.erase(it);
  return segment;
}

std::uint32_t KeyTable::find_locked(std::uint32_t key) const {
  if (key == 0) return kNone;
  const auto slots = static_cast<std::uint32_t>(regions_.size());
  for (std::uint32_t i = 0, slot = key % slots; i < kProbe; ++i, slot = (slot + 1) % slots) {
    if (regions_[slot].key == key) return slot;
  }
  return kNone;
}

std::uint32_t KeyTable::place_locked(std::uint32_t key) const {
  const auto slots = static_cast<std::uint32_t>(held_.size());
  for (std::uint32_t i = 0, slot = key % slots; i < kProbe; ++i, slot = (slot + 1) % slots) {
    if (held_[slot] == 0) return slot;
  }
  return kNone;
}

void KeyTable::reclaim_locked() {
  for (auto it = draining_.begin(); it != draining_.end();) {
    if (entry(it->second).in_flight.load(std::memory_order_seq_cst) == 0) {
      held_[it->second] = 0;
      --used_;
      it = draining_.erase(it);
    } else {
      ++it;
    }
  }
}

Result<std::uint32_t> KeyTable::add(RegionInfo info) {
  std::unique_lock lock(mu_);
  const auto slots = static_cast<std::uint32_t>(held_.size());
  if (used_ + slots / 8 >= slots) reclaim_locked();
  // keys come in turn; one whose home has no free slot within kProbe is skipped (never
  // issued), which only a nearly full table makes likely
  std::uint32_t key = 0, slot = kNone;
  for (int tries = 0; tries < 4096 && slot == kNone && used_ < slots; ++tries) {
    key = keys_.next();
    if (key == 0 || find_locked(key) != kNone || draining_.count(key)) continue;  // after 2^32
    slot = place_locked(key);
  }
  if (slot == kNone) {
    return Status(Code::kResourceExhausted, "every key of the soft provider's key table (" +
                                                std::to_string(slots) + ") is in use");
  }
  held_[slot] = key;
  ++used_;
  info.key = key;
  KeyEntry& e = entry(slot);
  e.access.store(info.access, std::memory_order_relaxed);
  e.segment_id.store(info.segment_id, std::memory_order_relaxed);
  e.pd.store(info.pd, std::memory_order_relaxed);
  e.qp.store(info.qp, std::memory_order_relaxed);
  e.segment_offset.store(info.segment_offset, std::memory_order_relaxed);
  e.addr.store(info.addr, std::memory_order_relaxed);
  e.length.store(info.length, std::memory_order_relaxed);
  e.rkey.store(key, std::memory_order_seq_cst);  // last: the entry is whole when it shows
  regions_[slot] = std::move(info);
  return key;
}

bool KeyTable::remove(std::uint32_t key) {
  std::shared_ptr<SharedSegment> segment;  // unmapped after the lock is released
  std::unique_lock lock(mu_);
  const std::uint32_t slot = find_locked(key);
  if (slot == kNone) return true;
  segment = std::move(regions_[slot].segment);
  regions_[slot] = RegionInfo{};
  KeyEntry& e = entry(slot);
  e.rkey.store(0, std::memory_order_seq_cst);  // first: no access starts after this
  if (e.in_flight.load(std::memory_order_seq_cst) == 0) {
    held_[slot] = 0;
    --used_;
    return true;
  }
  draining_[key] = slot;
  return false;
}

bool KeyTable::quiesced(std::uint32_t key) {
  std::unique_lock lock(mu_);
  const auto it = draining_.find(key);
  if (it == draining_.end()) return true;  // reclaimed, or never drained
  if (entry(it->second).in_flight.load(std::memory_order_seq_cst) != 0) return false;
  held_[it->second] = 0;
  --used_;
  draining_.erase(it);
  return true;
}

std::uint64_t KeyTable::in_flight(std::uint32_t key) const {
  std::shared_lock lock(mu_);
  std::uint32_t slot = find_locked(key);
  if (slot == kNone) {
    const auto it = draining_.find(key);
    if (it == draining_.end()) return 0;
    slot = it->second;
  }
  return entry(slot).in_flight.load(std::memory_order_seq_cst);
}

// ------------------------------------------------------------------------------- view
Result<std::shared_ptr<KeyTableView>> KeyTableView::map(UniqueFd fd) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return Status(Code::kInvalidArgument, "the peer's key table is not a file");
  }
  auto segment = SharedSegment::map_peer(std::move(fd), kTableHeaderBytes + kEntryBytes, true,
                                         false);
  if (!segment.ok()) return segment.status();
  const TableHeader& head = *at<TableHeader>(segment.value()->data());
  if (head.magic.load(std::memory_order_acquire) != kTableMagic ||
      head.version.load(std::memory_order_relaxed) != 2) {
    return Status(Code::kInvalidArgument, "the peer's key table has no valid header");
  }
  // slots the mapping holds, of those the header says (bounded: the peer wrote it)
  const std::size_t room = (segment.value()->length() - kTableHeaderBytes) / kEntryBytes;
  const std::uint32_t said = head.slots.load(std::memory_order_relaxed);
  if (said == 0 || said > room || said > kMaxKeySlots) {
    return Status(Code::kInvalidArgument, "the peer's key table says it has " +
                                              std::to_string(said) + " slots, its segment " +
                                              std::to_string(room));
  }
  return std::shared_ptr<KeyTableView>(
      new KeyTableView(segment.take(), said, static_cast<std::uint64_t>(st.st_dev),
                       static_cast<std::uint64_t>(st.st_ino)));
}

KeyTableView::KeyTableView(std::shared_ptr<SharedSegment> segment, std::uint32_t slots,
                           std::uint64_t device, std::uint64_t inode)
    : segment_(std::move(segment)), slots_(slots), device_(device), inode_(inode) {}

const std::atomic<std::uint32_t>& KeyTableView::waiting() const {
  return at<TableHeader>(segment_->data())->waiting;
}

KeyEntry& KeyTableView::entry(std::uint32_t slot) const {
  return *at<KeyEntry>(segment_->data() + kTableHeaderBytes + std::size_t{slot} * kEntryBytes);
}

Status KeyTableView::pin(std::uint32_t rkey, const Through& via, std::uint64_t addr,
                         std::uint64_t length, std::uint32_t need, Pinned* out) const {
  KeyEntry* found = nullptr;
  for (std::uint32_t i = 0, slot = rkey % slots_; rkey != 0 && i < kProbe;
       ++i, slot = (slot + 1) % slots_) {
    if (entry(slot).rkey.load(std::memory_order_acquire) == rkey) {
      found = &entry(slot);
      break;
    }
  }
  if (found == nullptr) {
    return Status(Code::kPermissionDenied, check_remote(nullptr, rkey, via, addr, length, need));
  }
  KeyEntry& e = *found;
  e.in_flight.fetch_add(1, std::memory_order_seq_cst);
  RegionInfo region;
  const RegionInfo* seen = nullptr;
  if (e.rkey.load(std::memory_order_seq_cst) == rkey) {  // not withdrawn meanwhile
    region.pd = e.pd.load(std::memory_order_relaxed);
    region.qp = e.qp.load(std::memory_order_relaxed);
    region.access = e.access.load(std::memory_order_relaxed);
    region.segment_id = e.segment_id.load(std::memory_order_relaxed);
    region.segment_offset = e.segment_offset.load(std::memory_order_relaxed);
    region.addr = e.addr.load(std::memory_order_relaxed);
    region.length = e.length.load(std::memory_order_relaxed);
    seen = &region;
  }
  std::string why = check_remote(seen, rkey, via, addr, length, need);
  if (!why.empty()) {
    e.in_flight.fetch_sub(1, std::memory_order_release);
    return Status(Code::kPermissionDenied, why);
  }
  out->entry = &e;
  out->segment_id = region.segment_id;
  out->segment_offset = region.segment_offset + (addr - region.addr);  // checked by the caller
  return ok_status();
}

void KeyTableView::unpin(const Pinned& pinned) {
  pinned.entry->in_flight.fetch_sub(1, std::memory_order_seq_cst);
}

}  // namespace tensorverbs::verbs::soft
