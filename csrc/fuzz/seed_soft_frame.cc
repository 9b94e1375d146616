// Writes the seed corpus of fuzz_soft_frame: one frame of every op, a stream of several,
// and a greeting.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "verbs/soft/wire.h"
#include "verbs/work.h"

int main(int argc, char** argv) {
  using namespace tensorverbs::verbs;
  using namespace tensorverbs::verbs::soft;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
    return 2;
  }
  std::vector<FrameHeader> frames(10);
  frames[0] = {FrameOp::kWrite, 0, kFlagImm | kFlagAck, 7, 1, 3, 0x10001, 8, 0x7f0000000000};
  frames[1] = {FrameOp::kSend, 0, 0, 0, 2, 0, 0, 4, 0};
  frames[2] = {FrameOp::kReadReq, 0, 0, 0, 3, 0, 0x20002, 4096, 0x1000};
  frames[3] = {FrameOp::kReadResp, 0, kFlagAck, 0, 3, 3, 0, 4, 0};
  frames[4] = {FrameOp::kAck, 0, kFlagAck, 0, 0, 9, 0, 0, 0};
  frames[5] = {FrameOp::kNak, static_cast<std::uint8_t>(WcStatus::kRemAccessErr), 0, 0, 4, 0, 0, 5, 0};
  frames[6] = {FrameOp::kSegReq, 0, 0, 0, 0, 0, 1, 0, 0};
  frames[7] = {FrameOp::kSeg, 1, 0, 0, 0, 0, 1, 0, 0};
  frames[8] = {FrameOp::kStripe, 0, 0, 0, 5, 0, 0x10001, 16, 0x7f0000001000};
  frames[9] = {FrameOp::kWrite, 2, kFlagStriped | kFlagImm, 9, 5, 0, 0x10001, 32, 0x7f0000001000};
  std::vector<std::string> seeds;
  std::string stream;
  for (const FrameHeader& f : frames) {
    std::string one(kFrameHeaderBytes, '\0');
    encode_frame(f, reinterpret_cast<std::uint8_t*>(one.data()));
    one += std::string(payload_bytes(f), 'p');
    seeds.push_back(one);
    stream += one;
  }
  seeds.push_back(stream);
  Hello hello;
  hello.fd_count = kHelloFds;
  hello.pd = 3;
  std::string greeting(kHelloBytes, '\0');
  encode_hello(hello, reinterpret_cast<std::uint8_t*>(greeting.data()));
  seeds.push_back(greeting);
  Hello link;  // a link's greeting
  link.kind = HelloKind::kLink;
  link.pd = 1;
  encode_hello(link, reinterpret_cast<std::uint8_t*>(greeting.data()));
  seeds.push_back(greeting);
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    const std::string path = std::string(argv[1]) + "/seed-" + std::to_string(i);
    std::ofstream out(path, std::ios::binary);
    out.write(seeds[i].data(), static_cast<std::streamsize>(seeds[i].size()));
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
  }
  return 0;
}
