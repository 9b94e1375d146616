// SoftProtectionDomain: the scope of registrations and windows. Its number is written in
// the key-table entries of its keys, so that only queue pairs of this domain use them.
#pragma once

#include <cstdint>
#include <memory>

#include "verbs/protection_domain.h"

namespace tensorverbs::verbs::soft {

class SoftContext;

class SoftProtectionDomain final : public ProtectionDomain,
                                   public std::enable_shared_from_this<SoftProtectionDomain> {
 public:
  SoftProtectionDomain(std::shared_ptr<SoftContext> context, std::uint32_t number)
      : context_(std::move(context)), number_(number) {}

  Result<std::unique_ptr<MemoryRegion>> register_memory(void* addr, std::size_t length,
                                                       std::uint32_t access) override;
  Result<std::unique_ptr<MemoryRegion>> allocate_memory(std::size_t length,
                                                       std::uint32_t access) override;
  Result<std::unique_ptr<MemoryWindow>> bind_window(const MemoryRegion& region,
                                                   std::uint64_t addr, std::size_t length,
                                                   std::uint32_t access) override;
  // A window that only the peer of queue pair `qp` (of this domain) reaches.
  Result<std::unique_ptr<MemoryWindow>> bind_window_for(std::uint32_t qp,
                                                       const MemoryRegion& region,
                                                       std::uint64_t addr, std::size_t length,
                                                       std::uint32_t access);

  std::uint32_t number() const { return number_; }
  SoftContext& context() const { return *context_; }
  const std::shared_ptr<SoftContext>& context_ptr() const { return context_; }

 private:
  std::shared_ptr<SoftContext> context_;
  std::uint32_t number_;
};

}  // namespace tensorverbs::verbs::soft
