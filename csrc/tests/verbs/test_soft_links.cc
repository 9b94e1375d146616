// The soft provider's links (TENSORVERBS_LINKS): a queue pair over TCP opens a stream per
// link both sides have, a large write is striped over all of them and lands whole, small
// ones stay on the first stream, and a link that cannot be dialed is left out with its
// reason. Loopback's 127.0.0.0/8 gives each link an address of its own.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "conformance.h"
#include "verbs/soft/soft_endpoint.h"
#include "verbs/soft/soft_provider.h"
#include "verbs/soft/soft_queue_pair.h"

namespace tensorverbs::verbs::testing {
namespace {

ConformanceParam soft_with_links(const std::string& links) {
  ConformanceParam param;
  param.name = "soft";
  param.config.provider = "soft";
  param.config.same_host = "no";  // (links are for TCP)
  param.config.links = links;
  param.open = [](const VerbsConfig& config) { return soft_provider().open(config, "127.0.0.1"); };
  return param;
}

soft::SoftQueuePair& soft_qp(Side& side) { return dynamic_cast<soft::SoftQueuePair&>(*side.qp); }

// Writes `length` bytes with an immediate from `from` into `to` at an odd offset; checks that
// the receive completes with the immediate and the length, and that the bytes (and only
// they) landed.
void write_and_check(Side& from, Side& to, std::size_t length, unsigned seed) {
  constexpr std::size_t kOffset = 4093;
  auto src = from.region(length + kOffset, kAllAccess);
  fill_random(src->data(), length + kOffset, seed);
  auto dst = to.region(length + 2 * kGuard, kAllAccess, kPoison);
  RecvWr r{77};
  ASSERT_TRUE(to.qp->post_recv(&r, 1).ok());
  SendWr w = wr(seed, WrOpcode::kRdmaWriteWithImm, src.get(), kOffset, static_cast<std::uint32_t>(length),
                dst->addr() + kGuard, dst->rkey());
  w.imm = 0xC0FFEE00u + seed;
  ASSERT_TRUE(from.qp->post_send(&w, 1).ok());
  const auto sent = from.completions(1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, WcStatus::kSuccess) << to_string(sent[0].status);
  const auto got = to.completions(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess) << to_string(got[0].status);
  EXPECT_EQ(got[0].opcode, WcOpcode::kRecvRdmaWithImm);
  EXPECT_EQ(got[0].byte_len, length);
  ASSERT_TRUE(got[0].has_imm);
  EXPECT_EQ(got[0].imm, w.imm);
  EXPECT_EQ(std::memcmp(dst->data() + kGuard, src->data() + kOffset, length), 0);
  EXPECT_TRUE(all_equal(dst->data(), kGuard, kPoison));
  EXPECT_TRUE(all_equal(dst->data() + kGuard + length, kGuard, kPoison));
}

// Every stream carried a fair share of `length` bytes (a round-robin of stripes).
void expect_spread(const std::vector<std::uint64_t>& before, const std::vector<std::uint64_t>& after,
                   std::size_t streams, std::size_t length) {
  ASSERT_EQ(after.size(), before.size());
  std::size_t carrying = 0;
  for (std::size_t i = 0; i < after.size(); ++i) {
    const std::uint64_t sent = after[i] - before[i];
    if (sent > 0) ++carrying;
    if (i < streams) {
      EXPECT_GE(sent, length / (2 * streams)) << "stream " << i;
    }
  }
  EXPECT_EQ(carrying, streams);
}

TEST(SoftLinks, ALargeWriteIsStripedOverEveryLinkAndLandsWhole) {
  Side a(soft_with_links("127.0.0.2,127.0.0.3")), b(soft_with_links("127.0.0.4,127.0.0.5"));
  ASSERT_TRUE(a.ok() && b.ok()) << a.error << b.error;
  ASSERT_TRUE(connect_pair(*a.qp, *b.qp));
  EXPECT_EQ(soft_qp(a).link_errors(), "");
  const LinkStats links = a.qp->link_stats();
  EXPECT_EQ(links.live, 2u);
  EXPECT_EQ(links.breaks + links.rejoins, 0u);
  // both directions: the side that dialed the links and the one that took them
  std::vector<Side*> sides{&a, &b};
  unsigned seed = 1;
  for (std::size_t i = 0; i < 2; ++i) {
    Side& from = *sides[i];
    Side& to = *sides[1 - i];
    for (const std::size_t length : {std::size_t{16u << 20} + 4097, std::size_t{soft::kStripeFrom}}) {
      SCOPED_TRACE(std::to_string(i) + ": " + std::to_string(length) + " bytes");
      const auto before = soft_qp(from).bytes_sent();
      write_and_check(from, to, length, seed++);
      expect_spread(before, soft_qp(from).bytes_sent(), 3, length);
    }
    const auto before = soft_qp(from).bytes_sent();  // a small write stays on the first stream
    write_and_check(from, to, 4096, seed++);
    const auto after = soft_qp(from).bytes_sent();
    EXPECT_EQ(after[0] - before[0], 4096u);
    EXPECT_EQ(after[1], before[1]);
    EXPECT_EQ(after[2], before[2]);
  }
}

// Many striped writes in flight at once, each with its immediate, complete in order.
TEST(SoftLinks, StripedWritesInFlightCompleteInOrder) {
  Side a(soft_with_links("127.0.0.2,127.0.0.3")), b(soft_with_links("127.0.0.4,127.0.0.5"));
  ASSERT_TRUE(a.ok() && b.ok()) << a.error << b.error;
  ASSERT_TRUE(connect_pair(*a.qp, *b.qp));
  constexpr std::size_t kWrites = 12, kEach = (3u << 20) + 1;
  auto src = a.region(kWrites * kEach, kAllAccess);
  fill_random(src->data(), kWrites * kEach, 9);
  auto dst = b.region(kWrites * kEach, kAllAccess, kPoison);
  std::vector<RecvWr> recvs(kWrites);
  std::vector<SendWr> writes;
  for (std::size_t i = 0; i < kWrites; ++i) {
    recvs[i].wr_id = 100 + i;
    writes.push_back(wr(i + 1, WrOpcode::kRdmaWriteWithImm, src.get(), i * kEach, kEach,
                        dst->addr() + i * kEach, dst->rkey()));
    writes.back().imm = static_cast<std::uint32_t>(i);
  }
  ASSERT_TRUE(b.qp->post_recv(recvs.data(), recvs.size()).ok());
  ASSERT_TRUE(a.qp->post_send(writes.data(), writes.size()).ok());
  const auto sent = a.completions(kWrites);
  const auto got = b.completions(kWrites);
  ASSERT_EQ(sent.size(), kWrites);
  ASSERT_EQ(got.size(), kWrites);
  for (std::size_t i = 0; i < kWrites; ++i) {
    EXPECT_EQ(sent[i].wr_id, i + 1);
    EXPECT_TRUE(sent[i].ok()) << to_string(sent[i].status);
    EXPECT_TRUE(got[i].ok()) << to_string(got[i].status);
    EXPECT_TRUE(got[i].has_imm);
    EXPECT_EQ(got[i].imm, i);
  }
  EXPECT_EQ(std::memcmp(dst->data(), src->data(), kWrites * kEach), 0);
}

// A peer with one link where this side has two: the link both have carries stripes, the
// other none.
TEST(SoftLinks, OnlyTheLinksBothSidesHaveAreUsed) {
  Side a(soft_with_links("127.0.0.2,127.0.0.3")), b(soft_with_links("127.0.0.4"));
  ASSERT_TRUE(a.ok() && b.ok()) << a.error << b.error;
  ASSERT_TRUE(connect_pair(*a.qp, *b.qp));
  const auto before = soft_qp(a).bytes_sent();
  write_and_check(a, b, 8u << 20, 5);
  const auto after = soft_qp(a).bytes_sent();
  ASSERT_EQ(after.size(), 3u);
  EXPECT_GT(after[1], before[1]);
  EXPECT_EQ(after[2], before[2]);
  write_and_check(b, a, 8u << 20, 6);
}

// A port on this host where nothing listens (bound, then closed).
std::uint16_t closed_port(const char* host) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, host, &addr.sin_addr);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// A link of the peer that cannot be reached is left out, with its reason; the others carry
// the stripes.
TEST(SoftLinks, ALinkThatCannotBeDialedIsLeftOutWithItsReason) {
  Side x(soft_with_links("127.0.0.2,127.0.0.3")), y(soft_with_links("127.0.0.4,127.0.0.5"));
  ASSERT_TRUE(x.ok() && y.ok()) << x.error << y.error;
  const soft::SoftEndpoint ex = soft::decode_endpoint(x.qp->endpoint()).take();
  soft::SoftEndpoint ey = soft::decode_endpoint(y.qp->endpoint()).take();
  // the side with the smaller token dials, links included: it is given the peer's endpoint
  // with its first link's port closed
  const bool x_dials = std::memcmp(ex.token.data(), ey.token.data(), soft::kTokenBytes) < 0;
  Side& dialer = x_dials ? x : y;
  Side& taker = x_dials ? y : x;
  soft::SoftEndpoint remote = x_dials ? ey : ex;
  remote.links[0].tcp_port = closed_port(remote.links[0].tcp_host.c_str());
  ASSERT_TRUE(taker.qp->connect(dialer.qp->endpoint()).ok());
  ASSERT_TRUE(dialer.qp->connect(soft::encode_endpoint(remote)).ok());
  const std::string why = soft_qp(dialer).link_errors();
  EXPECT_NE(why.find("link 1"), std::string::npos) << why;
  EXPECT_NE(why.find("refused"), std::string::npos) << why;
  for (Side* from : {&dialer, &taker}) {
    const auto before = soft_qp(*from).bytes_sent();
    write_and_check(*from, from == &dialer ? taker : dialer, 8u << 20, 7);
    const auto after = soft_qp(*from).bytes_sent();
    EXPECT_EQ(after[1], before[1]);
    EXPECT_GT(after[2], before[2]);
  }
}

// The connected sockets of this process whose local address is `host` (links' streams).
std::vector<int> sockets_from(const char* host) {
  std::vector<int> found;
  for (int fd = 3; fd < 4096; ++fd) {
    sockaddr_in addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0 || addr.sin_family != AF_INET) continue;
    sockaddr_in peer{};
    socklen_t peer_len = sizeof(peer);
    char text[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof(text));
    if (std::string(text) == host && ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) == 0) {
      found.push_back(fd);
    }
  }
  return found;
}

