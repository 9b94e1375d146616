#include "protocol/rdma_message_buffer.h"

#include <cstring>

#include "core/little_endian.h"
#include "protocol/utf8.h"
#include "protocol/work_id.h"

namespace tensorverbs {

namespace {

constexpr std::size_t kAckedAt = kHeaderBytes - 4;  // the header's last field

std::size_t region_bytes(std::uint32_t slots) { return std::size_t{slots} * kSlotBytes + 8; }

}  // namespace

std::size_t RdmaMessageBuffer::registered_bytes(std::uint32_t slots) { return 2 * region_bytes(slots); }

Result<std::unique_ptr<RdmaMessageBuffer>> RdmaMessageBuffer::create(verbs::ProtectionDomain& pd,
                                                                    std::uint32_t slots) {
  auto tx = pd.allocate_memory(region_bytes(slots), verbs::kLocalWrite);
  if (!tx.ok()) return tx.status();
  auto rx = pd.allocate_memory(region_bytes(slots), verbs::kLocalWrite | verbs::kRemoteWrite);
  if (!rx.ok()) return rx.status();
  return std::unique_ptr<RdmaMessageBuffer>(new RdmaMessageBuffer(tx.take(), rx.take(), slots));
}

void RdmaMessageBuffer::connect(std::uint64_t remote_addr, std::uint32_t remote_rkey) {
  remote_addr_ = remote_addr;
  remote_rkey_ = remote_rkey;
  connected_ = true;
}

Status RdmaMessageBuffer::send(RdmaMessage& message, std::vector<verbs::SendWr>* out,
                               std::uint64_t* sequence, bool* batched) {
  const bool now = connected_ && holds_ == 0 && queue_.empty() && sent_ - peer_taken_ < slots_;
  const bool waiting_inline = !now && message.type == MessageType::kTensorInline;
  if (waiting_inline) {  // (checked once, here: one that waits is encoded later)
    if (std::string why = encode_error(message); !why.empty()) return Status(Code::kInternal, why);
  }
  bool started = false;
  if (!now && gather(message, &started)) {
    *sequence = sent_ + queue_.size();
    if (batched) *batched = started;
    return Status();
  }
  if (batched) *batched = false;
  *sequence = sent_ + queue_.size() + 1;
  if (waiting_inline) {
    // its payload stays with the response that sent it until the peer has taken it: encoded
    // into its slot when one is free, not copied aside first
    queue_.push_back(Waiting{"", message, 0});
    return Status();
  }
  // another message that must wait is encoded aside and queued as the bytes it takes
  std::uint8_t* slot = now ? tx_->data() + (sent_ % slots_) * kSlotBytes : scratch_.data();
  const EncodeResult encoded = encode_into(message, slot);
  if (!encoded.error.empty()) return Status(Code::kInternal, encoded.error);
  if (now) {
    post(encoded.size, out);
  } else {
    queue_.push_back(Waiting{std::string(reinterpret_cast<const char*>(slot), encoded.size), {}, 0});
  }
  return Status();
}

bool RdmaMessageBuffer::gather(const RdmaMessage& message, bool* started) {
  if (message.type == MessageType::kTensorInline) return gather_inline(message, started);
  const bool bare = message.type == MessageType::kTensorRequest && message.remote_addr == 0 &&
                    message.rkey == 0 && (!message.meta || message.meta->nbytes <= kMaxTailBytes);
  // (meta-data that says the tensor comes inline changes nothing in the peer's answer)
  if (!bare || message.name.empty() || message.name.size() > kNameBytes ||
      message.request_index > kMaxRequestIndex || !utf8::is_valid(message.name)) {
    return false;
  }
  const std::size_t bytes = request_entry_bytes(message.name);
  if (queue_.empty() || !queue_.back().message ||
      queue_.back().message->type != MessageType::kTensorRequests ||
      queue_.back().tail + bytes > kMaxTailBytes) {
    RdmaMessage requests{MessageType::kTensorRequests, 0, "", 0, 0, 0, std::nullopt, 0, ""};
    queue_.push_back(Waiting{"", std::move(requests), 0});
    *started = true;
  }
  Waiting& last = queue_.back();
  last.message->requests.push_back(RequestEntry{static_cast<std::uint32_t>(message.request_index),
                                                 message.step_id, message.name});
  last.tail += bytes;
  return true;
}

namespace {

// Whether TENSOR_INLINE `message` (one that encodes: send() checked it) can be an entry of a
// TENSOR_INLINES message.
bool joinable(const RdmaMessage& message) {
  return message.meta && message.meta->dtype != 0 && message.request_index <= kMaxRequestIndex;
}

}  // namespace

bool RdmaMessageBuffer::gather_inline(const RdmaMessage& message, bool* started) {
  if (queue_.empty() || !queue_.back().message || !joinable(message)) return false;
  Waiting& last = queue_.back();
  const MessageType type = last.message->type;
  const std::size_t bytes = inline_entry_bytes(*message.meta);
  if (type == MessageType::kTensorInline) {
    const RdmaMessage& first = *last.message;
    if (!joinable(first)) return false;
    const std::size_t first_bytes = inline_entry_bytes(*first.meta);
    if (first_bytes + bytes > kMaxTailBytes) return false;
    RdmaMessage inlines{MessageType::kTensorInlines, 0, "", 0, 0, 0, std::nullopt, 0, ""};
    inlines.inlines.push_back(
        InlineEntry{static_cast<std::uint32_t>(first.request_index), *first.meta, first.payload});
    last.message = std::move(inlines);
    last.tail = first_bytes;
    *started = true;
  } else if (type != MessageType::kTensorInlines || last.tail + bytes > kMaxTailBytes) {
    return false;
  }
  last.message->inlines.push_back(InlineEntry{static_cast<std::uint32_t>(message.request_index),
                                              *message.meta, message.payload});
  last.tail += bytes;
  return true;
}

void RdmaMessageBuffer::post(std::size_t length, std::vector<verbs::SendWr>* out) {
  const std::size_t index = sent_ % slots_;
  std::uint8_t* slot = tx_->data() + index * kSlotBytes;
  little_endian::store(slot + kAckedAt, static_cast<std::uint32_t>(taken_));
  told_ = taken_;
  ++sent_;
  if (written_ != nullptr) written_->fetch_add(1, std::memory_order_relaxed);
  verbs::SendWr wr;
  wr.wr_id = work_id(WorkKind::kMessage, static_cast<std::uint32_t>(index));
  wr.opcode = verbs::WrOpcode::kRdmaWriteWithImm;
  wr.sge = tx_->sge(index * kSlotBytes, static_cast<std::uint32_t>(length));
  wr.remote_addr = remote_addr_ + index * kSlotBytes;
  wr.rkey = remote_rkey_;
  wr.imm = kImmMessage;
  wr.signaled = false;
  out->push_back(wr);
}

void RdmaMessageBuffer::drain(std::vector<verbs::SendWr>* out) {
  while (connected_ && holds_ == 0 && !queue_.empty() && sent_ - peer_taken_ < slots_) {
    Waiting& next = queue_.front();
    std::uint8_t* slot = tx_->data() + (sent_ % slots_) * kSlotBytes;
    std::size_t size = next.bytes.size();
    if (next.message) {  // checked as it was queued (each request as it joined): it encodes
      size = encode_into(*next.message, slot).size;
    } else {
      std::memcpy(slot, next.bytes.data(), size);
    }
    post(size, out);
    queue_.pop_front();
  }
}

std::uint64_t RdmaMessageBuffer::credit(std::uint32_t count, std::vector<verbs::SendWr>* out) {
  // the full count: at most sent_, and within 2^32 of it
  const std::uint64_t taken = sent_ - static_cast<std::uint32_t>(static_cast<std::uint32_t>(sent_) - count);
  if (taken > peer_taken_ && taken <= sent_) peer_taken_ = taken;
  drain(out);
  return peer_taken_;
}

std::string RdmaMessageBuffer::describe() const {
  return "messages sent " + std::to_string(sent_) + ", taken by the peer " +
         std::to_string(peer_taken_) + ", waiting for a credit " + std::to_string(queue_.size()) +
         ", received " + std::to_string(received_) + ", taken " + std::to_string(taken_) +
         ", told " + std::to_string(told_) + (holds_ > 0 ? ", held" : "");
}

std::uint32_t RdmaMessageBuffer::ack_word() const {
  const std::uint8_t* word = rx_->data() + std::size_t{slots_} * kSlotBytes;
  return little_endian::load<std::uint32_t>(word);
}

const std::uint8_t* RdmaMessageBuffer::next_message(std::uint32_t byte_len, std::size_t* size) {
  const std::size_t index = received_ % slots_;
  ++received_;
  *size = byte_len <= kSlotBytes ? byte_len : kSlotBytes;
  return rx_->data() + index * kSlotBytes;
}

void RdmaMessageBuffer::ack_if_needed(std::vector<verbs::SendWr>* out) {
  if (owes_ack()) ack(out, false);
}

void RdmaMessageBuffer::ack(std::vector<verbs::SendWr>* out, bool signaled) {
  if (!connected_) return;
  if (acks_ != nullptr) acks_->fetch_add(1, std::memory_order_relaxed);
  std::uint8_t* word = tx_->data() + std::size_t{slots_} * kSlotBytes;
  little_endian::store(word, static_cast<std::uint32_t>(taken_));
  told_ = taken_;
  verbs::SendWr wr;
  wr.wr_id = work_id(WorkKind::kAck, 0);
  wr.opcode = verbs::WrOpcode::kRdmaWriteWithImm;
  wr.sge = tx_->sge(std::size_t{slots_} * kSlotBytes, 4);
  wr.remote_addr = remote_addr_ + std::size_t{slots_} * kSlotBytes;
  wr.rkey = remote_rkey_;
  wr.imm = kImmAck;
  wr.signaled = signaled;
  out->push_back(wr);
}

}  // namespace tensorverbs
