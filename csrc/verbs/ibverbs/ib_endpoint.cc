#include "verbs/ibverbs/ib_endpoint.h"

#include <arpa/inet.h>

#include <cstring>

#include "core/little_endian.h"

namespace tensorverbs::verbs::ibverbs {
namespace {

constexpr std::uint8_t kMagic[4] = {'T', 'V', 'I', 'B'};
constexpr std::uint32_t kMax24 = 1u << 24;

Status malformed(const std::string& what) {
  return Status(Code::kInvalidArgument, "malformed ibverbs endpoint: " + what);
}

bool valid_mtu(std::uint32_t mtu) {
  return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096;
}

}  // namespace

bool IbEndpoint::has_gid() const {
  for (std::uint8_t byte : gid) {
    if (byte != 0) return true;
  }
  return false;
}

bool IbEndpoint::operator==(const IbEndpoint& other) const {
  return link_layer == other.link_layer && rd_atomic == other.rd_atomic &&
         qp_num == other.qp_num && psn == other.psn && lid == other.lid && mtu == other.mtu &&
         gid == other.gid;
}

std::string gid_text(const std::array<std::uint8_t, 16>& gid) {
  char text[INET6_ADDRSTRLEN] = {};
  if (inet_ntop(AF_INET6, gid.data(), text, sizeof(text)) == nullptr) return "?";
  return text;
}

std::string encode_endpoint(const IbEndpoint& endpoint) {
  std::uint8_t out[kEndpointBytes] = {};
  std::memcpy(out, kMagic, sizeof(kMagic));
  out[4] = kEndpointVersion;
  out[5] = static_cast<std::uint8_t>(endpoint.link_layer);
  out[6] = endpoint.rd_atomic;
  out[7] = 0;
  little_endian::store<std::uint32_t>(out + 8, endpoint.qp_num);
  little_endian::store<std::uint32_t>(out + 12, endpoint.psn);
  little_endian::store<std::uint16_t>(out + 16, endpoint.lid);
  little_endian::store<std::uint16_t>(out + 18, endpoint.mtu);
  std::memcpy(out + 20, endpoint.gid.data(), endpoint.gid.size());
  return std::string(reinterpret_cast<const char*>(out), sizeof(out));
}

Result<IbEndpoint> decode_endpoint(std::string_view bytes) {
  const auto* in = reinterpret_cast<const std::uint8_t*>(bytes.data());
  if (bytes.size() < 8 || std::memcmp(in, kMagic, sizeof(kMagic)) != 0) {
    return Status(Code::kInvalidArgument,
                  "not an ibverbs endpoint (" + std::to_string(bytes.size()) +
                      " bytes without the \"TVIB\" mark): was the peer opened with another "
                      "verbs provider?");
  }
  if (in[4] != kEndpointVersion) {
    return malformed("version " + std::to_string(in[4]) + ", this build reads version " +
                     std::to_string(kEndpointVersion));
  }
  if (bytes.size() != kEndpointBytes) {
    return malformed(std::to_string(bytes.size()) + " bytes, version 1 has " +
                     std::to_string(kEndpointBytes));
  }
  IbEndpoint out;
  if (in[5] != static_cast<std::uint8_t>(LinkLayer::kInfiniBand) &&
      in[5] != static_cast<std::uint8_t>(LinkLayer::kEthernet)) {
    return malformed("link layer " + std::to_string(in[5]) + " (1 InfiniBand, 2 Ethernet)");
  }
  out.link_layer = static_cast<LinkLayer>(in[5]);
  out.rd_atomic = in[6];
  if (out.rd_atomic == 0) return malformed("rd_atomic 0");
  if (in[7] != 0) return malformed("reserved byte " + std::to_string(in[7]));
  out.qp_num = little_endian::load<std::uint32_t>(in + 8);
  out.psn = little_endian::load<std::uint32_t>(in + 12);
  out.lid = little_endian::load<std::uint16_t>(in + 16);
  out.mtu = little_endian::load<std::uint16_t>(in + 18);
  std::memcpy(out.gid.data(), in + 20, out.gid.size());
  if (out.qp_num >= kMax24) return malformed("qp_num " + std::to_string(out.qp_num) + " >= 2^24");
  if (out.psn >= kMax24) return malformed("psn " + std::to_string(out.psn) + " >= 2^24");
  if (!valid_mtu(out.mtu)) {
    return malformed("path MTU " + std::to_string(out.mtu) +
                     " is not one of 256, 512, 1024, 2048, 4096");
  }
  if (out.link_layer == LinkLayer::kEthernet && !out.has_gid()) {
    return malformed("no GID, which RoCE (Ethernet) addressing needs");
  }
  if (out.link_layer == LinkLayer::kInfiniBand && out.lid == 0 && !out.has_gid()) {
    return malformed("neither a LID nor a GID");
  }
  return out;
}

}  // namespace tensorverbs::verbs::ibverbs