// The first of them, or -1.
int socket_from(const char* host) {
  const std::vector<int> found = sockets_from(host);
  return found.empty() ? -1 : found.front();
}

// A link that breaks while a write's stripes cross it is left out; the stripes it carried
// go again on the first stream, and the write completes, whole, once; the queue pair
// carries on over what is left, both ways.
TEST(SoftLinks, ALinkThatBreaksMidWriteIsLeftOutAndItsStripesGoAgain) {
  Side x(soft_with_links("127.0.0.2,127.0.0.3")), y(soft_with_links("127.0.0.4,127.0.0.5"));
  ASSERT_TRUE(x.ok() && y.ok()) << x.error << y.error;
  ASSERT_TRUE(connect_pair(*x.qp, *y.qp));
  // x's stream of the first link: dialed from 127.0.0.2, or taken by its listener there
  const int fd = socket_from("127.0.0.2");
  ASSERT_GE(fd, 0);
  constexpr std::size_t kLength = 64u << 20;
  auto src = x.region(kLength, kAllAccess);
  fill_random(src->data(), kLength, 11);
  auto dst = y.region(kLength, kAllAccess, kPoison);
  RecvWr r{1};
  ASSERT_TRUE(y.qp->post_recv(&r, 1).ok());
  const auto before = soft_qp(x).bytes_sent();
  SendWr w = wr(1, WrOpcode::kRdmaWriteWithImm, src.get(), 0, kLength, dst->addr(), dst->rkey());
  w.imm = 42;
  ASSERT_TRUE(x.qp->post_send(&w, 1).ok());
  // (a third of 64 MiB is more than a socket's buffers: most of it waits to be sent)
  ASSERT_EQ(::shutdown(fd, SHUT_RDWR), 0);
  const auto sent = x.completions(1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].status, WcStatus::kSuccess) << to_string(sent[0].status) << " " << x.qp->error_detail();
  const auto got = y.completions(1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess) << to_string(got[0].status);
  EXPECT_EQ(got[0].imm, 42u);
  EXPECT_EQ(std::memcmp(dst->data(), src->data(), kLength), 0);
  const auto after = soft_qp(x).bytes_sent();
  EXPECT_GT(after[0] - before[0], kLength / 3 + (1u << 20)) << "the first stream carried the stripes again";
  EXPECT_NE(soft_qp(x).link_errors().find("link 1 broke"), std::string::npos) << soft_qp(x).link_errors();
  // the queue pair carries on, both ways (link 2 carrying, link 1 too once it rejoined)
  for (Side* from : {&x, &y}) {
    const auto was = soft_qp(*from).bytes_sent();
    write_and_check(*from, from == &x ? y : x, 8u << 20, 12);
    EXPECT_GT(soft_qp(*from).bytes_sent()[2], was[2]);
  }
  EXPECT_EQ(x.qp->state(), QpState::kRts);
  EXPECT_EQ(y.qp->state(), QpState::kRts);
}

