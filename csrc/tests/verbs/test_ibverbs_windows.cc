// Memory windows on a real verbs stack: a peer given a window reaches only that range, only
// through the queue pair it was bound on (type 2), only until it is revoked; and what a
// window costs per bind + revoke, for each method (printed).
#include <gtest/gtest.h>

#if TENSORVERBS_HAVE_IBVERBS

#include <chrono>
#include <cstring>
#include <vector>

#include "ibverbs_fixture.h"
#include "verbs/ibverbs/ib_context.h"
#include "verbs/ibverbs/ib_path.h"
#include "verbs/ibverbs/ib_protection_domain.h"

namespace tensorverbs::verbs::testing {
namespace {

constexpr std::uint32_t kAll = kLocalWrite | kRemoteWrite | kRemoteRead;
constexpr std::uint32_t kRemote = kRemoteWrite | kRemoteRead;

std::unique_ptr<MemoryRegion> allocate(ProtectionDomain& pd, std::size_t n, std::uint32_t access) {
  Result<std::unique_ptr<MemoryRegion>> mr = pd.allocate_memory(n, access);
  EXPECT_TRUE(mr.ok()) << mr.status().message();
  return mr.ok() ? mr.take() : nullptr;
}

// One RDMA write of `len` bytes from `src` to (addr, rkey) by `from`; its completion status.
WcStatus write_to(End& from, const MemoryRegion& src, std::uint32_t len, std::uint64_t addr,
                  std::uint32_t rkey) {
  SendWr wr;
  wr.wr_id = 77;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.sge = src.sge(0, len);
  wr.remote_addr = addr;
  wr.rkey = rkey;
  const Status posted = from.qp->post_send(&wr, 1);
  EXPECT_TRUE(posted.ok()) << posted.message();
  auto got = wait_for(*from.cq, 1);
  return got.empty() ? WcStatus::kGeneralErr : got[0].status;
}

// A signaled request on `end`'s queue pair, waited for: everything posted before it (a
// window's bind) has run. The peer lands it in `sink`.
void fence(End& end, const MemoryRegion& local, const MemoryRegion& sink) {
  EXPECT_EQ(write_to(end, local, 0, sink.addr(), sink.rkey()), WcStatus::kSuccess);
}

// Polls `cq` (completions of the provider's own requests are unseen) until `w` quiesced.
bool quiesce(MemoryWindow& w, CompletionQueue& cq) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  WorkCompletion wc[8];
  while (!w.quiesced()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    EXPECT_EQ(cq.poll(wc, 8), 0);
  }
  return true;
}

class IbverbsWindows : public IbverbsPair {
 protected:
  void SetUp() override {
    IbverbsPair::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    pool_ = allocate(*b_.pd, 1 << 20, kLocalWrite);  // no remote access of its own
    src_ = allocate(*a_.pd, 1 << 20, kAll);
    sink_ = allocate(*a_.pd, 64, kAll);
    local_ = allocate(*b_.pd, 64, kAll);
    for (std::size_t i = 0; i < src_->length(); ++i) src_->data()[i] = static_cast<std::uint8_t>(i);
  }
  std::unique_ptr<MemoryRegion> pool_, src_, sink_, local_;
};

TEST_F(IbverbsWindows, TheRegionItselfIsOutOfReach) {
  EXPECT_EQ(write_to(a_, *src_, 64, pool_->addr(), pool_->rkey()), WcStatus::kRemAccessErr);
}

// Queue-pair windows of each kind: type 2 memory windows, and registrations of the range
// (what QueuePair::bind_window falls back to, and takes on soft-RoCE).
class IbverbsQpWindows : public IbverbsWindows,
                         public ::testing::WithParamInterface<ibverbs::WindowKind> {
 protected:
  void SetUp() override {
    IbverbsWindows::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    auto* ctx = dynamic_cast<ibverbs::IbContext*>(b_.ctx.get());
    ASSERT_NE(ctx, nullptr);
    ctx->set_window_kind(GetParam());
    if (GetParam() == ibverbs::WindowKind::kType2 && !ctx->type2_windows()) {
      GTEST_SKIP() << second() << " has no type 2 memory windows";
    }
    rxe_ = ctx->caps().is_rxe;
  }
  bool type2() const { return GetParam() == ibverbs::WindowKind::kType2; }
  bool rxe_ = false;
};

TEST_P(IbverbsQpWindows, ReachesTheRangeUntilRevokedAfterUse) {
  Result<std::unique_ptr<MemoryWindow>> w =
      b_.qp->bind_window(*pool_, pool_->addr() + 8192, 4096, kRemote);
  ASSERT_TRUE(w.ok()) << w.status().message();
  MemoryWindow& window = *w.value();
  EXPECT_EQ(window.addr(), pool_->addr() + 8192);
  EXPECT_EQ(window.length(), 4096u);
  EXPECT_NE(window.rkey(), pool_->rkey());
  fence(b_, *local_, *sink_);  // as the request carrying the rkey would
  EXPECT_EQ(write_to(a_, *src_, 4096, window.addr(), window.rkey()), WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(pool_->data() + 8192, src_->data(), 4096), 0);
  EXPECT_EQ(pool_->data()[8191], 0);
  EXPECT_EQ(pool_->data()[8192 + 4096], 0);
  EXPECT_TRUE(window.revoke());  // the bind has run: done before revoke() returns
  EXPECT_TRUE(window.quiesced());
  EXPECT_EQ(write_to(a_, *src_, 64, window.addr(), window.rkey()), WcStatus::kRemAccessErr);
}

TEST_P(IbverbsQpWindows, RevokedBeforeUseQuiescesOnceTheInvalidationRan) {
  Result<std::unique_ptr<MemoryWindow>> w =
      b_.qp->bind_window(*pool_, pool_->addr(), 4096, kRemote);
  ASSERT_TRUE(w.ok()) << w.status().message();
  const bool at_once = w.value()->revoke();
  EXPECT_EQ(at_once, !type2());  // type 2: an invalidation queued behind the bind
  EXPECT_TRUE(at_once || quiesce(*w.value(), *b_.cq));
  // the pooled window binds again, under a new key
  Result<std::unique_ptr<MemoryWindow>> again =
      b_.qp->bind_window(*pool_, pool_->addr(), 4096, kRemote);
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_NE(again.value()->rkey(), w.value()->rkey());
  fence(b_, *local_, *sink_);
  EXPECT_EQ(write_to(a_, *src_, 64, again.value()->addr(), again.value()->rkey()),
            WcStatus::kSuccess);
  // last: a remote access error takes both queue pairs to the error state
  EXPECT_EQ(write_to(a_, *src_, 64, w.value()->addr(), w.value()->rkey()),
            WcStatus::kRemAccessErr);
}

TEST_P(IbverbsQpWindows, RefusesAccessOutsideItsRange) {
  if (type2() && rxe_) {
    GTEST_SKIP() << "soft-RoCE does not enforce a type 2 window's bounds (its responder checks "
                    "an access against the window's region): QueuePair::bind_window registers "
                    "the range there instead";
  }
  Result<std::unique_ptr<MemoryWindow>> w =
      b_.qp->bind_window(*pool_, pool_->addr() + 8192, 4096, kRemoteWrite);
  ASSERT_TRUE(w.ok()) << w.status().message();
  fence(b_, *local_, *sink_);
  EXPECT_EQ(write_to(a_, *src_, 64, w.value()->addr() + 4096 - 32, w.value()->rkey()),
            WcStatus::kRemAccessErr);
  EXPECT_EQ(pool_->data()[8192 + 4096 - 32], 0);
}

TEST_P(IbverbsQpWindows, RefusesReadsItDoesNotAllow) {
  Result<std::unique_ptr<MemoryWindow>> w =
      b_.qp->bind_window(*pool_, pool_->addr(), 4096, kRemoteWrite);
  ASSERT_TRUE(w.ok()) << w.status().message();
  fence(b_, *local_, *sink_);
  SendWr read;
  read.opcode = WrOpcode::kRdmaRead;
  read.sge = src_->sge(0, 64);
  read.remote_addr = w.value()->addr();
  read.rkey = w.value()->rkey();
  ASSERT_TRUE(a_.qp->post_send(&read, 1).ok());
  auto got = wait_for(*a_.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, WcStatus::kRemAccessErr);
}

TEST_P(IbverbsQpWindows, Type2IsOnlyForThatQueuePairsPeer) {
  if (!type2()) GTEST_SKIP() << "a registration of the range serves the whole protection domain";
  End c = open_end(config_for(first()));
  Result<std::shared_ptr<QueuePair>> other = b_.ctx->create_qp(b_.pd, b_.cq, b_.cq, {16, 16});
  ASSERT_TRUE(c.qp && other.ok());
  ASSERT_TRUE(c.qp->connect(other.value()->endpoint()).ok());
  ASSERT_TRUE(other.value()->connect(c.qp->endpoint()).ok());
  Result<std::unique_ptr<MemoryWindow>> w =
      b_.qp->bind_window(*pool_, pool_->addr(), 4096, kRemoteWrite);
  ASSERT_TRUE(w.ok()) << w.status().message();
  fence(b_, *local_, *sink_);
  auto c_src = allocate(*c.pd, 64, kAll);
  // the same protection domain, another queue pair: the type 2 window lets it not through
  EXPECT_EQ(write_to(c, *c_src, 64, w.value()->addr(), w.value()->rkey()),
            WcStatus::kRemAccessErr);
  EXPECT_EQ(write_to(a_, *src_, 64, w.value()->addr(), w.value()->rkey()), WcStatus::kSuccess);
}

TEST_P(IbverbsQpWindows, WindowsOnAnErroredQueuePairAreRevokedAtOnce) {
  Result<std::unique_ptr<MemoryWindow>> w =
      b_.qp->bind_window(*pool_, pool_->addr(), 4096, kRemote);
  ASSERT_TRUE(w.ok()) << w.status().message();
  Result<std::unique_ptr<MemoryWindow>> unused =
      b_.qp->bind_window(*pool_, pool_->addr(), 64, kRemote);
  ASSERT_TRUE(unused.ok()) << unused.status().message();
  b_.qp->to_error("test");
  EXPECT_TRUE(w.value()->revoke());
  EXPECT_TRUE(unused.value()->revoke());
  w.value().reset();
  unused.value().reset();
  pool_.reset();  // deregisters: no window holds it any more
}

INSTANTIATE_TEST_SUITE_P(Kinds, IbverbsQpWindows,
                         ::testing::Values(ibverbs::WindowKind::kType2,
                                           ibverbs::WindowKind::kRegistration),
                         [](const ::testing::TestParamInfo<ibverbs::WindowKind>& kind) {
                           return kind.param == ibverbs::WindowKind::kType2 ? "Type2"
                                                                            : "Registration";
                         });

// A type 2 window is bound again and again (revoked before use, it goes back to its queue
// pair's pool): the key byte of each bind is drawn, not the last one plus one, so a peer
// that saw one key cannot name the next.
TEST_F(IbverbsWindows, Type2KeysAreDrawnNotCounted) {
  auto* ctx = dynamic_cast<ibverbs::IbContext*>(b_.ctx.get());
  ASSERT_NE(ctx, nullptr);
  ctx->set_window_kind(ibverbs::WindowKind::kType2);
  if (!ctx->type2_windows()) GTEST_SKIP() << second() << " has no type 2 memory windows";
  std::vector<std::uint32_t> keys;
  for (int i = 0; i < 32; ++i) {
    Result<std::unique_ptr<MemoryWindow>> w =
        b_.qp->bind_window(*pool_, pool_->addr(), 4096, kRemote);
    ASSERT_TRUE(w.ok()) << w.status().message();
    keys.push_back(w.value()->rkey());
    ASSERT_TRUE(w.value()->revoke() || quiesce(*w.value(), *b_.cq));
  }
  int counted = 0;  // keys whose byte is the one before plus one (as ibv_inc_rkey makes them)
  for (std::size_t i = 1; i < keys.size(); ++i) {
    EXPECT_NE(keys[i], keys[i - 1]);
    if ((keys[i] & 0xFF) == ((keys[i - 1] + 1) & 0xFF)) ++counted;
  }
  EXPECT_LT(counted, 8) << "of 31 binds";
}

TEST_F(IbverbsWindows, QueuePairWindowsReachOnlyTheirRangeByDefault) {
  Result<std::unique_ptr<MemoryWindow>> w =
      b_.qp->bind_window(*pool_, pool_->addr() + 8192, 4096, kRemoteWrite);
  ASSERT_TRUE(w.ok()) << w.status().message();
  fence(b_, *local_, *sink_);
  EXPECT_EQ(write_to(a_, *src_, 64, w.value()->addr() + 4096 - 32, w.value()->rkey()),
            WcStatus::kRemAccessErr);
}

TEST_F(IbverbsWindows, RegionWindowReachesTheRangeUntilRevoked) {
  Result<std::unique_ptr<MemoryWindow>> w =
      b_.pd->bind_window(*pool_, pool_->addr() + 4096, 8192, kRemote);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(write_to(a_, *src_, 8192, w.value()->addr(), w.value()->rkey()), WcStatus::kSuccess);
  EXPECT_EQ(std::memcmp(pool_->data() + 4096, src_->data(), 8192), 0);
  EXPECT_TRUE(w.value()->revoke());  // deregistered before it returns
  EXPECT_TRUE(w.value()->quiesced());
  EXPECT_EQ(write_to(a_, *src_, 64, w.value()->addr(), w.value()->rkey()),
            WcStatus::kRemAccessErr);
}

TEST_F(IbverbsWindows, RegionWindowRefusesAccessOutsideItsRange) {
  Result<std::unique_ptr<MemoryWindow>> w =
      b_.pd->bind_window(*pool_, pool_->addr() + 4096, 4096, kRemoteWrite);
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(write_to(a_, *src_, 64, w.value()->addr() + 4096 - 8, w.value()->rkey()),
            WcStatus::kRemAccessErr);
}

TEST_F(IbverbsWindows, BadWindowsAreRefused) {
  for (auto* bind : {+[](End& e, MemoryRegion& r, std::uint64_t a, std::size_t n, std::uint32_t x) {
                       return e.qp->bind_window(r, a, n, x);
                     },
                     +[](End& e, MemoryRegion& r, std::uint64_t a, std::size_t n, std::uint32_t x) {
                       return e.pd->bind_window(r, a, n, x);
                     }}) {
    EXPECT_EQ(bind(b_, *pool_, pool_->addr() + pool_->length() - 8, 64, kRemote).status().code(),
              Code::kInvalidArgument);
    EXPECT_EQ(bind(b_, *pool_, pool_->addr() - 4096, 64, kRemote).status().code(),
              Code::kInvalidArgument);
    EXPECT_EQ(bind(b_, *pool_, pool_->addr(), 0, kRemote).status().code(), Code::kInvalidArgument);
    EXPECT_EQ(bind(b_, *pool_, pool_->addr(), 64, kLocalWrite).status().code(),
              Code::kInvalidArgument);
    EXPECT_EQ(bind(b_, *src_, src_->addr(), 64, kRemote).status().code(),  // a's region
              Code::kInvalidArgument);
  }
  Result<std::shared_ptr<QueuePair>> fresh = b_.ctx->create_qp(b_.pd, b_.cq, b_.cq, {4, 4});
  ASSERT_TRUE(fresh.ok());
  Result<std::unique_ptr<MemoryWindow>> unconnected =
      fresh.value()->bind_window(*pool_, pool_->addr(), 64, kRemote);
  if (!unconnected.ok()) {
    EXPECT_EQ(unconnected.status().code(), Code::kFailedPrecondition);
  }
}

}  // namespace
}  // namespace tensorverbs::verbs::testing

#endif  // TENSORVERBS_HAVE_IBVERBS
