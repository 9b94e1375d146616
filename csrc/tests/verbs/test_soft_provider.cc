// What only the soft provider promises: its device, configuration, same-host choice on its
// own evidence, the shared-memory path needing no progress at the target, doorbells, the
// uid check, and no CPU use at idle.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <thread>

#include "conformance.h"
#include "verbs/soft/doorbell.h"
#include "verbs/soft/held_requests.h"
#include "verbs/soft/soft_context.h"
#include "verbs/soft/soft_endpoint.h"
#include "verbs/soft/soft_provider.h"
#include "verbs/soft/wire.h"

namespace tensorverbs::verbs::testing {
namespace {

ConformanceParam soft(const std::string& same_host) {
  ConformanceParam param;
  param.name = "soft";
  param.config.provider = "soft";
  param.config.same_host = same_host;
  param.open = [](const VerbsConfig& config) { return soft_provider().open(config, "127.0.0.1"); };
  return param;
}

struct Pair {
  explicit Pair(const std::string& same_a, const std::string& same_b = "")
      : a(soft(same_a)), b(soft(same_b.empty() ? same_a : same_b)) {}
  Side a, b;
};

std::uint64_t thread_cpu_us() {
  rusage usage{};
  getrusage(RUSAGE_THREAD, &usage);
  return static_cast<std::uint64_t>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000u +
         static_cast<std::uint64_t>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
}

// The CPU time (us) of this thread in a 1-second wait on `cq` that finds nothing.
std::uint64_t idle_wait_cpu_us(CompletionQueue& cq) {
  WorkCompletion wc;
  const std::uint64_t start = thread_cpu_us();
  EXPECT_EQ(cq.wait(&wc, 1, 1000), 0);
  return thread_cpu_us() - start;
}

TEST(SoftProvider, OneActiveDeviceAndItsConfiguration) {
  const Provider& provider = soft_provider();
  EXPECT_STREQ(provider.name(), "soft");
  EXPECT_TRUE(provider.availability().available);
  auto devices = provider.devices();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].name, "soft0");
  ASSERT_EQ(devices[0].ports.size(), 1u);
  EXPECT_EQ(devices[0].ports[0].state, "ACTIVE");
  EXPECT_EQ(devices[0].ports[0].active_mtu, 4096);
  VerbsConfig config;
  config.device = "rxe0";
  auto refused = provider.open(config, "127.0.0.1");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kNotFound);
  config = VerbsConfig{};
  config.same_host = "maybe";
  refused = provider.open(config, "127.0.0.1");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("TENSORVERBS_SAME_HOST"), std::string::npos);
}

TEST(SoftProvider, RegistrationRules) {
  Side side(soft("auto"));
  ASSERT_TRUE(side.ok());
  auto bad = side.pd->allocate_memory(64, kRemoteWrite);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("LOCAL_WRITE"), std::string::npos);
  char buf[9] = "readonly";
  auto mr = side.pd->register_memory(buf, 8, kRemoteRead);
  ASSERT_TRUE(mr.ok());
  EXPECT_EQ(mr.value()->length(), 8u);
  EXPECT_NE(mr.value()->rkey(), 0u);
}

TEST(SoftProvider, EndpointOfAnotherProviderOrMalformedIsRefused) {
  Side side(soft("auto"));
  ASSERT_TRUE(side.ok());
  Status s = side.qp->connect("TVIB" + std::string(40, '\0'));
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("another provider"), std::string::npos) << s.message();
  s = side.qp->connect("TVSE");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("malformed"), std::string::npos);
  EXPECT_EQ(side.qp->state(), QpState::kInit);
}

TEST(SoftProvider, AnUnreachablePeerIsUnavailableAndNamesItsAddress) {
  std::string endpoint;
  {
    Side gone(soft("no"));
    ASSERT_TRUE(gone.ok());
    endpoint = gone.qp->endpoint();
  }  // its listener is gone
  endpoint.replace(16, 16, std::string(16, '\xFF'));  // so that this side dials
  Side side(soft("no"));
  ASSERT_TRUE(side.ok());
  const Status s = side.qp->connect(endpoint);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("127.0.0.1:"), std::string::npos) << s.message();
  EXPECT_EQ(side.qp->state(), QpState::kInit);
}

