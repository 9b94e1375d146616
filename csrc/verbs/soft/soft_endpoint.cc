#include "verbs/soft/soft_endpoint.h"

#include <cstring>

#include "core/little_endian.h"

namespace tensorverbs::verbs::soft {
namespace {

namespace le = little_endian;
constexpr char kMagic[4] = {'T', 'V', 'S', 'E'};
constexpr std::uint8_t kVersion = 1, kLinksVersion = 2;

bool host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == ':' || c == '-' || c == '_' || c == '%';
}

bool unix_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         c == '.' || c == '-' || c == '_';
}

bool valid_mtu(std::uint32_t mtu) {
  return mtu == 256 || mtu == 512 || mtu == 1024 || mtu == 2048 || mtu == 4096;
}

Status malformed(const std::string& why) {
  return Status(Code::kInvalidArgument, "malformed soft endpoint: " + why);
}

std::string validate_host(const std::string& host, std::uint16_t port) {
  if (host.empty() || host.size() > 255) return "tcp host of bad length";
  for (char c : host) {
    if (!host_char(c)) return "tcp host with a bad character";
  }
  if (port == 0) return "tcp port 0";
  return "";
}

}  // namespace

bool SoftEndpoint::operator==(const SoftEndpoint& other) const {
  return qp_num == other.qp_num && mtu == other.mtu && token == other.token &&
         same_host == other.same_host && tcp_host == other.tcp_host &&
         tcp_port == other.tcp_port && unix_name == other.unix_name && links == other.links;
}

std::string validate_endpoint(const SoftEndpoint& e) {
  if (e.qp_num == 0 || e.qp_num > 0xFFFFFF) return "qp_num out of range";
  if (!valid_mtu(e.mtu)) return "mtu " + std::to_string(e.mtu) + " is not a verbs MTU";
  if (static_cast<std::uint8_t>(e.same_host) > 2) return "unknown same_host setting";
  std::string why = validate_host(e.tcp_host, e.tcp_port);
  if (!why.empty()) return why;
  if (e.links.size() > kMaxLinks) return "more than " + std::to_string(kMaxLinks) + " links";
  for (const SoftLinkAddress& link : e.links) {
    why = validate_host(link.tcp_host, link.tcp_port);
    if (!why.empty()) return "link: " + why;
  }
  if (e.unix_name.size() > kMaxUnixName) return "unix socket name too long";
  for (char c : e.unix_name) {
    if (!unix_char(c)) return "unix socket name with a bad character";
  }
  return "";
}

std::string encode_endpoint(const SoftEndpoint& e) {
  std::size_t size = kEndpointFixedBytes + e.tcp_host.size() + e.unix_name.size();
  for (const SoftLinkAddress& link : e.links) size += 3 + link.tcp_host.size();
  std::string out(size, '\0');
  auto* p = reinterpret_cast<std::uint8_t*>(out.data());
  std::memcpy(p, kMagic, 4);
  p[4] = e.links.empty() ? kVersion : kLinksVersion;
  p[5] = static_cast<std::uint8_t>(e.same_host);
  le::store<std::uint16_t>(p + 6, 0);
  le::store<std::uint32_t>(p + 8, e.qp_num);
  le::store<std::uint32_t>(p + 12, e.mtu);
  std::memcpy(p + 16, e.token.data(), kTokenBytes);
  le::store<std::uint16_t>(p + 32, e.tcp_port);
  p[34] = static_cast<std::uint8_t>(e.tcp_host.size());
  p[35] = static_cast<std::uint8_t>(e.unix_name.size());
  le::store<std::uint32_t>(p + 36, 0);
  p[36] = static_cast<std::uint8_t>(e.links.size());
  std::uint8_t* at = p + kEndpointFixedBytes;
  std::memcpy(at, e.tcp_host.data(), e.tcp_host.size());
  at += e.tcp_host.size();
  std::memcpy(at, e.unix_name.data(), e.unix_name.size());
  at += e.unix_name.size();
  for (const SoftLinkAddress& link : e.links) {
    le::store<std::uint16_t>(at, link.tcp_port);
    at[2] = static_cast<std::uint8_t>(link.tcp_host.size());
    std::memcpy(at + 3, link.tcp_host.data(), link.tcp_host.size());
    at += 3 + link.tcp_host.size();
  }
  return out;
}

Result<SoftEndpoint> decode_endpoint(std::string_view bytes) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(bytes.data());
  if (bytes.size() < kEndpointFixedBytes) {
    return malformed(std::to_string(bytes.size()) + " bytes, fewer than the fixed part");
  }
  if (std::memcmp(p, kMagic, 4) != 0) return malformed("not a soft endpoint (bad magic)");
  if (p[4] != kVersion && p[4] != kLinksVersion) {
    return malformed("unsupported version " + std::to_string(p[4]));
  }
  const std::size_t link_count = p[36];
  if (le::load<std::uint16_t>(p + 6) != 0 || (le::load<std::uint32_t>(p + 36) >> 8) != 0) {
    return malformed("reserved bits set");
  }
  if ((p[4] == kVersion) != (link_count == 0) || link_count > kMaxLinks) {
    return malformed(std::to_string(link_count) + " links in a version " + std::to_string(p[4]) +
                     " endpoint");
  }
  SoftEndpoint e;
  if (p[5] > 2) return malformed("unknown same_host setting " + std::to_string(p[5]));
  e.same_host = static_cast<SameHost>(p[5]);
  e.qp_num = le::load<std::uint32_t>(p + 8);
  e.mtu = le::load<std::uint32_t>(p + 12);
  std::memcpy(e.token.data(), p + 16, kTokenBytes);
  e.tcp_port = le::load<std::uint16_t>(p + 32);
  const std::size_t host_len = p[34], unix_len = p[35];
  std::size_t at = kEndpointFixedBytes + host_len + unix_len;
  if (bytes.size() < at || (link_count == 0 && bytes.size() != at)) {
    return malformed(std::to_string(bytes.size()) + " bytes where the lengths say " +
                     std::to_string(at));
  }
  e.tcp_host.assign(bytes.substr(kEndpointFixedBytes, host_len));
  e.unix_name.assign(bytes.substr(kEndpointFixedBytes + host_len, unix_len));
  for (std::size_t i = 0; i < link_count; ++i) {
    if (bytes.size() - at < 3 || bytes.size() - at - 3 < p[at + 2]) {
      return malformed("link " + std::to_string(i + 1) + " runs past the end");
    }
    SoftLinkAddress link;
    link.tcp_port = le::load<std::uint16_t>(p + at);
    link.tcp_host.assign(bytes.substr(at + 3, p[at + 2]));
    at += 3 + p[at + 2];
    e.links.push_back(std::move(link));
  }
  if (at != bytes.size()) return malformed(std::to_string(bytes.size() - at) + " bytes after the links");
  std::string why = validate_endpoint(e);
  if (!why.empty()) return malformed(why);
  return e;
}

Result<SameHost> parse_same_host(const std::string& text) {
  if (text == "auto") return SameHost::kAuto;
  if (text == "yes") return SameHost::kYes;
  if (text == "no") return SameHost::kNo;
  return Status(Code::kInvalidArgument, "TENSORVERBS_SAME_HOST='" + text +
                                            "' is not one of auto, yes, no");
}

const char* to_string(SameHost value) {
  switch (value) {
    case SameHost::kAuto: return "auto";
    case SameHost::kYes: return "yes";
    case SameHost::kNo: return "no";
  }
  return "?";
}

}  // namespace tensorverbs::verbs::soft
