// ReceiveQueue: the receives posted to a soft queue pair, taken oldest first by SENDs and
// immediates; each ends as a completion in the queue pair's receive completion queue
// (taken, refused, or flushed when the queue pair fails). Not locked: its queue pair's
// mutex guards it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>

#include "verbs/work.h"

namespace tensorverbs::verbs::soft {

class SoftCompletionQueue;

class ReceiveQueue {
 public:
  struct Posted {
    std::uint64_t wr_id = 0;
    std::uint8_t* data = nullptr;
    std::uint32_t length = 0;
    std::string error;  // why its buffer is unusable ("" when fine)
  };

  ReceiveQueue(std::uint32_t qp_num, std::shared_ptr<SoftCompletionQueue> cq)
      : qp_num_(qp_num), cq_(std::move(cq)) {}

  bool empty() const { return posted_.empty(); }
  std::size_t size() const { return posted_.size(); }
  const Posted& front() const { return posted_.front(); }
  void push(Posted recv) { posted_.push_back(std::move(recv)); }
  // Completes the oldest receive: `opcode` with `byte_len` bytes (and `imm`) on success, or
  // `status` for a message it could not take.
  void complete_front(WcOpcode opcode, WcStatus status, std::uint32_t byte_len,
                      std::optional<std::uint32_t> imm = std::nullopt);
  // A receive posted to a queue pair in the error state: flushed at once.
  void flush(std::uint64_t wr_id) const;
  // Flushes every receive posted.
  void flush_all();

 private:
  WorkCompletion completion(std::uint64_t wr_id, WcOpcode opcode, WcStatus status) const;

  const std::uint32_t qp_num_;
  const std::shared_ptr<SoftCompletionQueue> cq_;
  std::deque<Posted> posted_;
};

}  // namespace tensorverbs::verbs::soft
