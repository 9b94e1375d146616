#include "protocol/protocol_counters.h"

namespace tensorverbs {

void ProtocolCounters::message(MessageType type) {
  switch (type) {
    case MessageType::kTensorRequest: add(tensor_requests); break;
    case MessageType::kMetaDataResponse: add(meta_data_responses); break;
    case MessageType::kTensorReRequest: add(tensor_re_requests); break;
    case MessageType::kErrorStatus: add(error_statuses); break;
    case MessageType::kRelease: add(releases); break;
    case MessageType::kCancel: add(cancels); break;
    case MessageType::kTensorInline: add(inline_tensors); break;
    case MessageType::kTensorRequests: add(request_batches); break;
    case MessageType::kTensorInlines: add(inline_batches); break;
  }
}

std::vector<std::pair<std::string, std::uint64_t>> ProtocolCounters::snapshot() const {
  const auto v = [](const std::atomic<std::uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  return {{"tensor_requests", v(tensor_requests)},
          {"meta_data_responses", v(meta_data_responses)},
          {"tensor_re_requests", v(tensor_re_requests)},
          {"error_statuses", v(error_statuses)},
          {"releases", v(releases)},
          {"cancels", v(cancels)},
          {"inline_tensors", v(inline_tensors)},
          {"request_batches", v(request_batches)},
          {"inline_batches", v(inline_batches)},
          {"rdma_writes", v(rdma_writes)},
          {"rdma_reads", v(rdma_reads)},
          {"bytes_written", v(bytes_written)},
          {"staging_copies", v(staging_copies)},
          {"source_registrations", v(source_registrations)},
          {"landing_registrations", v(landing_registrations)},
          {"tensors_sent", v(tensors_sent)},
          {"bytes_sent", v(bytes_sent)},
          {"tensors_received", v(tensors_received)},
          {"bytes_received", v(bytes_received)},
          {"windows", v(windows)},
          {"channels_connected", v(channels_connected)},
          {"messages_sent", v(messages_sent)},
          {"acks_sent", v(acks_sent)}};
}

}  // namespace tensorverbs
