// The entries of the control messages that carry several (rdma_message.h's layout): the
// requests of a TENSOR_REQUESTS message and the tensors of a TENSOR_INLINES message, their
// bytes, what keeps them from travelling, and their parsing from untrusted bytes; and the
// texts the codec's errors name numbers and shapes with.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "protocol/rdma_message.h"
#include "protocol/tensor_shape.h"

namespace tensorverbs {

// `value` in hex: "0x1f".
std::string hex(std::uint64_t value);
// Dims as Python prints a list of ints: "[1, -2]".
std::string format_list(const TensorShape& dims);

// The tail of a TENSOR_REQUESTS message, or (in `error`) why its requests cannot travel.
std::string requests_tail(const std::vector<RequestEntry>& requests, std::string* error);
// The requests of a TENSOR_REQUESTS tail, or why (in `why`) the bytes are not some.
std::optional<std::vector<RequestEntry>> parse_requests(const std::uint8_t* tail, std::size_t size,
                                                        std::string* why);

// Why the tensors of a TENSOR_INLINES message cannot travel; empty if they can.
std::string inlines_error(const std::vector<InlineEntry>& inlines);
// Writes the tensors of a TENSOR_INLINES message (checked: inlines_error()) at `out`; the
// bytes written.
std::size_t write_inlines(const std::vector<InlineEntry>& inlines, std::uint8_t* out);
// The tensors of a TENSOR_INLINES tail (pointing into it), or why (in `why`) the bytes are
// not some.
std::optional<std::vector<InlineEntry>> parse_inlines(const std::uint8_t* tail, std::size_t size,
                                                      std::string* why);

}  // namespace tensorverbs
