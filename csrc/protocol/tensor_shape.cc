#include "protocol/tensor_shape.h"

#include <algorithm>

namespace tensorverbs {

TensorShape::TensorShape(const std::int64_t* dims, std::size_t rank) : rank_(rank) {
  if (rank <= kInlineRank) {
    std::copy(dims, dims + rank, inline_.begin());
  } else {
    spill_.assign(dims, dims + rank);
  }
}

bool TensorShape::operator==(const TensorShape& other) const {
  return rank_ == other.rank_ && std::equal(begin(), end(), other.begin());
}

std::string format_shape(const TensorShape& shape) {
  std::string text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    text += (i ? ", " : "") + std::to_string(shape[i]);
  }
  return text + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace tensorverbs
