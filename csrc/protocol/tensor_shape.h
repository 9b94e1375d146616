// TensorShape: a tensor's dims, held in the object itself up to kInlineRank of them, so
// that the meta-data a transfer copies (request, answer, cache, result) allocates nothing;
// a larger rank spills to the heap. Read-only once made.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace tensorverbs {

class TensorShape {
 public:
  static constexpr std::size_t kInlineRank = 8;

  TensorShape() = default;
  TensorShape(const std::int64_t* dims, std::size_t rank);
  TensorShape(std::initializer_list<std::int64_t> dims) : TensorShape(dims.begin(), dims.size()) {}
  TensorShape(const std::vector<std::int64_t>& dims)  // NOLINT: a vector is a shape
      : TensorShape(dims.data(), dims.size()) {}
  TensorShape(const TensorShape&) = default;
  TensorShape& operator=(const TensorShape&) = default;
  // A shape moved from is empty (its spilled dims went with it).
  TensorShape(TensorShape&& other) noexcept
      : rank_(other.rank_), inline_(other.inline_), spill_(std::move(other.spill_)) {
    other.rank_ = 0;
  }
  TensorShape& operator=(TensorShape&& other) noexcept {
    rank_ = other.rank_;
    inline_ = other.inline_;
    spill_ = std::move(other.spill_);
    other.rank_ = 0;
    return *this;
  }

  std::size_t size() const { return rank_; }
  bool empty() const { return rank_ == 0; }
  const std::int64_t* data() const { return rank_ <= kInlineRank ? inline_.data() : spill_.data(); }
  const std::int64_t* begin() const { return data(); }
  const std::int64_t* end() const { return data() + rank_; }
  std::int64_t operator[](std::size_t i) const { return data()[i]; }

  bool operator==(const TensorShape& other) const;
  bool operator!=(const TensorShape& other) const { return !(*this == other); }

 private:
  std::size_t rank_ = 0;
  std::array<std::int64_t, kInlineRank> inline_{};
  std::vector<std::int64_t> spill_;  // the dims when there are more than kInlineRank
};

// A shape as Python prints a tuple of ints: "()", "(3,)", "(2, 3)".
std::string format_shape(const TensorShape& shape);

}  // namespace tensorverbs
