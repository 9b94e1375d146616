#include "verbs/soft/wire.h"

#include <cstring>

#include "core/little_endian.h"
#include "verbs/soft/event_ring.h"
#include "verbs/work.h"

namespace tensorverbs::verbs::soft {
namespace {

namespace le = little_endian;
constexpr char kHelloMagic[4] = {'T', 'V', 'S', 'H'};
constexpr std::uint8_t kHelloVersion = 1;

Status bad(FrameOp op, const std::string& why) {
  return Status(Code::kInternal, "malformed frame (op " +
                                     std::to_string(static_cast<unsigned>(op)) + "): " + why);
}

bool nak_status(std::uint8_t status) {
  return status == static_cast<std::uint8_t>(WcStatus::kRemAccessErr) ||
         status == static_cast<std::uint8_t>(WcStatus::kRemInvReqErr) ||
         status == static_cast<std::uint8_t>(WcStatus::kRemOpErr);
}

}  // namespace

bool FrameHeader::operator==(const FrameHeader& o) const {
  return op == o.op && status == o.status && flags == o.flags && imm == o.imm && seq == o.seq &&
         ack == o.ack && rkey == o.rkey && length == o.length && addr == o.addr;
}

bool is_request(FrameOp op) {
  return op == FrameOp::kWrite || op == FrameOp::kSend || op == FrameOp::kReadReq;
}

std::uint32_t payload_bytes(const FrameHeader& h) {
  switch (h.op) {
    case FrameOp::kWrite:
      return (h.flags & kFlagStriped) != 0 ? 0 : h.length;
    case FrameOp::kSend:
    case FrameOp::kReadResp:
    case FrameOp::kNak:
    case FrameOp::kStripe:
      return h.length;
    default:
      return 0;
  }
}

void encode_frame(const FrameHeader& h, std::uint8_t* out) {
  out[0] = static_cast<std::uint8_t>(h.op);
  out[1] = h.status;
  le::store<std::uint16_t>(out + 2, h.flags);
  le::store<std::uint32_t>(out + 4, h.imm);
  le::store<std::uint32_t>(out + 8, h.seq);
  le::store<std::uint32_t>(out + 12, h.ack);
  le::store<std::uint32_t>(out + 16, h.rkey);
  le::store<std::uint32_t>(out + 20, h.length);
  le::store<std::uint64_t>(out + 24, h.addr);
}

Result<FrameHeader> decode_frame(const std::uint8_t* in) {
  FrameHeader h;
  const std::uint8_t op = in[0];
  if (op < 1 || op > static_cast<std::uint8_t>(FrameOp::kStripe)) {
    return Status(Code::kInternal, "malformed frame: unknown op " + std::to_string(op));
  }
  h.op = static_cast<FrameOp>(op);
  h.status = in[1];
  h.flags = le::load<std::uint16_t>(in + 2);
  h.imm = le::load<std::uint32_t>(in + 4);
  h.seq = le::load<std::uint32_t>(in + 8);
  h.ack = le::load<std::uint32_t>(in + 12);
  h.rkey = le::load<std::uint32_t>(in + 16);
  h.length = le::load<std::uint32_t>(in + 20);
  h.addr = le::load<std::uint64_t>(in + 24);

  if ((h.flags & kFlagAck) == 0 && h.ack != 0) return bad(h.op, "ack without its flag");
  const bool imm_allowed = h.op == FrameOp::kWrite || h.op == FrameOp::kSend;
  const std::uint16_t allowed = static_cast<std::uint16_t>(
      (h.op == FrameOp::kStripe ? 0 : kFlagAck) | (imm_allowed ? kFlagImm : 0) |
      (h.op == FrameOp::kWrite ? kFlagStriped : 0));
  if ((h.flags & ~allowed) != 0) return bad(h.op, "unknown flags");
  if ((h.flags & kFlagImm) == 0 && h.imm != 0 && h.op != FrameOp::kStripe) {
    return bad(h.op, "immediate without its flag");
  }
  if (h.length > kMaxMessageBytes) return bad(h.op, "length over the largest operation");
  const bool is_req = is_request(h.op);
  if (is_req && h.seq == 0) return bad(h.op, "request without a sequence number");
  switch (h.op) {
    case FrameOp::kWrite:
      if ((h.flags & kFlagStriped) != 0) {
        if (h.status == 0 || h.length == 0) return bad(h.op, "a striped write without stripes");
      } else if (h.status != 0) {
        return bad(h.op, "status set");
      }
      break;
    case FrameOp::kReadReq:
      if (h.status != 0) return bad(h.op, "status set");
      break;
    case FrameOp::kStripe:
      if (h.seq == 0 || h.length == 0) return bad(h.op, "a stripe of no write, or empty");
      if (h.status != 0) return bad(h.op, "unused fields set");
      if (h.imm >= kMaxStripes) return bad(h.op, "stripe index " + std::to_string(h.imm));
      break;
    case FrameOp::kSend:
    case FrameOp::kReadResp:
      if (h.status != 0 || h.rkey != 0 || h.addr != 0) return bad(h.op, "unused fields set");
      if (h.op == FrameOp::kReadResp && h.seq == 0) return bad(h.op, "answers no request");
      break;
    case FrameOp::kAck:
      if ((h.flags & kFlagAck) == 0) return bad(h.op, "ACK without an acknowledgement");
      if (h.status != 0 || h.seq != 0 || h.rkey != 0 || h.length != 0 || h.addr != 0) {
        return bad(h.op, "unused fields set");
      }
      break;
    case FrameOp::kNak:
      if (!nak_status(h.status)) return bad(h.op, "status " + std::to_string(h.status));
      if (h.seq == 0 || h.rkey != 0 || h.addr != 0) return bad(h.op, "unused fields set");
      if (h.length > kMaxNakDetail) return bad(h.op, "reason too long");
      break;
    case FrameOp::kSegReq:
    case FrameOp::kSeg:
      if (h.rkey == 0) return bad(h.op, "segment 0");
      if (h.seq != 0 || h.length != 0 || h.addr != 0) return bad(h.op, "unused fields set");
      if (h.status > (h.op == FrameOp::kSeg ? 1 : 0)) return bad(h.op, "bad status");
      break;
  }
  return h;
}

bool Hello::operator==(const Hello& o) const {
  return kind == o.kind && status == o.status && fd_count == o.fd_count && target == o.target &&
         dialer == o.dialer && pd == o.pd;
}

void encode_hello(const Hello& hello, std::uint8_t* out) {
  std::memcpy(out, kHelloMagic, 4);
  out[4] = kHelloVersion;
  out[5] = static_cast<std::uint8_t>(hello.kind);
  out[6] = static_cast<std::uint8_t>(hello.status);
  out[7] = hello.fd_count;
  std::memcpy(out + 8, hello.target.data(), kTokenBytes);
  std::memcpy(out + 8 + kTokenBytes, hello.dialer.data(), kTokenBytes);
  le::store<std::uint32_t>(out + 40, hello.pd);
}

Result<Hello> decode_hello(const std::uint8_t* in) {
  if (std::memcmp(in, kHelloMagic, 4) != 0) {
    return Status(Code::kInvalidArgument, "not a soft verbs greeting (bad magic)");
  }
  if (in[4] != kHelloVersion) {
    return Status(Code::kInvalidArgument, "greeting of unsupported version " + std::to_string(in[4]));
  }
  Hello hello;
  if (in[5] < 1 || in[5] > 3) return Status(Code::kInvalidArgument, "greeting of unknown kind");
  hello.kind = static_cast<HelloKind>(in[5]);
  if (in[6] > 4 || (hello.kind != HelloKind::kReply && in[6] != 0)) {
    return Status(Code::kInvalidArgument, "greeting with a bad status");
  }
  hello.status = static_cast<HelloStatus>(in[6]);
  hello.fd_count = in[7];
  if (hello.fd_count != 0 && hello.fd_count != kHelloFds) {
    return Status(Code::kInvalidArgument, "greeting with a bad descriptor count");
  }
  std::memcpy(hello.target.data(), in + 8, kTokenBytes);
  std::memcpy(hello.dialer.data(), in + 8 + kTokenBytes, kTokenBytes);
  hello.pd = le::load<std::uint32_t>(in + 40);
  if (hello.kind == HelloKind::kLink &&
      (hello.fd_count != 0 || hello.pd == 0 || hello.pd > kMaxLinks)) {
    return Status(Code::kInvalidArgument, "a link's greeting with descriptors or a bad link number");
  }
  return hello;
}

std::string to_string(HelloStatus status) {
  switch (status) {
    case HelloStatus::kOk: return "accepted";
    case HelloStatus::kNoQueuePair: return "no such queue pair (destroyed?)";
    case HelloStatus::kNotSameHost: return "refused shared memory (same_host=no, or another user)";
    case HelloStatus::kTaken: return "the queue pair is connected to another peer";
    case HelloStatus::kBadDescriptors: return "the descriptors sent were refused";
  }
  return "unknown status";
}

}  // namespace tensorverbs::verbs::soft
