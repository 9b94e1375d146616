// KeySequence: the keys a key table hands out. Each is the next value of a counter
// encrypted with Speck32/64 (a 32-bit block cipher) under a 64-bit secret drawn from the
// kernel's CSPRNG (getrandom): without the secret no key says anything about another, and
// since a block cipher is a permutation, no key repeats within 2^32 keys, so a peer that
// kept an old key never finds it valid again.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "core/status.h"

namespace tensorverbs::verbs::soft {

class KeySequence {
 public:
  // Under a fresh secret; kUnavailable when the kernel gives none.
  static Result<KeySequence> create();
  // Under the secret (k0, l0, l1, l2) (Speck's key words, as its test vectors give them).
  explicit KeySequence(const std::array<std::uint16_t, 4>& secret);
  KeySequence() = default;  // (for Result: never used unkeyed)

  // The next key (0 included: the caller skips what it cannot use).
  std::uint32_t next() { return encrypt(counter_++); }
  std::uint32_t encrypt(std::uint32_t block) const;

 private:
  static constexpr std::size_t kRounds = 22;
  std::array<std::uint16_t, kRounds> round_keys_{};
  std::uint32_t counter_ = 0;
};

}  // namespace tensorverbs::verbs::soft
