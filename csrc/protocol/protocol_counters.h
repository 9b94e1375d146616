// ProtocolCounters: what Server.stats() reports for grpc+verbs, each counter owned by the
// component that does the counted thing. Relaxed atomics: they count, they order nothing.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "protocol/rdma_message.h"

namespace tensorverbs {

struct ProtocolCounters {
  std::atomic<std::uint64_t> tensor_requests{0}, meta_data_responses{0}, tensor_re_requests{0},
      error_statuses{0}, releases{0}, cancels{0}, inline_tensors{0}, request_batches{0},
      inline_batches{0}, rdma_writes{0}, rdma_reads{0}, bytes_written{0}, staging_copies{0},
      source_registrations{0},
      landing_registrations{0}, tensors_sent{0}, bytes_sent{0}, tensors_received{0}, bytes_received{0},
      windows{0}, channels_connected{0}, messages_sent{0}, acks_sent{0};

  // One message exchanged (sent or received), counted under its type's name (a TENSOR_REQUEST
  // that travels in a TENSOR_REQUESTS message too, as a request, and a TENSOR_INLINE in a
  // TENSOR_INLINES message as an inline tensor: see RdmaChannel).
  void message(MessageType type);
  void add(std::atomic<std::uint64_t>& counter, std::uint64_t amount = 1) {
    counter.fetch_add(amount, std::memory_order_relaxed);
  }
  void sub(std::atomic<std::uint64_t>& counter, std::uint64_t amount = 1) {
    counter.fetch_sub(amount, std::memory_order_relaxed);
  }
  std::vector<std::pair<std::string, std::uint64_t>> snapshot() const;
};

}  // namespace tensorverbs