// Whether every queue pair of `qps` has `links` live links.
bool all_live(const std::vector<std::shared_ptr<QueuePair>>& qps, std::uint64_t links) {
  return std::all_of(qps.begin(), qps.end(),
                     [links](const auto& qp) { return qp->link_stats().live == links; });
}

// Writes `length` bytes from x to y, each write checked, until rejoined() says the links
// left out joined again, having been left out first (a fatal failure after 60 s).
void write_until_rejoined(Side& x, Side& y, std::size_t length, unsigned& seed,
                          const std::function<bool()>& rejoined) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  bool left_out = false;
  while (!(left_out && rejoined())) {
    left_out = left_out || !rejoined();
    ASSERT_LT(std::chrono::steady_clock::now(), deadline)
        << "links did not rejoin: " << soft_qp(x).link_errors() << " / " << soft_qp(y).link_errors();
    write_and_check(x, y, length, seed++);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// A link left out is dialed again in the background; once it answers, it rejoins and
// carries its share again, both ways. Meanwhile the queue pair carries on without it.
TEST(SoftLinks, ALinkLeftOutIsDialedAgainAndRejoins) {
  Side x(soft_with_links("127.0.0.2,127.0.0.3")), y(soft_with_links("127.0.0.4,127.0.0.5"));
  ASSERT_TRUE(x.ok() && y.ok()) << x.error << y.error;
  ASSERT_TRUE(connect_pair(*x.qp, *y.qp));
  ASSERT_EQ(x.qp->link_stats().live, 2u);
  const int fd = socket_from("127.0.0.2");
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::shutdown(fd, SHUT_RDWR), 0);
  // it is dialed again kLinkRedialFirst after it went
  unsigned seed = 30;
  write_until_rejoined(x, y, 2u << 20, seed, [&] { return all_live({x.qp, y.qp}, 2); });
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_NE((soft_qp(x).link_errors() + soft_qp(y).link_errors()).find("link 1"), std::string::npos);
  for (Side* side : {&x, &y}) {  // each side saw it go and come back
    const LinkStats links = side->qp->link_stats();
    EXPECT_EQ(links.live, 2u);
    EXPECT_GE(links.breaks, 1u);
    EXPECT_GE(links.rejoins, 1u);
  }
  for (Side* from : {&x, &y}) {
    const auto before = soft_qp(*from).bytes_sent();
    write_and_check(*from, from == &x ? y : x, 8u << 20, seed++);
    expect_spread(before, soft_qp(*from).bytes_sent(), 3, 8u << 20);
  }
  EXPECT_EQ(x.qp->state(), QpState::kRts);
  EXPECT_EQ(y.qp->state(), QpState::kRts);
}