// On one host, a write lands by the requester's copy: the target needs no progress.
TEST(SoftProvider, SharedMemoryWritesNeedNoProgressAtTheTarget) {
  for (const std::string same_host : {"auto", "no"}) {
    SCOPED_TRACE(same_host);
    Pair p(same_host);
    ASSERT_TRUE(p.a.ok() && p.b.ok());
    ASSERT_TRUE(connect_pair(*p.a.qp, *p.b.qp));
    auto src = p.a.region(4096, kAllAccess, 0x5A);
    auto dst = p.b.region(4096);
    SendWr w;
    w.wr_id = 1;
    w.opcode = WrOpcode::kRdmaWrite;
    w.sge = src->sge(0, 4096);
    w.remote_addr = dst->addr();
    w.rkey = dst->rkey();
    ASSERT_TRUE(p.a.qp->post_send(&w, 1).ok());  // the first maps the segment (both progress)
    ASSERT_EQ(p.a.completions(1).size(), 1u);
    p.b.stop();  // from now on nobody drives the target
    ASSERT_TRUE(p.a.qp->post_send(&w, 1).ok());
    const auto wcs = p.a.completions(1, 0.5);
    if (same_host == "auto") {
      ASSERT_EQ(wcs.size(), 1u);
      EXPECT_TRUE(wcs[0].ok());
    } else {
      EXPECT_TRUE(wcs.empty()) << "over TCP the target's progress sends the ACK";
    }
  }
}

// A peer that sends more bytes ahead of the receives posted than a queue pair holds for
// them (kMaxHeldBytes) is told why: the send past the bound fails with a remote operation
// error naming it, not only with the connection cut.
TEST(SoftProvider, APeerSendingPastTheBytesHeldForReceivesIsToldWhy) {
  Pair p("no");
  ASSERT_TRUE(p.a.ok() && p.b.ok());
  ASSERT_TRUE(connect_pair(*p.a.qp, *p.b.qp));
  constexpr std::size_t kEach = 32u << 20;
  constexpr std::size_t kSends = soft::kMaxHeldBytes / kEach + 1;  // the last one past the bound
  auto src = p.a.region(kEach, kAllAccess, 7);
  std::vector<SendWr> sends;
  for (std::size_t i = 0; i < kSends; ++i) sends.push_back(wr(i + 1, WrOpcode::kSend, src.get(), 0, kEach));
  ASSERT_TRUE(p.a.qp->post_send(sends.data(), sends.size()).ok());
  const auto wcs = p.a.completions(kSends, 60);
  ASSERT_FALSE(wcs.empty());
  const bool refused = std::any_of(wcs.begin(), wcs.end(), [](const WorkCompletion& wc) {
    return wc.status == WcStatus::kRemOpErr;
  });
  EXPECT_TRUE(refused) << "first failure: " << to_string(wcs.back().status);
  EXPECT_NE(p.a.qp->error_detail().find("MiB ahead of the receives posted"), std::string::npos)
      << p.a.qp->error_detail();
}

// A refusal ends the connection, but what the peer did before it stays done: a write it
// acknowledged on the refusal (an ACK owed rides on the NAK) completes successfully.
TEST(SoftProvider, ARequestBeforeARefusedOneCompletesAsDone) {
  Pair p("no");
  ASSERT_TRUE(p.a.ok() && p.b.ok());
  ASSERT_TRUE(connect_pair(*p.a.qp, *p.b.qp));
  auto src = p.a.region(4096, kAllAccess, 3);
  auto dst = p.b.region(4096);
  SendWr writes[2] = {wr(1, WrOpcode::kRdmaWrite, src.get(), 0, 4096, dst->addr(), dst->rkey()),
                      wr(2, WrOpcode::kRdmaWrite, src.get(), 0, 4096, dst->addr(), dst->rkey() ^ 0x5A5Au)};
  ASSERT_TRUE(p.a.qp->post_send(writes, 2).ok());
  const auto wcs = p.a.completions(2);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess) << to_string(wcs[0].status);
  EXPECT_EQ(wcs[1].status, WcStatus::kRemAccessErr) << to_string(wcs[1].status);
  EXPECT_EQ(dst->data()[100], src->data()[100]);  // the first write landed
}

TEST(SoftProvider, SameHostYesWithAPeerThatRefusesIsAnError) {
  Side a(soft("yes")), b(soft("no"));
  ASSERT_TRUE(a.ok() && b.ok());
  // make the "yes" side the dialer
  std::string eb = b.qp->endpoint();
  eb.replace(16, 16, std::string(16, '\xFF'));
  const Status s = a.qp->connect(eb);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("TENSORVERBS_SAME_HOST=yes"), std::string::npos) << s.message();
}

