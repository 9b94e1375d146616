// TensorValue: a tensor as the protocol holds it (what a send offers, what a recv gets):
// meta-data, bytes, whatever keeps the bytes alive, and (a send's) its completion ticket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "protocol/send_completion.h"
#include "protocol/tensor_meta.h"
#include "verbs/memory_region.h"

namespace tensorverbs {

struct TensorValue {
  TensorMeta meta;                        // nbytes: raw bytes, or the TensorProto's size
  const std::uint8_t* data = nullptr;     // meta.nbytes bytes
  std::shared_ptr<const void> keepalive;  // holds the memory (a pool allocation, a caller's array)
  bool borrowed = false;  // the bytes are the receiving caller's own destination (recv into out)
  std::shared_ptr<SendTicket> ticket = nullptr;  // a send's: told when the receiver has it (may be empty)
  // the bytes' registration, shared by the sends of one broadcast (registered once for all)
  std::shared_ptr<const verbs::MemoryRegion> region = nullptr;

  std::size_t size() const { return static_cast<std::size_t>(meta.nbytes); }
};

}  // namespace tensorverbs
