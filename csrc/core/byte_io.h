// ByteWriter and ByteReader: little-endian fields in a byte string, the reader bounded and
// sticky-failing (every read past the end yields zeros and marks it failed), for the small
// binary formats the core exchanges with peers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/little_endian.h"

namespace tensorverbs {

class ByteWriter {
 public:
  template <typename T>
  ByteWriter& put(T value) {
    std::uint8_t raw[sizeof(T)];
    little_endian::store(raw, value);
    out_.append(reinterpret_cast<const char*>(raw), sizeof(T));
    return *this;
  }
  // A byte string with a u32 length before it.
  ByteWriter& put_bytes(std::string_view bytes) {
    put(static_cast<std::uint32_t>(bytes.size()));
    out_.append(bytes);
    return *this;
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class ByteReader {
 public:
  explicit ByteReader(std::string_view bytes) : bytes_(bytes) {}

  template <typename T>
  T get() {
    if (bytes_.size() - pos_ < sizeof(T) || failed_) {
      failed_ = true;
      return T{};
    }
    const T value = little_endian::load<T>(reinterpret_cast<const std::uint8_t*>(bytes_.data()) + pos_);
    pos_ += sizeof(T);
    return value;
  }
  // A byte string written by put_bytes, of at most `max` bytes.
  std::string_view get_bytes(std::size_t max) {
    const auto size = get<std::uint32_t>();
    if (failed_ || size > max || bytes_.size() - pos_ < size) {
      failed_ = true;
      return {};
    }
    const std::string_view out = bytes_.substr(pos_, size);
    pos_ += size;
    return out;
  }
  // Whether every read succeeded and nothing is left over.
  bool done() const { return !failed_ && pos_ == bytes_.size(); }
  bool failed() const { return failed_; }

 private:
  std::string_view bytes_;
  std::size_t pos_ = 0;
  bool failed_ = false;
};

}  // namespace tensorverbs
