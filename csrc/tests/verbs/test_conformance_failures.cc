// The provider conformance suite (conformance.h), continued: protection, failures,
// windows, waiting, and threads.
#include <atomic>
#include <cstring>

#include "conformance.h"

namespace tensorverbs::verbs::testing {

// ------------------------------------------------------------------------ protection
TEST_P(Conformance, RemoteAccessViolationsFailAtTheRequester) {
  for (WrOpcode opcode : {WrOpcode::kRdmaWrite, WrOpcode::kRdmaRead}) {
    for (const char* violation : {"rkey", "bounds", "access"}) {
      SCOPED_TRACE(std::string(opcode == WrOpcode::kRdmaWrite ? "write: " : "read: ") + violation);
      TearDown();
      SetUp();
      const std::uint32_t size = 4096;
      const std::uint32_t missing = opcode == WrOpcode::kRdmaWrite ? kRemoteWrite : kRemoteRead;
      const std::uint32_t access = std::string(violation) == "access" ? kAllAccess & ~missing : kAllAccess;
      auto target = b_->region(2 * size, access, kPoison);
      auto local = a_->region(2 * size);
      fill_random(local->data(), 2 * size, 9);
      std::uint32_t rkey = target->rkey();
      std::uint64_t addr = target->addr();
      if (std::string(violation) == "rkey") rkey ^= 0x00F00000;
      if (std::string(violation) == "bounds") addr += target->length() - size / 2;
      SendWr w[2] = {wr(1, opcode, local.get(), 0, size, addr, rkey),
                     wr(2, opcode, local.get(), size, size, target->addr(), target->rkey())};
      ASSERT_TRUE(a_->qp->post_send(&w[0], 1).ok());
      ASSERT_TRUE(a_->qp->post_send(&w[1], 1).ok());
      auto wcs = a_->completions(2);
      ASSERT_EQ(wcs.size(), 2u);
      const WcOpcode expected = opcode == WrOpcode::kRdmaWrite ? WcOpcode::kRdmaWrite : WcOpcode::kRdmaRead;
      EXPECT_EQ(wcs[0].wr_id, 1u);
      EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
      EXPECT_EQ(wcs[0].opcode, expected);
      EXPECT_EQ(wcs[1].wr_id, 2u);
      EXPECT_EQ(wcs[1].status, WcStatus::kWrFlushErr);
      EXPECT_EQ(wcs[1].opcode, expected);
      EXPECT_EQ(a_->qp->state(), QpState::kError);
      EXPECT_FALSE(a_->qp->error_detail().empty());
      EXPECT_TRUE(all_equal(target->data(), 2 * size, kPoison));
    }
  }
}

TEST_P(Conformance, LocalBufferOutsideItsRegionIsAProtectionError) {
  auto local = a_->region(4096);
  auto target = b_->region(8192, kAllAccess, kPoison);
  SendWr w;
  w.wr_id = 1;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sge = Sge{local->addr(), 8192, local->lkey()};
  w.remote_addr = target->addr();
  w.rkey = target->rkey();
  ASSERT_TRUE(a_->qp->post_send(&w, 1).ok());
  auto wcs = a_->completions(1);
  ASSERT_EQ(wcs.size(), 1u);
  if (GetParam().flushes_local_errors && wcs[0].status == WcStatus::kWrFlushErr) {
    EXPECT_EQ(a_->qp->state(), QpState::kError);  // the failure is not lost, only its kind
  } else {
    EXPECT_EQ(wcs[0].status, WcStatus::kLocProtErr);
    EXPECT_EQ(wcs[0].opcode, WcOpcode::kRdmaWrite);
  }
  EXPECT_TRUE(all_equal(target->data(), 8192, kPoison));
}

// -------------------------------------------------------------------------- failures
TEST_P(Conformance, ToErrorFlushesEverythingAndFailsThePeer) {
  auto buf = a_->region(64);
  RecvWr r[2] = {RecvWr{1, buf->sge(0, 64)}, RecvWr{2}};
  ASSERT_TRUE(a_->qp->post_recv(r, 2).ok());
  a_->qp->to_error("stopped by the test");
  EXPECT_EQ(a_->qp->state(), QpState::kError);
  auto wcs = a_->completions(2);
  ASSERT_EQ(wcs.size(), 2u);
  for (const auto& wc : wcs) {
    EXPECT_EQ(wc.status, WcStatus::kWrFlushErr);
    EXPECT_EQ(wc.opcode, WcOpcode::kRecv);
  }
  EXPECT_NE(a_->qp->error_detail().find("stopped by the test"), std::string::npos);
  SendWr w = wr(3, WrOpcode::kSend, buf.get(), 0, 64);  // posting in the error state: flushed
  ASSERT_TRUE(a_->qp->post_send(&w, 1).ok());
  wcs = a_->completions(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kWrFlushErr);
  // the peer notices: its outstanding work fails
  auto pbuf = b_->region(64);
  RecvWr pr{4, pbuf->sge(0, 64)};
  ASSERT_TRUE(b_->qp->post_recv(&pr, 1).ok());
  SendWr ps = wr(5, WrOpcode::kSend, pbuf.get(), 0, 64);
  ASSERT_TRUE(b_->qp->post_send(&ps, 1).ok());
  auto pwcs = b_->completions(2, 30);
  ASSERT_EQ(pwcs.size(), 2u) << b_->qp->error_detail();
  for (const auto& wc : pwcs) EXPECT_FALSE(wc.ok());
}

TEST_P(Conformance, DestroyedPeerFlushesOutstandingWorkWithADetail) {
  auto buf = b_->region(64);
  RecvWr r{1, buf->sge(0, 64)};
  ASSERT_TRUE(b_->qp->post_recv(&r, 1).ok());
  SendWr w = wr(2, WrOpcode::kSend, buf.get(), 0, 64);
  a_->stop();
  a_->qp.reset();  // the peer's queue pair goes
  ASSERT_TRUE(b_->qp->post_send(&w, 1).ok());
  auto wcs = b_->completions(2, 30);
  ASSERT_EQ(wcs.size(), 2u);
  for (const auto& wc : wcs) EXPECT_FALSE(wc.ok());
  EXPECT_EQ(b_->qp->state(), QpState::kError);
  EXPECT_FALSE(b_->qp->error_detail().empty());
}

TEST_P(Conformance, PostingBeforeConnectIsRefused) {
  auto side = make_side();
  ASSERT_TRUE(side->ok());
  auto buf = side->region(64);
  SendWr w = wr(5, WrOpcode::kSend, buf.get(), 0, 64);
  EXPECT_FALSE(side->qp->post_send(&w, 1).ok());
  EXPECT_EQ(side->qp->state(), QpState::kInit);
}

// --------------------------------------------------------------------------- windows
TEST_P(Conformance, WindowsGrantTheirRangeOnlyAndOnlyUntilRevoked) {
  auto region = b_->region(3 * 4096, kAllAccess, kPoison);
  auto window = b_->pd->bind_window(*region, region->addr() + 4096, 4096, kRemoteWrite | kRemoteRead);
  ASSERT_TRUE(window.ok()) << window.status().message();
  auto& mw = *window.value();
  EXPECT_NE(mw.rkey(), region->rkey());
  auto src = a_->region(4096);
  fill_random(src->data(), 4096, 11);
  SendWr w = wr(1, WrOpcode::kRdmaWrite, src.get(), 0, 4096, mw.addr(), mw.rkey());
  ASSERT_TRUE(a_->qp->post_send(&w, 1).ok());
  auto wcs = a_->completions(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_TRUE(wcs[0].ok()) << a_->qp->error_detail();
  EXPECT_EQ(std::memcmp(region->data() + 4096, src->data(), 4096), 0);
  EXPECT_TRUE(all_equal(region->data(), 4096, kPoison));
  EXPECT_TRUE(mw.revoke());
  EXPECT_TRUE(mw.quiesced());
  SendWr after = wr(2, WrOpcode::kRdmaWrite, src.get(), 0, 16, mw.addr(), mw.rkey());
  ASSERT_TRUE(a_->qp->post_send(&after, 1).ok());
  wcs = a_->completions(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_TRUE(all_equal(region->data() + 2 * 4096, 4096, kPoison));
}

TEST_P(Conformance, AKeyRevokedAfterItsQueuePairFailedMeansTheConnectionBroke) {
  // A channel that breaks revokes the windows of the requests it holds. A write through
  // one of them that comes after finds no queue pair to answer it (a NIC retransmits, then
  // gives up): the connection broke, which is not the refusal of a live peer.
  auto region = b_->region(4096, kAllAccess, kPoison);
  auto window = b_->pd->bind_window(*region, region->addr(), 4096, kRemoteWrite);
  ASSERT_TRUE(window.ok()) << window.status().message();
  auto& mw = *window.value();
  auto src = a_->region(4096);
  fill_random(src->data(), 4096, 12);
  SendWr before = wr(1, WrOpcode::kRdmaWrite, src.get(), 0, 64, mw.addr(), mw.rkey());
  ASSERT_TRUE(a_->qp->post_send(&before, 1).ok());
  auto wcs = a_->completions(1);
  ASSERT_EQ(wcs.size(), 1u);
  ASSERT_TRUE(wcs[0].ok()) << a_->qp->error_detail();
  // a's side no longer makes progress by itself (its collecting thread stops): it learns
  // that b's queue pair went only from what its next operation meets
  a_->stop();
  // stop() wakes the collector, which may end without sleeping again (its wait timed out
  // first, as under load): the wake-up is left for the next wait, made certain here
  a_->cq->wake();
  b_->qp->to_error("its channel broke");
  mw.revoke();
  SendWr after = wr(2, WrOpcode::kRdmaWrite, src.get(), 64, 64, mw.addr() + 64, mw.rkey());
  ASSERT_TRUE(a_->qp->post_send(&after, 1).ok());
  wcs = wait_for(*a_->cq, 1, 60000);
  ASSERT_EQ(wcs.size(), 1u);
  const WorkCompletion& wc = wcs[0];
  EXPECT_TRUE(connection_broke(wc.status))
      << to_string(wc.status) << ": " << a_->qp->error_detail();
  EXPECT_EQ(std::memcmp(region->data(), src->data(), 64), 0);
  EXPECT_TRUE(all_equal(region->data() + 64, 4096 - 64, kPoison));
}

// A write with immediate that reaches a queue pair already in the error state is not
// reported done: no receive of it completes there (the queue pair flushed its receives), so
// a sender told "done" would count delivered what nobody took. A NIC's retransmissions find
// no queue pair; on the soft provider the event goes into a ring its consumer closed.
TEST_P(Conformance, AWriteWithImmediateToAQueuePairInTheErrorStateIsNotReportedDone) {
  auto region = b_->region(4096, kAllAccess, kPoison);
  auto src = a_->region(4096);
  fill_random(src->data(), 4096, 13);
  RecvWr r{3};
  ASSERT_TRUE(b_->qp->post_recv(&r, 1).ok());
  SendWr before = wr(1, WrOpcode::kRdmaWriteWithImm, src.get(), 0, 64, region->addr(), region->rkey());
  before.imm = 7;
  ASSERT_TRUE(a_->qp->post_send(&before, 1).ok());
  ASSERT_EQ(a_->completions(1).size(), 1u);
  ASSERT_EQ(b_->completions(1).size(), 1u);
  // a's side learns that b's queue pair went only from what its next operation meets
  a_->stop();
  a_->cq->wake();
  RecvWr again{4};
  ASSERT_TRUE(b_->qp->post_recv(&again, 1).ok());
  b_->qp->to_error("its channel broke");
  SendWr after = wr(2, WrOpcode::kRdmaWriteWithImm, src.get(), 64, 64, region->addr() + 64, region->rkey());
  after.imm = 8;
  ASSERT_TRUE(a_->qp->post_send(&after, 1).ok());
  auto wcs = wait_for(*a_->cq, 1, 60000);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_FALSE(wcs[0].ok()) << "the write was reported done; its receive: "
                            << to_string(b_->completions(1).at(0).status);
}

// A write the responder took and acknowledged stays done for the requester whatever its next
// operation meets: a NIC processed the acknowledgements it received before the link went.
// The soft provider's requester is stopped (nothing reads its socket, where b's ACK waits)
// when b's queue pair goes to the error state, and its next write then meets a stream the
// peer shut (on one host at once: EPIPE).
TEST_P(Conformance, AWriteTheResponderAcknowledgedStaysDoneThoughTheNextWriteFindsTheLinkGone) {
  const std::uint32_t size = 64u << 10;  // whole in one send, whatever the socket buffers
  auto region = b_->region(size, kAllAccess, kPoison);
  auto src = a_->region(size);
  fill_random(src->data(), size, 17);
  a_->stop();
  a_->cq->wake();
  RecvWr r{3};
  ASSERT_TRUE(b_->qp->post_recv(&r, 1).ok());
  SendWr taken = wr(1, WrOpcode::kRdmaWriteWithImm, src.get(), 0, size, region->addr(), region->rkey());
  taken.imm = 7;
  ASSERT_TRUE(a_->qp->post_send(&taken, 1).ok());
  auto received = b_->completions(1);
  ASSERT_EQ(received.size(), 1u);
  ASSERT_TRUE(received[0].ok()) << to_string(received[0].status);
  ASSERT_EQ(std::memcmp(region->data(), src->data(), size), 0);
  b_->qp->to_error("its channel broke");
  SendWr next = wr(2, WrOpcode::kRdmaWrite, src.get(), 0, 64, region->addr(), region->rkey());
  ASSERT_TRUE(a_->qp->post_send(&next, 1).ok());
  auto wcs = wait_for(*a_->cq, 2, 60000);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess)
      << "the write b took was reported " << to_string(wcs[0].status) << ": " << a_->qp->error_detail();
  EXPECT_EQ(wcs[1].wr_id, 2u);
  EXPECT_FALSE(wcs[1].ok());
}

TEST_P(Conformance, AWindowRefusesAccessOutsideItsRange) {
  auto region = b_->region(3 * 4096, kAllAccess, kPoison);
  auto window = b_->pd->bind_window(*region, region->addr() + 4096, 4096, kRemoteWrite);
  ASSERT_TRUE(window.ok()) << window.status().message();
  auto src = a_->region(8192);
  SendWr w = wr(1, WrOpcode::kRdmaWrite, src.get(), 0, 4097, window.value()->addr(),
                window.value()->rkey());
  ASSERT_TRUE(a_->qp->post_send(&w, 1).ok());
  auto wcs = a_->completions(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
  EXPECT_TRUE(all_equal(region->data(), 3 * 4096, kPoison));
  // no read right either
  TearDown();
  SetUp();
  auto region2 = b_->region(4096, kAllAccess);
  auto wo = b_->pd->bind_window(*region2, region2->addr(), 4096, kRemoteWrite);
  ASSERT_TRUE(wo.ok());
  auto dst = a_->region(4096);
  SendWr rd = wr(2, WrOpcode::kRdmaRead, dst.get(), 0, 64, wo.value()->addr(), wo.value()->rkey());
  ASSERT_TRUE(a_->qp->post_send(&rd, 1).ok());
  wcs = a_->completions(1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRemAccessErr);
}

// ------------------------------------------------------------------- waiting, threads
TEST_P(Conformance, WaitReturnsOnWakeAndOnTimeout) {
  auto cq = a_->ctx->create_cq(8);
  ASSERT_TRUE(cq.ok());
  WorkCompletion wc[4];
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(cq.value()->wait(wc, 4, 200), 0);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(150));
  std::atomic<int> got{-1};
  std::thread waiter([&] { got = cq.value()->wait(wc, 4, -1); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  cq.value()->wake();
  waiter.join();
  EXPECT_EQ(got.load(), 0);
}

TEST_P(Conformance, ManyQueuePairsShareOneCompletionQueue) {
  constexpr int kPairs = 8;
  std::vector<std::shared_ptr<QueuePair>> mine, theirs;
  auto src = a_->region(4096);
  auto dst = b_->region(kPairs * 4096);
  fill_random(src->data(), 4096, 12);
  for (int i = 0; i < kPairs; ++i) {
    auto qa = a_->ctx->create_qp(a_->pd, a_->cq, a_->cq, QpCaps{8, 8});
    auto qb = b_->ctx->create_qp(b_->pd, b_->cq, b_->cq, QpCaps{8, 8});
    ASSERT_TRUE(qa.ok() && qb.ok());
    ASSERT_TRUE(connect_pair(*qa.value(), *qb.value()));
    mine.push_back(qa.take());
    theirs.push_back(qb.take());
  }
  for (int i = 0; i < kPairs; ++i) {
    RecvWr r{static_cast<std::uint64_t>(100 + i)};
    ASSERT_TRUE(theirs[static_cast<std::size_t>(i)]->post_recv(&r, 1).ok());
    SendWr w = wr(static_cast<std::uint64_t>(i), WrOpcode::kRdmaWriteWithImm, src.get(), 0, 4096,
                  dst->addr() + static_cast<std::uint64_t>(i) * 4096, dst->rkey());
    w.imm = static_cast<std::uint32_t>(i);
    ASSERT_TRUE(mine[static_cast<std::size_t>(i)]->post_send(&w, 1).ok());
  }
  auto wcs = a_->completions(kPairs);
  auto rwcs = b_->completions(kPairs);
  ASSERT_EQ(wcs.size(), static_cast<std::size_t>(kPairs));
  ASSERT_EQ(rwcs.size(), static_cast<std::size_t>(kPairs));
  for (const auto& wc : rwcs) {
    EXPECT_TRUE(wc.ok());
    const auto i = static_cast<std::size_t>(wc.imm);
    ASSERT_LT(i, static_cast<std::size_t>(kPairs));
    EXPECT_EQ(wc.qp_num, theirs[i]->qp_num());
    EXPECT_EQ(wc.wr_id, 100 + i);
    EXPECT_EQ(std::memcmp(dst->data() + i * 4096, src->data(), 4096), 0);
  }
}

TEST_P(Conformance, PostingFromSeveralThreadsWhileAnotherWaits) {
  constexpr int kThreads = 4, kEach = 100;
  a_ = make_side(kThreads * kEach, 8);
  b_ = make_side(8, kThreads * kEach);
  ASSERT_TRUE(a_->ok() && b_->ok());
  ASSERT_TRUE(connect_pair(*a_->qp, *b_->qp));
  auto src = a_->region(kThreads * 64);
  auto dst = b_->region(kThreads * kEach * 64);
  fill_random(src->data(), kThreads * 64, 13);
  for (int i = 0; i < kThreads * kEach; ++i) {
    RecvWr r{static_cast<std::uint64_t>(i)};
    ASSERT_TRUE(b_->qp->post_recv(&r, 1).ok());
  }
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const int n = t * kEach + i;
        SendWr w = wr(static_cast<std::uint64_t>(n), WrOpcode::kRdmaWriteWithImm, src.get(),
                      static_cast<std::size_t>(t) * 64, 64, dst->addr() + static_cast<std::uint64_t>(n) * 64,
                      dst->rkey());
        w.imm = static_cast<std::uint32_t>(n);
        if (!a_->qp->post_send(&w, 1).ok()) failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  auto wcs = a_->completions(kThreads * kEach, 60);
  auto rwcs = b_->completions(kThreads * kEach, 60);
  ASSERT_EQ(wcs.size(), static_cast<std::size_t>(kThreads * kEach));
  ASSERT_EQ(rwcs.size(), static_cast<std::size_t>(kThreads * kEach));
  std::vector<bool> seen(kThreads * kEach, false);
  for (const auto& wc : rwcs) {
    ASSERT_TRUE(wc.ok());
    ASSERT_LT(wc.imm, static_cast<std::uint32_t>(kThreads * kEach));
    seen[wc.imm] = true;
    const std::size_t t = wc.imm / kEach;
    EXPECT_EQ(std::memcmp(dst->data() + wc.imm * 64, src->data() + t * 64, 64), 0);
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](bool b) { return b; }));
}

}  // namespace tensorverbs::verbs::testing
