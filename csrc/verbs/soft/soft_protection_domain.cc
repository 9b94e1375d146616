#include "verbs/soft/soft_protection_domain.h"

#include "verbs/soft/soft_context.h"
#include "verbs/soft/soft_memory_region.h"
#include "verbs/soft/soft_memory_window.h"
#include "verbs/work.h"

namespace tensorverbs::verbs::soft {
namespace {

constexpr std::uint32_t kAllAccess = kLocalWrite | kRemoteWrite | kRemoteRead;

Status check_access_bits(std::uint32_t access) {
  if ((access & ~kAllAccess) != 0) {
    return Status(Code::kInvalidArgument,
                  "unknown access bits " + std::to_string(access & ~kAllAccess));
  }
  if ((access & kRemoteWrite) != 0 && (access & kLocalWrite) == 0) {
    return Status(Code::kInvalidArgument,
                  "REMOTE_WRITE access needs LOCAL_WRITE too (as in libibverbs)");
  }
  return ok_status();
}

}  // namespace

Result<std::unique_ptr<MemoryRegion>> SoftProtectionDomain::register_memory(void* addr,
                                                                            std::size_t length,
                                                                            std::uint32_t access) {
  Status ok = check_access_bits(access);
  if (!ok.ok()) return ok;
  if (addr == nullptr && length != 0) {
    return Status(Code::kInvalidArgument, "cannot register " + std::to_string(length) +
                                              " bytes at address 0");
  }
  if (length > (std::size_t{1} << 46)) {
    return Status(Code::kInvalidArgument, "cannot register more than 2^46 bytes");
  }
  RegionInfo info;
  info.pd = number_;
  info.data = static_cast<std::uint8_t*>(addr);
  info.addr = reinterpret_cast<std::uintptr_t>(addr);
  info.length = length;
  info.access = access;
  auto key = context_->keys().add(std::move(info));
  if (!key.ok()) return key.status();
  return std::unique_ptr<MemoryRegion>(new SoftMemoryRegion(
      shared_from_this(), static_cast<std::uint8_t*>(addr), length, key.value(), access, nullptr, 0));
}

Result<std::unique_ptr<MemoryRegion>> SoftProtectionDomain::allocate_memory(std::size_t length,
                                                                            std::uint32_t access) {
  Status ok = check_access_bits(access);
  if (!ok.ok()) return ok;
  auto segment = SharedSegment::create(length, "tensorverbs-region", true);
  if (!segment.ok()) return segment.status();
  std::shared_ptr<SharedSegment> seg = segment.take();
  const std::uint32_t segment_id = context_->keys().add_segment(seg);
  RegionInfo info;
  info.pd = number_;
  info.data = seg->data();
  info.addr = reinterpret_cast<std::uintptr_t>(seg->data());
  info.length = length;
  info.access = access;
  info.segment_id = segment_id;
  info.segment_offset = 0;
  info.segment = seg;
  auto key = context_->keys().add(std::move(info));
  if (!key.ok()) return key.status();
  std::uint8_t* data = seg->data();
  return std::unique_ptr<MemoryRegion>(new SoftMemoryRegion(
      shared_from_this(), data, length, key.value(), access, std::move(seg), segment_id));
}

Result<std::unique_ptr<MemoryWindow>> SoftProtectionDomain::bind_window(
    const MemoryRegion& region, std::uint64_t addr, std::size_t length, std::uint32_t access) {
  return bind_window_for(0, region, addr, length, access);
}

Result<std::unique_ptr<MemoryWindow>> SoftProtectionDomain::bind_window_for(
    std::uint32_t qp, const MemoryRegion& region, std::uint64_t addr, std::size_t length,
    std::uint32_t access) {
  const auto* mr = dynamic_cast<const SoftMemoryRegion*>(&region);
  if (mr == nullptr || mr->pd() != this) {
    return Status(Code::kInvalidArgument,
                  "a window can only be bound to a region of its own protection domain");
  }
  if ((access & ~std::uint32_t{kRemoteWrite | kRemoteRead}) != 0) {
    return Status(Code::kInvalidArgument, "a window grants remote rights only");
  }
  if ((access & kRemoteWrite) != 0 && (mr->access() & kLocalWrite) == 0) {
    return Status(Code::kInvalidArgument,
                  "a window with REMOTE_WRITE needs a region with LOCAL_WRITE");
  }
  if (!(addr >= mr->addr() && length <= mr->length() && addr - mr->addr() <= mr->length() - length)) {
    return Status(Code::kInvalidArgument, "the window [" + std::to_string(addr) + ", +" +
                                              std::to_string(length) + ") is outside its region");
  }
  const std::uint64_t offset = addr - mr->addr();
  RegionInfo info;
  info.pd = number_;
  info.data = mr->data() + offset;
  info.addr = addr;
  info.length = length;
  info.access = access;
  info.segment_id = mr->segment_id();
  info.segment_offset = offset;
  info.segment = mr->segment();
  info.qp = qp;
  auto key = context_->keys().add(std::move(info));
  if (!key.ok()) return key.status();
  return std::unique_ptr<MemoryWindow>(
      new SoftMemoryWindow(context_, addr, length, key.value()));
}

}  // namespace tensorverbs::verbs::soft