TEST(SoftProvider, AMixedPairFallsBackToTcp) {
  Pair p("auto", "no");
  ASSERT_TRUE(p.a.ok() && p.b.ok());
  ASSERT_TRUE(connect_pair(*p.a.qp, *p.b.qp));
  auto src = p.a.region(1 << 20, kAllAccess, 1);
  auto dst = p.b.region(1 << 20);
  RecvWr r{5};
  ASSERT_TRUE(p.b.qp->post_recv(&r, 1).ok());
  SendWr w;
  w.opcode = WrOpcode::kRdmaWriteWithImm;
  w.sge = src->sge(0, 1 << 20);
  w.remote_addr = dst->addr();
  w.rkey = dst->rkey();
  ASSERT_TRUE(p.a.qp->post_send(&w, 1).ok());
  ASSERT_EQ(p.b.completions(1).size(), 1u);
  EXPECT_EQ(dst->data()[12345], 1);
}

// A sleeping target is woken through its doorbell; a spinning (polling) one costs no
// system call at all. A write rings (doorbell_writes() counts it) only where it publishes
// its immediate in the target's event ring, i.e. takes shared memory: the segment mapped,
// and no request of its queue pair still waiting for its ACK on the stream (else it goes
// behind them on the stream, whose socket wakes the target), and only if the target's
// `waiting` flag is set then: its driver spun and sleeps (or is about to) until woken.
TEST(SoftProvider, DoorbellsRingOnlyForSleepers) {
  Pair p("auto");
  ASSERT_TRUE(p.a.ok() && p.b.ok());
  ASSERT_TRUE(connect_pair(*p.a.qp, *p.b.qp));
  auto* target = dynamic_cast<soft::SoftContext*>(p.b.ctx.get());
  ASSERT_NE(target, nullptr);
  const std::atomic<std::uint32_t>& waiting = target->keys().header().waiting;
  auto src = p.a.region(64, kAllAccess, 3);
  auto dst = p.b.region(64);
  SendWr w;
  w.opcode = WrOpcode::kRdmaWriteWithImm;
  w.sge = src->sge(0, 64);
  w.remote_addr = dst->addr();
  w.rkey = dst->rkey();
  RecvWr r{1};
  ASSERT_TRUE(p.b.qp->post_recv(&r, 1).ok());
  ASSERT_TRUE(p.a.qp->post_send(&w, 1).ok());  // by the stream: it maps the segment
  ASSERT_EQ(p.b.completions(1).size(), 1u);
  // its ACK came (after the segment): the next writes take shared memory, done at once
  ASSERT_EQ(p.a.completions(1).size(), 1u);
  w.signaled = false;

  // b's collector wakes every 100 ms (its wait's timeout) and spins again: from now on
  // this thread is b's only waiter, sleeping with a deadline far off
  p.b.stop();
  ASSERT_TRUE(p.b.qp->post_recv(&r, 1).ok());
  std::uint64_t rung = 0;
  std::thread writer([&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (waiting.load() == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::yield();
    }
    ASSERT_EQ(waiting.load(), 1u) << "b's driver never slept";
    const std::uint64_t before = soft::doorbell_writes();
    ASSERT_TRUE(p.a.qp->post_send(&w, 1).ok());
    rung = soft::doorbell_writes() - before;
    EXPECT_EQ(p.a.qp->send_room(), 64u) << "the write waits for an ACK: it took the stream";
  });
  WorkCompletion wc;
  const int woken = p.b.cq->wait(&wc, 1, 20000);  // b sleeps until the doorbell wakes it
  writer.join();
  ASSERT_EQ(woken, 1) << "the write's completion never came";
  EXPECT_TRUE(wc.ok());
  EXPECT_EQ(rung, 1u);

  // now a thread polls b's queue without ever sleeping: b's flag stays clear
  auto cq = p.b.cq;
  std::atomic<bool> stop{false};
  std::atomic<int> got{0};
  std::thread spinner([&] {
    WorkCompletion wcs[8];
    while (!stop.load()) got += cq->poll(wcs, 8);
  });
  const std::uint64_t spinning = soft::doorbell_writes();
  for (int i = 0; i < 16; ++i) {  // (no ASSERT while the spinner runs: it must be joined)
    const Status received = p.b.qp->post_recv(&r, 1);
    const Status posted = received.ok() ? p.a.qp->post_send(&w, 1) : received;
    EXPECT_TRUE(posted.ok()) << posted.message();
    if (!posted.ok()) break;
    EXPECT_EQ(p.a.qp->send_room(), 64u) << "the write waits for an ACK: it took the stream";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (got.load() <= i && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
  }
  stop = true;
  spinner.join();
  EXPECT_EQ(got.load(), 16);
  EXPECT_EQ(soft::doorbell_writes(), spinning);
}

TEST(SoftProvider, AnIdleWaitUsesNoCpu) {
  Pair p("auto");
  ASSERT_TRUE(p.a.ok() && p.b.ok());
  ASSERT_TRUE(connect_pair(*p.a.qp, *p.b.qp));
  auto cq = p.a.ctx->create_cq(4);
  ASSERT_TRUE(cq.ok());
  const std::uint64_t used = idle_wait_cpu_us(*cq.value());
  EXPECT_LT(used, 50000u) << "a 1-second idle wait used " << used << " us of CPU";
}

// A queue pair whose peer sent it a request and then closed the stream owes an ACK it can no
// longer send: in the error state that is no work for the driver, which sleeps. (It spun:
// the ACK's timer, armed as the stream ended, kept the context's memory "ready".)
TEST(SoftProvider, AnIdleWaitAfterThePeerSentAndClosedUsesNoCpu) {
  Pair p("no");
  ASSERT_TRUE(p.a.ok() && p.b.ok());
  ASSERT_TRUE(connect_pair(*p.a.qp, *p.b.qp));
  auto src = p.a.region(4096, kAllAccess, 0x5A);
  auto dst = p.b.region(4096);
  p.b.stop();  // b's socket now holds what a sends, until the wait below reads it
  p.b.cq->wake();
  SendWr w = wr(1, WrOpcode::kRdmaWrite, src.get(), 0, 4096, dst->addr(), dst->rkey());
  ASSERT_TRUE(p.a.qp->post_send(&w, 1).ok());  // over TCP: on the stream as it is posted
  p.a.qp->to_error("a is done");
  WorkCompletion wc;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (p.b.qp->state() != QpState::kError && std::chrono::steady_clock::now() < deadline) {
    p.b.cq->wait(&wc, 1, 100);  // (b's wait reads the write, then the end of the stream)
  }
  ASSERT_EQ(p.b.qp->state(), QpState::kError);
  const std::uint64_t used = idle_wait_cpu_us(*p.b.cq);
  EXPECT_EQ(std::memcmp(dst->data(), src->data(), 4096), 0);
  EXPECT_LT(used, 50000u) << "a 1-second idle wait used " << used << " us of CPU";
}

// Run as root: a process of another user that dials the Unix socket is refused.
TEST(SoftProvider, AnotherUserGetsNoSharedMemory) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to run a child as another user)";
  Side side(soft("auto"));
  ASSERT_TRUE(side.ok());
  std::string endpoint = side.qp->endpoint();
  auto decoded = soft::decode_endpoint(endpoint);
  ASSERT_TRUE(decoded.ok());
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path + 1, decoded.value().unix_name.data(), decoded.value().unix_name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + decoded.value().unix_name.size());
  soft::Hello hello;
  hello.target = decoded.value().token;
  std::uint8_t bytes[soft::kHelloBytes];
  soft::encode_hello(hello, bytes);
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {  // only async-signal-safe calls from here on
    std::uint8_t status = 0xFF;
    if (::setgid(65534) == 0 && ::setuid(65534) == 0) {
      const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
      std::uint8_t reply[soft::kHelloBytes];
      // the listener answers another user without reading its greeting, and closes: the
      // greeting may find the socket closed (EPIPE, no SIGPIPE), the answer is there still
      if (s >= 0 && ::connect(s, reinterpret_cast<sockaddr*>(&addr), len) == 0) {
        (void)::send(s, bytes, sizeof(bytes), MSG_NOSIGNAL);
        std::size_t got = 0;
        while (got < sizeof(reply)) {
          const ssize_t n = ::read(s, reply + got, sizeof(reply) - got);
          if (n <= 0) break;
          got += static_cast<std::size_t>(n);
        }
        if (got == sizeof(reply)) status = reply[6];
      }
    }
    const bool told = ::write(fds[1], &status, 1) == 1;
    ::_exit(told ? 0 : 1);
  }
  ::close(fds[1]);
  std::uint8_t status = 0xEE;
  EXPECT_EQ(::read(fds[0], &status, 1), 1);
  ::close(fds[0]);
  int wstatus = 0;
  ::waitpid(child, &wstatus, 0);
  EXPECT_EQ(status, static_cast<std::uint8_t>(soft::HelloStatus::kNotSameHost));
  EXPECT_EQ(side.qp->state(), QpState::kInit);
}

}  // namespace
}  // namespace tensorverbs::verbs::testing
