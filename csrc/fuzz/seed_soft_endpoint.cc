// Writes the seed corpus of fuzz_soft_endpoint: valid endpoints at the limits of the format.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "verbs/soft/soft_endpoint.h"

int main(int argc, char** argv) {
  using namespace tensorverbs::verbs::soft;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIRECTORY\n", argv[0]);
    return 2;
  }
  std::vector<SoftEndpoint> seeds(5);
  seeds[0].qp_num = 1;
  seeds[0].tcp_host = "127.0.0.1";
  seeds[0].tcp_port = 1;
  seeds[0].unix_name = "tensorverbs-soft-0123456789abcdef";
  seeds[1].qp_num = 0xFFFFFF;
  seeds[1].mtu = 256;
  seeds[1].same_host = SameHost::kNo;
  seeds[1].tcp_host = "fe80::1%eth0";
  seeds[1].tcp_port = 65535;
  seeds[2].qp_num = 77;
  seeds[2].same_host = SameHost::kYes;
  seeds[2].tcp_host = std::string(255, 'h');
  seeds[2].tcp_port = 2222;
  seeds[2].unix_name = std::string(kMaxUnixName, 'u');
  seeds[3] = seeds[0];
  for (std::size_t i = 0; i < kTokenBytes; ++i) seeds[3].token[i] = static_cast<std::uint8_t>(0xF0 + i);
  seeds[4] = seeds[1];  // with the most links
  for (std::size_t i = 0; i < kMaxLinks; ++i) {
    seeds[4].links.push_back({"10.0." + std::to_string(i) + ".1", static_cast<std::uint16_t>(4000 + i)});
  }
  seeds[4].links.back().tcp_host = std::string(255, 'l');
  for (std::size_t i = 0; i < seeds.size(); ++i) {
    const std::string path = std::string(argv[1]) + "/seed-" + std::to_string(i);
    const std::string bytes = encode_endpoint(seeds[i]);
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out || !validate_endpoint(seeds[i]).empty()) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      return 1;
    }
  }
  return 0;
}
