// SoftEndpoint: what a soft queue pair's endpoint() says and its peer's connect() reads.
//
// Binary, little-endian, version 1 (no links) or 2:
//   "TVSE" | version u8 | same_host u8 (0 auto, 1 yes, 2 no) | reserved u16 (0) |
//   qp_num u32 (24 bits) | mtu u32 | token 16 B | tcp_port u16 | host_len u8 |
//   unix_len u8 | link_count u8 (0 in version 1, 1-kMaxLinks in 2) | reserved 3 B (0) |
//   host (host_len B) | unix name (unix_len B, 0: no Unix socket) |
//   link_count x (tcp_port u16 | host_len u8 | host)
// The links are the context's further addresses, one per network link of its host
// (soft_queue_pair.h): a queue pair connected over TCP opens a stream on each link it shares
// with its peer, pairing them by position. decode_endpoint() accepts exactly this (any
// bytes are safe to give it).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tensorverbs::verbs::soft {

enum class SameHost : std::uint8_t { kAuto = 0, kYes = 1, kNo = 2 };

inline constexpr std::size_t kTokenBytes = 16;
using Token = std::array<std::uint8_t, kTokenBytes>;

inline constexpr std::size_t kMaxLinks = 8;

// One further address of a context: where its listener for that link is.
struct SoftLinkAddress {
  std::string tcp_host;
  std::uint16_t tcp_port = 0;

  bool operator==(const SoftLinkAddress& other) const {
    return tcp_host == other.tcp_host && tcp_port == other.tcp_port;
  }
};

struct SoftEndpoint {
  std::uint32_t qp_num = 0;
  std::uint32_t mtu = 4096;
  Token token{};
  SameHost same_host = SameHost::kAuto;
  std::string tcp_host;  // 1-255 characters: letters, digits, '.', ':', '-', '_', '%'
  std::uint16_t tcp_port = 0;
  std::string unix_name;  // abstract socket name (no leading NUL), 0-100 characters
  std::vector<SoftLinkAddress> links;  // 0-kMaxLinks, hosts as tcp_host's

  bool operator==(const SoftEndpoint& other) const;
};

inline constexpr std::size_t kEndpointFixedBytes = 40;
inline constexpr std::size_t kMaxUnixName = 100;

// "" on success; else why `endpoint` cannot be encoded.
std::string validate_endpoint(const SoftEndpoint& endpoint);
std::string encode_endpoint(const SoftEndpoint& endpoint);  // endpoint must be valid
Result<SoftEndpoint> decode_endpoint(std::string_view bytes);

// "auto", "yes", "no" (TENSORVERBS_SAME_HOST).
Result<SameHost> parse_same_host(const std::string& text);
const char* to_string(SameHost value);

}  // namespace tensorverbs::verbs::soft
