#include "protocol/tensor_meta.h"

#include <array>
#include <limits>

namespace tensorverbs {

namespace {

// tensor.py's table (numpy's dtype for each DataType number); strings are numpy objects, and
// DT_VARIANT is opaque bytes (a shared tensor's descriptor: tensorverbs.ipc).
constexpr std::array<DataType, 22> kDataTypes{{
    {1, "float32", 4},
    {2, "float64", 8},
    {3, "int32", 4},
    {4, "uint8", 1},
    {5, "int16", 2},
    {6, "int8", 1},
    {7, "object", 8},
    {8, "complex64", 8},
    {9, "int64", 8},
    {10, "bool", 1},
    {14, "bfloat16", 2},
    {17, "uint16", 2},
    {18, "complex128", 16},
    {19, "float16", 2},
    {21, "variant", 1},
    {22, "uint32", 4},
    {23, "uint64", 8},
    {24, "float8_e5m2", 1},
    {25, "float8_e4m3fn", 1},
    {26, "float8_e4m3fnuz", 1},
    {27, "float8_e4m3b11fnuz", 1},
    {28, "float8_e5m2fnuz", 1},
}};

// The product of the dims other than zero and the item size, as numpy bounds an array
// (npy_mul_sizes_with_overflow: a zero dim does not lift the bound on the others); nothing
// past the largest array numpy can make (2^63 - 1 bytes), which no result could hold.
std::optional<std::uint64_t> span_of(const TensorShape& shape, std::size_t itemsize) {
  constexpr auto kLargest = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t count = itemsize;
  for (const std::int64_t dim : shape) {
    if (dim == 0) continue;
    const auto factor = static_cast<std::uint64_t>(dim);
    if (count > kLargest / factor) return std::nullopt;
    count *= factor;
  }
  return count;
}

bool has_zero_dim(const TensorShape& shape) {
  for (const std::int64_t dim : shape) {
    if (dim == 0) return true;
  }
  return false;
}

}  // namespace

std::optional<DataType> find_data_type(std::int32_t number) {
  for (const DataType& type : kDataTypes) {
    if (type.number == number) return type;
  }
  return std::nullopt;
}

std::optional<std::string> TensorMeta::check() const {
  const std::optional<DataType> type = find_data_type(dtype);
  if (!type) return "unknown DataType " + std::to_string(dtype);
  bool negative = false;
  for (const std::int64_t dim : shape) negative = negative || dim < 0;
  if (shape.size() > kMaxRank || negative) return "invalid tensor shape " + format_shape(shape);
  const std::optional<std::uint64_t> span = span_of(shape, type->itemsize);
  if (!span) {  // a receiver could not make it into an array, even empty
    return "tensor of " + std::string(type->name) + " " + format_shape(shape) +
           " is larger than any array can be (2^63 - 1 bytes)";
  }
  if (!dmaable()) return std::nullopt;
  const std::uint64_t expected = has_zero_dim(shape) ? 0 : *span;
  if (expected == nbytes) return std::nullopt;
  return "tensor of " + std::string(type->name) + " " + format_shape(shape) + " has " +
         std::to_string(expected) + " bytes, not " + std::to_string(nbytes);
}

}  // namespace tensorverbs