// Queue pairs whose first links all break at once are dialed again by both sides at once
// (each dials the links of the queue pairs it dialed): one side's redials do not hold up
// the greetings of the other's, and every link rejoins.
TEST(SoftLinks, LinksDialedAgainFromBothSidesAtOnceAllRejoin) {
  Side x(soft_with_links("127.0.0.2,127.0.0.3")), y(soft_with_links("127.0.0.4,127.0.0.5"));
  ASSERT_TRUE(x.ok() && y.ok()) << x.error << y.error;
  ASSERT_TRUE(connect_pair(*x.qp, *y.qp));
  // more queue pairs on the two contexts, until each side dialed several (the side with the
  // smaller token dials)
  std::vector<std::shared_ptr<QueuePair>> xs{x.qp}, ys{y.qp};
  int dialed_by_x = 0, dialed_by_y = 0;
  while (dialed_by_x < 4 || dialed_by_y < 4) {
    ASSERT_LT(xs.size(), 64u);
    auto a = x.ctx->create_qp(x.pd, x.cq, x.cq, QpCaps{16, 16});
    auto b = y.ctx->create_qp(y.pd, y.cq, y.cq, QpCaps{16, 16});
    ASSERT_TRUE(a.ok() && b.ok());
    xs.push_back(a.take());
    ys.push_back(b.take());
    ASSERT_TRUE(connect_pair(*xs.back(), *ys.back()));
    const auto ta = soft::decode_endpoint(xs.back()->endpoint()).take().token;
    const auto tb = soft::decode_endpoint(ys.back()->endpoint()).take().token;
    ++(std::memcmp(ta.data(), tb.data(), soft::kTokenBytes) < 0 ? dialed_by_x : dialed_by_y);
  }
  std::vector<std::shared_ptr<QueuePair>> every = xs;
  every.insert(every.end(), ys.begin(), ys.end());
  ASSERT_TRUE(all_live(every, 2));
  const std::vector<int> first_links = sockets_from("127.0.0.2");
  ASSERT_EQ(first_links.size(), xs.size());
  for (int fd : first_links) ASSERT_EQ(::shutdown(fd, SHUT_RDWR), 0);
  // the sides' completion threads drive their contexts (the breaks are seen)
  unsigned seed = 50;
  write_until_rejoined(x, y, 64u << 10, seed, [&] { return all_live(every, 2); });
  if (::testing::Test::HasFatalFailure()) return;
  for (const auto* side : {&xs, &ys}) {
    for (const auto& qp : *side) EXPECT_EQ(qp->state(), QpState::kRts);
  }
}

