#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "protocol/tensor_shape.h"

namespace tensorverbs {
namespace {

std::vector<std::int64_t> dims_of(const TensorShape& shape) {
  return std::vector<std::int64_t>(shape.begin(), shape.end());
}

TEST(TensorShape, HoldsItsDimsAtEveryRank) {
  for (std::size_t rank = 0; rank <= 2 * TensorShape::kInlineRank + 1; ++rank) {
    std::vector<std::int64_t> dims;
    for (std::size_t i = 0; i < rank; ++i) dims.push_back(static_cast<std::int64_t>(i) * 7 - 3);
    const TensorShape shape(dims);
    EXPECT_EQ(shape.size(), rank);
    EXPECT_EQ(shape.empty(), rank == 0);
    EXPECT_EQ(dims_of(shape), dims);
    const TensorShape copy = shape;  // (a spilled shape's copy has its own dims)
    EXPECT_EQ(dims_of(copy), dims);
    EXPECT_EQ(copy, shape);
    TensorShape moved = TensorShape(dims);
    EXPECT_EQ(moved, shape);
  }
}

TEST(TensorShape, AShapeMovedFromIsEmpty) {
  for (const std::size_t rank : {std::size_t{3}, TensorShape::kInlineRank + 1}) {
    TensorShape shape(std::vector<std::int64_t>(rank, 2));
    const TensorShape moved(std::move(shape));
    EXPECT_EQ(moved.size(), rank);
    EXPECT_TRUE(shape.empty());  // NOLINT(bugprone-use-after-move): what is left is checked
    EXPECT_EQ(shape, TensorShape());
    TensorShape other(std::vector<std::int64_t>(rank, 5));
    TensorShape target;
    target = std::move(other);
    EXPECT_EQ(target, TensorShape(std::vector<std::int64_t>(rank, 5)));
    EXPECT_TRUE(other.empty());  // NOLINT(bugprone-use-after-move)
  }
}

TEST(TensorShape, EqualOnlyWithTheSameDimsInOrder) {
  EXPECT_EQ(TensorShape({2, 3}), TensorShape(std::vector<std::int64_t>{2, 3}));
  EXPECT_NE(TensorShape({2, 3}), TensorShape({3, 2}));
  EXPECT_NE(TensorShape({2, 3}), TensorShape({2, 3, 1}));
  EXPECT_NE(TensorShape({}), TensorShape({0}));
  const std::vector<std::int64_t> long_dims(TensorShape::kInlineRank + 2, 1);
  std::vector<std::int64_t> other = long_dims;
  other.back() = 2;
  EXPECT_NE(TensorShape(long_dims), TensorShape(other));
  EXPECT_EQ(TensorShape(long_dims), TensorShape(long_dims));
}

}  // namespace
}  // namespace tensorverbs
