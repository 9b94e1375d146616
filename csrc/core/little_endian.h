// Little-endian loads and stores of integers at unaligned byte addresses, whatever the
// host's byte order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace tensorverbs::little_endian {

template <typename T>
T load(const std::uint8_t* bytes) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  U value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    value = static_cast<U>(value | static_cast<U>(static_cast<U>(bytes[i]) << (8 * i)));
  }
  return static_cast<T>(value);
}

template <typename T>
void store(std::uint8_t* bytes, T value) {
  static_assert(std::is_integral_v<T>);
  using U = std::make_unsigned_t<T>;
  const auto bits = static_cast<U>(value);
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    bytes[i] = static_cast<std::uint8_t>(bits >> (8 * i));
  }
}

}  // namespace tensorverbs::little_endian