// Runs the calling thread, and the threads it starts, on CPU 0 (so that the peers' threads
// take turns, and a stripe read early is read early); the old affinity comes back after.
class OneCpu {
 public:
  OneCpu() {
    ::sched_getaffinity(0, sizeof(old_), &old_);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(0, &one);
    ::sched_setaffinity(0, sizeof(one), &one);
  }
  ~OneCpu() { ::sched_setaffinity(0, sizeof(old_), &old_); }

 private:
  cpu_set_t old_{};
};

// Two striped writes whose ranges overlap, posted together: once both completed, the
// overlap holds the later one's bytes, as a queue pair carries its writes out in order
// (a stripe of the later one must not land before the earlier one is carried out).
TEST(SoftLinks, OverlappingStripedWritesKeepTheLaterOnesBytes) {
  OneCpu pinned;
  Side a(soft_with_links("127.0.0.2,127.0.0.3")), b(soft_with_links("127.0.0.4,127.0.0.5"));
  ASSERT_TRUE(a.ok() && b.ok()) << a.error << b.error;
  ASSERT_TRUE(connect_pair(*a.qp, *b.qp));
  constexpr std::size_t kLength = 8u << 20, kShift = soft::kStripeBytes;
  auto src = a.region(2 * kLength, kAllAccess);
  fill_random(src->data(), 2 * kLength, 1);
  auto dst = b.region(kLength + kShift, kAllAccess, kPoison);
  int torn = 0;
  for (int round = 0; round < 20; ++round) {
    SendWr w[2] = {wr(1, WrOpcode::kRdmaWrite, src.get(), 0, kLength, dst->addr(), dst->rkey()),
                   wr(2, WrOpcode::kRdmaWrite, src.get(), kLength, kLength, dst->addr() + kShift, dst->rkey())};
    ASSERT_TRUE(a.qp->post_send(w, 2).ok());
    const auto wcs = a.completions(2);
    ASSERT_EQ(wcs.size(), 2u);
    ASSERT_TRUE(wcs[0].ok() && wcs[1].ok()) << to_string(wcs[0].status) << " " << to_string(wcs[1].status);
    torn += std::memcmp(dst->data() + kShift, src->data() + kLength, kLength) != 0;
  }
  EXPECT_EQ(torn, 0) << "rounds in which the earlier write's stripes overwrote the later write's";
}

