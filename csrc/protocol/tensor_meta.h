// TensorMeta: what a receiver must know to allocate a result (tensor.py's TensorMeta), with
// TensorFlow's DataType numbers and the check that the fields agree.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "protocol/tensor_shape.h"

namespace tensorverbs {

// The largest rank a tensor may have (the message layout reserves room for this many).
inline constexpr std::size_t kMaxRank = 32;
inline constexpr std::int32_t kDtString = 7;
// DT_VARIANT: the bytes of a descriptor (a relay's, a tensor passed by handle, a TensorList)
inline constexpr std::int32_t kDtVariant = 21;

// A DataType tensorverbs knows: numpy's name for it and its item size.
struct DataType {
  std::int32_t number;
  const char* name;
  std::size_t itemsize;
};

// Nothing for numbers tensorverbs does not know.
std::optional<DataType> find_data_type(std::int32_t number);

struct TensorMeta {
  std::int32_t dtype = 0;
  TensorShape shape;
  bool is_dead = false;
  std::uint64_t nbytes = 0;  // raw bytes when DMAable, the TensorProto's size otherwise

  // Whether tensors of this DataType travel as raw bytes (TensorFlow's CanMemCopy).
  bool dmaable() const { return dtype != kDtString; }

  // Why the fields disagree, in tensor.py's words; nothing if they agree.
  std::optional<std::string> check() const;

  bool operator==(const TensorMeta& other) const {
    return dtype == other.dtype && shape == other.shape && is_dead == other.is_dead &&
           nbytes == other.nbytes;
  }
};

}  // namespace tensorverbs
