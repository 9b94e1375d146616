#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "protocol/tensor_meta.h"

namespace tensorverbs {
namespace {

constexpr std::int64_t kBig = std::numeric_limits<std::int64_t>::max();

TEST(TensorMeta, KnowsTensorverbsDataTypes) {
  for (const std::int32_t number : {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 14, 17, 18, 19, 21, 22, 23, 24, 25,
                                     26, 27, 28}) {
    EXPECT_TRUE(find_data_type(number).has_value()) << number;
  }
  for (const std::int32_t number : {0, 11, 12, 13, 15, 16, 20, 29, 101, -1}) {
    EXPECT_FALSE(find_data_type(number).has_value()) << number;
  }
  EXPECT_STREQ(find_data_type(14)->name, "bfloat16");
  EXPECT_STREQ(find_data_type(25)->name, "float8_e4m3fn");
  EXPECT_EQ(find_data_type(24)->itemsize, 1u);
  EXPECT_EQ(find_data_type(18)->itemsize, 16u);
  EXPECT_EQ(find_data_type(10)->itemsize, 1u);
  EXPECT_EQ(find_data_type(21)->itemsize, 1u);  // opaque bytes
}

TEST(TensorMeta, FormatsShapesAsPythonTuples) {
  EXPECT_EQ(format_shape({}), "()");
  EXPECT_EQ(format_shape({3}), "(3,)");
  EXPECT_EQ(format_shape({2, -3, 4}), "(2, -3, 4)");
}

TEST(TensorMeta, AcceptsAgreeingFields) {
  EXPECT_EQ(TensorMeta({1, {2, 3}, false, 24}).check(), std::nullopt);
  EXPECT_EQ(TensorMeta({18, {}, true, 16}).check(), std::nullopt);  // a scalar
  EXPECT_EQ(TensorMeta({9, {0, 1LL << 29, 1LL << 29}, false, 0}).check(), std::nullopt);
  EXPECT_EQ(TensorMeta({7, {5}, false, 12345}).check(), std::nullopt);  // strings: any size
  EXPECT_EQ(TensorMeta({4, std::vector<std::int64_t>(kMaxRank, 1), false, 1}).check(),
            std::nullopt);
}

TEST(TensorMeta, ExplainsDisagreement) {
  EXPECT_EQ(TensorMeta({1, {2, 3}, false, 25}).check(),
            "tensor of float32 (2, 3) has 24 bytes, not 25");
  EXPECT_EQ(TensorMeta({10, {7}, false, 0}).check(), "tensor of bool (7,) has 7 bytes, not 0");
  EXPECT_EQ(TensorMeta({0, {}, false, 0}).check(), "unknown DataType 0");
  EXPECT_EQ(TensorMeta({1, {-1}, false, 0}).check(), "invalid tensor shape (-1,)");
  EXPECT_EQ(TensorMeta({1, std::vector<std::int64_t>(kMaxRank + 1, 1), false, 4}).check(),
            "invalid tensor shape (1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, "
            "1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1)");
}

// A receiver makes every result into a numpy array, and numpy refuses a shape whose dims
// other than zero, times the item size, pass 2^63 - 1 bytes, even for an empty array: such a
// shape is refused with the message, before any recv could be handed one.
TEST(TensorMeta, ShapesNoArrayCanHoldAreRefused) {
  const std::string too_large = " is larger than any array can be (2^63 - 1 bytes)";
  EXPECT_EQ(TensorMeta({9, {0, kBig, kBig}, false, 0}).check(),
            "tensor of int64 (0, 9223372036854775807, 9223372036854775807)" + too_large);
  EXPECT_EQ(TensorMeta({1, {0, 1LL << 62, 1LL << 62}, false, 0}).check(),
            "tensor of float32 (0, 4611686018427387904, 4611686018427387904)" + too_large);
  EXPECT_EQ(TensorMeta({7, {1LL << 61}, false, 100}).check(),  // strings: numpy objects
            "tensor of object (2305843009213693952,)" + too_large);
  EXPECT_EQ(TensorMeta({4, {1LL << 32, 1LL << 32}, false, 0}).check(),
            "tensor of uint8 (4294967296, 4294967296)" + too_large);
  EXPECT_EQ(TensorMeta({2, {1LL << 61}, false, 0}).check(),  // the item size takes it past
            "tensor of float64 (2305843009213693952,)" + too_large);
  EXPECT_EQ(TensorMeta({4, {1LL << 32, (1LL << 32) - 1}, false, 18446744069414584320ULL}).check(),
            "tensor of uint8 (4294967296, 4294967295)" + too_large);
  // the largest numpy makes
  EXPECT_EQ(TensorMeta({4, {kBig}, false, static_cast<std::uint64_t>(kBig)}).check(), std::nullopt);
  EXPECT_EQ(TensorMeta({4, {0, kBig}, false, 0}).check(), std::nullopt);
}

}  // namespace
}  // namespace tensorverbs