// Bytes waiting in the socket `fd`'s receive queue (FIONREAD) or send queue (TIOCOUTQ).
int queued(int fd, unsigned long request) {
  int bytes = 0;
  return ::ioctl(fd, request, &bytes) == 0 ? bytes : -1;
}

// A striped write behind many requests held for a receive (a queue pair may have
// max_send_wr of them outstanding): its stripes come far ahead of the next request to
// carry out, and wait for their turn; nothing fails.
TEST(SoftLinks, AStripedWriteFarBehindHeldRequestsWaitsItsTurn) {
  Side a(soft_with_links("127.0.0.2"), 8192, 64), b(soft_with_links("127.0.0.4"), 64, 64);
  ASSERT_TRUE(a.ok() && b.ok()) << a.error << b.error;
  ASSERT_TRUE(connect_pair(*a.qp, *b.qp));
  auto src = a.region(2u << 20, kAllAccess);
  fill_random(src->data(), 2u << 20, 4);
  auto dst = b.region(2u << 20, kAllAccess, kPoison);
  std::vector<SendWr> writes;
  writes.push_back(wr(1, WrOpcode::kSend, src.get(), 0, 8));  // held: no receive posted yet
  for (std::uint64_t i = 0; i < 5000; ++i) {
    writes.push_back(wr(2 + i, WrOpcode::kRdmaWrite, nullptr, 0, 0, dst->addr(), dst->rkey()));
  }
  writes.push_back(wr(9999, WrOpcode::kRdmaWrite, src.get(), 0, 2u << 20, dst->addr(), dst->rkey()));
  ASSERT_TRUE(a.qp->post_send(writes.data(), writes.size()).ok());
  // until b has read what came on the link (its stripes): nothing queued at either end
  const int a_link = socket_from("127.0.0.2"), b_link = socket_from("127.0.0.4");
  ASSERT_GE(a_link, 0) << soft_qp(a).link_errors() << " / " << soft_qp(b).link_errors();
  ASSERT_GE(b_link, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (queued(a_link, TIOCOUTQ) != 0 || queued(b_link, FIONREAD) != 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the stripes did not arrive";
    std::this_thread::yield();
  }
  EXPECT_EQ(b.qp->state(), QpState::kRts) << b.qp->error_detail();
  auto rbuf = b.region(64, kAllAccess);
  RecvWr r{5};
  r.sge = rbuf->sge(0, 64);
  ASSERT_TRUE(b.qp->post_recv(&r, 1).ok());
  const auto wcs = a.completions(writes.size(), 30.0);
  ASSERT_EQ(wcs.size(), writes.size());
  EXPECT_TRUE(wcs.back().ok()) << to_string(wcs.back().status) << " / " << a.qp->error_detail()
                               << " / b: " << b.qp->error_detail();
  EXPECT_EQ(std::memcmp(dst->data(), src->data(), 2u << 20), 0);
}

// A striped write into memory the peer may not write is refused as a plain one is: the
// requester's completion says so, and nothing lands.
TEST(SoftLinks, AStripedWriteOutsideTheRegionIsRefused) {
  Side a(soft_with_links("127.0.0.2")), b(soft_with_links("127.0.0.4"));
  ASSERT_TRUE(a.ok() && b.ok()) << a.error << b.error;
  ASSERT_TRUE(connect_pair(*a.qp, *b.qp));
  constexpr std::size_t kLength = 4u << 20;
  auto src = a.region(kLength, kAllAccess, 3);
  auto dst = b.region(kLength / 2, kAllAccess, kPoison);  // half of what is written
  SendWr w = wr(1, WrOpcode::kRdmaWrite, src.get(), 0, kLength, dst->addr(), dst->rkey());
  ASSERT_TRUE(a.qp->post_send(&w, 1).ok());
  const auto wcs = a.completions(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr) << to_string(wcs[0].status);
  EXPECT_NE(a.qp->error_detail().find("refused"), std::string::npos) << a.qp->error_detail();
  EXPECT_TRUE(all_equal(dst->data(), kLength / 2, kPoison)) << "stripes inside the region landed";
}

TEST(SoftLinks, AnAddressThatCannotBeListenedOnIsAClearError) {
  VerbsConfig config;
  config.provider = "soft";
  config.links = "127.0.0.2,192.0.2.77";  // (TEST-NET-1: not an address of this host)
  auto refused = soft_provider().open(config, "127.0.0.1");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("TENSORVERBS_LINKS: cannot listen on link 2 (192.0.2.77)"),
            std::string::npos)
      << refused.status().message();
}

