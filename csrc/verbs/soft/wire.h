// The frames two soft queue pairs exchange on their stream (a TCP or Unix socket), and
// the greeting that opens it. Little-endian; decode_frame() and decode_hello() accept
// exactly what the encoders write (any bytes are safe to give them).
//
// Frame: a 32-byte header, followed by payload_bytes(header) bytes:
//   op u8 | status u8 | flags u16 | imm u32 | seq u32 | ack u32 | rkey u32 | length u32 |
//   addr u64
// Requests (WRITE, SEND, READ_REQ) carry `seq`, which numbers the requests of one
// direction (those whose immediate went through the peer's event ring included), from 1,
// wrapping. `ack` (valid with kFlagAck, in any frame) says that every request of the
// other direction up to it has been carried out. READ_RESP and NAK answer request `seq`.
// SEG_REQ asks for the descriptor of segment `rkey`; SEG answers with it attached
// (status 0) or without (status 1: no such segment).
// Striping (a queue pair with links, soft_queue_pair.h): a large WRITE's data goes as STRIPE
// frames (seq: the write's; imm: the stripe's index, from 0; rkey, addr, length: where
// this part lands), spread over the queue pair's streams, after the WRITE itself on the
// first stream with kFlagStriped, no payload and `status` the number of stripes; it is
// carried out once every stripe landed. Stripes carry no acknowledgement; one may come
// twice (sent again when its link broke).
//
// Greeting (44 bytes): "TVSH" | version u8 | kind u8 (1 hello, 2 reply, 3 link) | status u8 |
//   fd count u8 | target token 16 B | dialer token 16 B | PD number of the sender's
//   queue pair u32 (a peer's key-table entry is used only by queue pairs of its PD)
// The dialer sends a hello naming the queue pair it wants (target) and itself; over a
// Unix socket it attaches its key table, doorbell and event ring. The reply says whether
// the queue pair takes the connection, with the same three descriptors of its side. A link's
// greeting (kind 3, over TCP to the listener of one of the peer's links) opens a further
// stream to a queue pair connected already: its `pd` field is the link's number (1 up),
// and the reply (kind 2) says whether it was taken.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "verbs/soft/soft_endpoint.h"

namespace tensorverbs::verbs::soft {

enum class FrameOp : std::uint8_t {
  kWrite = 1,
  kSend = 2,
  kReadReq = 3,
  kReadResp = 4,
  kAck = 5,
  kNak = 6,
  kSegReq = 7,
  kSeg = 8,
  kStripe = 9,
};

inline constexpr std::uint16_t kFlagImm = 1;
inline constexpr std::uint16_t kFlagAck = 2;
inline constexpr std::uint16_t kFlagStriped = 4;  // a WRITE whose data came as stripes
inline constexpr std::uint32_t kMaxStripes = 255;  // a striped write's stripes at most
inline constexpr std::size_t kFrameHeaderBytes = 32;
inline constexpr std::uint32_t kMaxNakDetail = 1024;

struct FrameHeader {
  FrameOp op = FrameOp::kAck;
  std::uint8_t status = 0;
  std::uint16_t flags = 0;
  std::uint32_t imm = 0;
  std::uint32_t seq = 0;
  std::uint32_t ack = 0;
  std::uint32_t rkey = 0;
  std::uint32_t length = 0;
  std::uint64_t addr = 0;

  bool operator==(const FrameHeader& other) const;
};

bool is_request(FrameOp op);
// How many payload bytes follow the header.
std::uint32_t payload_bytes(const FrameHeader& header);
void encode_frame(const FrameHeader& header, std::uint8_t* out);  // kFrameHeaderBytes
Result<FrameHeader> decode_frame(const std::uint8_t* bytes);     // kFrameHeaderBytes

enum class HelloKind : std::uint8_t { kHello = 1, kReply = 2, kLink = 3 };
enum class HelloStatus : std::uint8_t {
  kOk = 0,
  kNoQueuePair = 1,      // no queue pair has the target token (destroyed, or never was)
  kNotSameHost = 2,      // the listener does not share memory (same_host no, or another uid)
  kTaken = 3,            // the queue pair is connected to another peer
  kBadDescriptors = 4,   // the descriptors that came with the hello were refused
};

inline constexpr std::size_t kHelloBytes = 44;
inline constexpr std::uint8_t kHelloFds = 3;  // key table, doorbell, event ring

struct Hello {
  HelloKind kind = HelloKind::kHello;
  HelloStatus status = HelloStatus::kOk;
  std::uint8_t fd_count = 0;
  Token target{};
  Token dialer{};
  std::uint32_t pd = 0;

  bool operator==(const Hello& other) const;
};

void encode_hello(const Hello& hello, std::uint8_t* out);  // kHelloBytes
Result<Hello> decode_hello(const std::uint8_t* bytes);     // kHelloBytes
std::string to_string(HelloStatus status);

}  // namespace tensorverbs::verbs::soft
