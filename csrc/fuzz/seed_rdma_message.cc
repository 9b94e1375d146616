// Writes the seed corpus of fuzz_rdma_message into the directory given: one valid message
// of every type, with and without meta-data, at the limits of the layout.
#include <array>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "protocol/rdma_message.h"

int main(int argc, char** argv) {
  using namespace tensorverbs;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
    return 2;
  }
  RdmaMessage requests{MessageType::kTensorRequests, 0, "", 0, 0, 0, std::nullopt, 0, ""};
  requests.requests = {{0, 7, "w1"}, {kMaxRequestIndex, -1, std::string(kNameBytes, 'n')}};
  const std::vector<std::uint8_t> bytes(24, 0xAB);
  RdmaMessage inlines{MessageType::kTensorInlines, 0, "", 0, 0, 0, std::nullopt, 0, ""};
  inlines.inlines = {{0, TensorMeta{1, {2, 3}, false, 24}, bytes.data()},
                     {kMaxRequestIndex, TensorMeta{7, {}, true, 5}, bytes.data()},
                     {3, TensorMeta{4, std::vector<std::int64_t>(kMaxRank, 0), false, 0}, nullptr}};
  const std::vector<RdmaMessage> seeds = {
      requests,
      inlines,
      {MessageType::kMetaDataResponse, 1, "", 7, 0xC0FFEE, 0, TensorMeta{1, {2, 3}, false, 24}, 0,
       ""},
      {MessageType::kMetaDataResponse, 2, "", 7, 0, 0, TensorMeta{7, {4}, true, 1000}, 0, ""},
      {MessageType::kTensorReRequest, 3, "w1", 7, 0x7F0000001000, 0x1234, std::nullopt, 0, ""},
      {MessageType::kTensorRequest, 4, "/job:ps/task:0;w1;0:0", -1, 0x1000, 99,
       TensorMeta{14, std::vector<std::int64_t>(kMaxRank, 1), false, 2}, 0, ""},
      {MessageType::kTensorRequest, kMaxRequestIndex, std::string(kNameBytes, 'n'), 0, 0, 0,
       TensorMeta{18, {}, false, 16}, 0, ""},
      {MessageType::kErrorStatus, 5, "w1", 7, 0, 0, std::nullopt, 10, "aborted: step 7"},
      {MessageType::kErrorStatus, 6, "", 0, 0, 0, std::nullopt, 13, std::string(4000, 'e')},
      {MessageType::kRelease, 7, "w1", 7, 0, 0, std::nullopt, 0, ""},
      {MessageType::kCancel, 8, "w1", 7, 0, 0, std::nullopt, 0, ""},
  };
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    std::array<std::uint8_t, kSlotBytes> slot{};
    const EncodeResult encoded = encode_into(seeds[i], slot.data());
    const std::string path = std::string(argv[1]) + "/seed-" + std::to_string(i);
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(slot.data()),
              static_cast<std::streamsize>(encoded.size));
    if (!encoded.error.empty() || !out) {
      std::fprintf(stderr, "cannot write %s: %s\n", path.c_str(), encoded.error.c_str());
      return 1;
    }
  }
  return 0;
}
