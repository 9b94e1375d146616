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

// The product of the dims and the item size; nothing if it does not fit 64 bits.
std::optional<std::uint64_t> byte_count(const TensorShape& shape,
                                        std::size_t itemsize) {
  for (const std::int64_t dim : shape) {
    if (dim == 0) return 0;
  }
  std::uint64_t count = itemsize;
  for (const std::int64_t dim : shape) {
    const auto factor = static_cast<std::uint64_t>(dim);
    if (count > std::numeric_limits<std::uint64_t>::max() / factor) return std::nullopt;
    count *= factor;
  }
  return count;
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
  if (!dmaable()) return std::nullopt;
  const std::optional<std::uint64_t> expected = byte_count(shape, type->itemsize);
  if (expected == nbytes) return std::nullopt;
  const std::string count =
      expected ? std::to_string(*expected)
               : "more than " + std::to_string(std::numeric_limits<std::uint64_t>::max());
  return "tensor of " + std::string(type->name) + " " + format_shape(shape) + " has " + count +
         " bytes, not " + std::to_string(nbytes);
}

}  // namespace tensorverbs
