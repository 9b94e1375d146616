// Writes the seed corpus of fuzz_soft_ring: a tail and well-formed entries.
#include <cstdio>
#include <fstream>
#include <string>

#include "core/little_endian.h"
#include "verbs/soft/event_ring.h"

int main(int argc, char** argv) {
  using namespace tensorverbs;
  using namespace tensorverbs::verbs::soft;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
    return 2;
  }
  for (std::uint64_t tail = 0; tail <= 8; tail += 4) {
    std::string bytes(8 + 8 * kRingEntryBytes, '\0');
    auto* p = reinterpret_cast<std::uint8_t*>(bytes.data());
    little_endian::store<std::uint64_t>(p, tail);
    for (std::uint32_t i = 0; i < 8; ++i) {
      std::uint8_t* e = p + 8 + i * kRingEntryBytes;
      little_endian::store<std::uint32_t>(e, i + 1);
      little_endian::store<std::uint32_t>(e + 4, 0xABC0 + i);
      little_endian::store<std::uint32_t>(e + 8, 4096 * i);
      little_endian::store<std::uint32_t>(e + 12, kRingFlagImm);
    }
    const std::string path = std::string(argv[1]) + "/seed-" + std::to_string(tail);
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return 1;
  }
  return 0;
}