// Posts `count` writes of 8 MiB from `a` into one region of `b` at once; how many failed
// (every one completes, or this fails the test).
int writes_failed(Side& a, Side& b, std::size_t count) {
  constexpr std::size_t kEach = 8u << 20;
  auto src = a.region(kEach, kAllAccess);
  fill_random(src->data(), kEach, 3);
  auto dst = b.region(kEach, kAllAccess, kPoison);
  std::vector<SendWr> writes;
  for (std::size_t i = 0; i < count; ++i) {
    writes.push_back(wr(i + 1, WrOpcode::kRdmaWrite, src.get(), 0, kEach, dst->addr(), dst->rkey()));
  }
  EXPECT_TRUE(a.qp->post_send(writes.data(), writes.size()).ok());
  const auto wcs = a.completions(count, 120.0);
  EXPECT_EQ(wcs.size(), count);
  int failed = static_cast<int>(count - wcs.size());
  for (const auto& wc : wcs) failed += !wc.ok();
  if (failed > 0) ADD_FAILURE() << "a: " << a.qp->error_detail() << " / b: " << b.qp->error_detail();
  return failed;
}

// A link slower than the first stream (paced at 40 MiB/s) while 640 MiB of writes are
// posted: the writes wait for it, and none fails (the requester keeps what it has in flight
// within the peer's budget for stripes that come early and requests held behind a write).
TEST(SoftLinks, ASlowLinkHoldsWritesBackWithoutFailingThem) {
  Side a(soft_with_links("127.0.0.2"), 256, 64), b(soft_with_links("127.0.0.4"), 64, 64);
  ASSERT_TRUE(a.ok() && b.ok()) << a.error << b.error;
  ASSERT_TRUE(connect_pair(*a.qp, *b.qp));
  const int a_link = socket_from("127.0.0.2");
  ASSERT_GE(a_link, 0);
  unsigned rate = 40u << 20;
  ASSERT_EQ(::setsockopt(a_link, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate)), 0);
  EXPECT_EQ(writes_failed(a, b, 80), 0);
}

// Many striped writes posted at once over links of one speed all complete.
TEST(SoftLinks, ManyStripedWritesInFlightAllComplete) {
  Side a(soft_with_links("127.0.0.2,127.0.0.3"), 256, 64), b(soft_with_links("127.0.0.4,127.0.0.5"), 64, 64);
  ASSERT_TRUE(a.ok() && b.ok()) << a.error << b.error;
  ASSERT_TRUE(connect_pair(*a.qp, *b.qp));
  EXPECT_EQ(writes_failed(a, b, 120), 0);
}

}  // namespace
}  // namespace tensorverbs::verbs::testing
