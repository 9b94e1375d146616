#include "verbs/soft/key_sequence.h"

#include <sys/random.h>

namespace tensorverbs::verbs::soft {
namespace {

std::uint16_t ror(std::uint16_t x, int r) {
  return static_cast<std::uint16_t>((x >> r) | (x << (16 - r)));
}

std::uint16_t rol(std::uint16_t x, int r) {
  return static_cast<std::uint16_t>((x << r) | (x >> (16 - r)));
}

// Speck's round on (x, y) with round key k (alpha 7, beta 2 for 16-bit words).
void speck_round(std::uint16_t& x, std::uint16_t& y, std::uint16_t k) {
  x = static_cast<std::uint16_t>(static_cast<std::uint16_t>(ror(x, 7) + y) ^ k);
  y = static_cast<std::uint16_t>(rol(y, 2) ^ x);
}

}  // namespace

Result<KeySequence> KeySequence::create() {
  std::array<std::uint16_t, 4> secret{};
  if (::getrandom(secret.data(), sizeof(secret), 0) != static_cast<ssize_t>(sizeof(secret))) {
    return Status(Code::kUnavailable, "cannot draw the secret of the soft provider's keys");
  }
  return KeySequence(secret);
}

KeySequence::KeySequence(const std::array<std::uint16_t, 4>& secret) {
  // the key schedule is the round function itself, with the round number as its key
  std::uint16_t k = secret[0];
  std::array<std::uint16_t, 3> l = {secret[1], secret[2], secret[3]};
  for (std::size_t i = 0; i < kRounds; ++i) {
    round_keys_[i] = k;
    std::uint16_t& next = l[i % 3];
    speck_round(next, k, static_cast<std::uint16_t>(i));
  }
}

std::uint32_t KeySequence::encrypt(std::uint32_t block) const {
  auto x = static_cast<std::uint16_t>(block >> 16);
  auto y = static_cast<std::uint16_t>(block);
  for (std::uint16_t k : round_keys_) speck_round(x, y, k);
  return (std::uint32_t{x} << 16) | y;
}

}  // namespace tensorverbs::verbs::soft
