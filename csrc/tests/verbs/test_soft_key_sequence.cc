// KeySequence: Speck32/64 as its authors give it (the test vector of "The SIMON and SPECK
// Families of Lightweight Block Ciphers", appendix C), and a sequence that never repeats.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "verbs/soft/key_sequence.h"

namespace tensorverbs::verbs::soft {
namespace {

TEST(SoftKeySequence, IsSpeck32Over64) {
  // key 1918 1110 0908 0100 (l2 l1 l0 k0), plaintext 6574 694c, ciphertext a868 42f2
  const KeySequence speck({0x0100, 0x0908, 0x1110, 0x1918});
  EXPECT_EQ(speck.encrypt(0x6574694c), 0xa86842f2u);
}

TEST(SoftKeySequence, DrawsItsSecretAndNeverRepeats) {
  auto first = KeySequence::create();
  auto second = KeySequence::create();
  ASSERT_TRUE(first.ok() && second.ok()) << first.status().message();
  EXPECT_NE(first.value().encrypt(0), second.value().encrypt(0));  // 2^-32 to fail
  std::vector<std::uint32_t> keys(1 << 20);
  for (auto& key : keys) key = first.value().next();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::adjacent_find(keys.begin(), keys.end()), keys.end());
}

}  // namespace
}  // namespace tensorverbs::verbs::soft
