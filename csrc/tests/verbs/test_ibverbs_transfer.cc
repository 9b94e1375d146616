// Bytes between two devices (rxe0 and rxe1 in the soft-RoCE guest): RDMA writes with and
// without immediates, reads, sends, 0 bytes, the largest single operation and beyond it.
#include <gtest/gtest.h>

#if TENSORVERBS_HAVE_IBVERBS

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "ibverbs_fixture.h"

namespace tensorverbs::verbs::testing {
namespace {

constexpr std::uint32_t kAll = kLocalWrite | kRemoteWrite | kRemoteRead;

std::vector<std::uint8_t> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint8_t> out(n);
  for (auto& b : out) b = static_cast<std::uint8_t>(gen());
  return out;
}

std::unique_ptr<MemoryRegion> allocate(ProtectionDomain& pd, std::size_t n, std::uint32_t access) {
  Result<std::unique_ptr<MemoryRegion>> mr = pd.allocate_memory(n, access);
  EXPECT_TRUE(mr.ok()) << mr.status().message();
  return mr.ok() ? mr.take() : nullptr;
}

SendWr write(std::uint64_t id, const MemoryRegion& src, std::size_t off, std::uint32_t len,
             const MemoryRegion& dst, std::size_t dst_off) {
  SendWr wr;
  wr.wr_id = id;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.sge = src.sge(off, len);
  wr.remote_addr = dst.addr() + dst_off;
  wr.rkey = dst.rkey();
  return wr;
}

using IbverbsTransfer = IbverbsPair;

TEST_F(IbverbsTransfer, WriteWithImmediateMovesBytesBetweenDevices) {
  const std::uint64_t max_msg = a_.ctx->device().max_msg_sz;
  const std::size_t largest = std::min(kLargestIbverbsTransfer, static_cast<std::size_t>(max_msg));
  for (std::size_t size : {std::size_t{1}, std::size_t{4096}, std::size_t{65536},
                           std::size_t{1} << 20, largest}) {
    std::vector<std::uint8_t> src = random_bytes(size, static_cast<unsigned>(size));
    Result<std::unique_ptr<MemoryRegion>> smr =
        a_.pd->register_memory(src.data(), src.size(), kLocalWrite);
    ASSERT_TRUE(smr.ok()) << smr.status().message();
    EXPECT_EQ(smr.value()->data(), src.data());  // registered in place
    auto dmr = allocate(*b_.pd, size, kAll);
    const RecvWr recv{size, {}};
    ASSERT_TRUE(b_.qp->post_recv(&recv, 1).ok());
    SendWr wr = write(7, *smr.value(), 0, static_cast<std::uint32_t>(size), *dmr, 0);
    wr.opcode = WrOpcode::kRdmaWriteWithImm;
    wr.imm = 0xCAFE0000u + static_cast<std::uint32_t>(size % 997);
    ASSERT_TRUE(a_.qp->post_send(&wr, 1).ok());
    auto sent = wait_for(*a_.cq, 1);
    auto got = wait_for(*b_.cq, 1);
    ASSERT_EQ(sent.size(), 1u);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_TRUE(sent[0].ok()) << to_string(sent[0].status) << " " << a_.qp->error_detail();
    EXPECT_EQ(sent[0].opcode, WcOpcode::kRdmaWrite);
    EXPECT_EQ(sent[0].wr_id, 7u);
    EXPECT_TRUE(got[0].ok());
    EXPECT_EQ(got[0].opcode, WcOpcode::kRecvRdmaWithImm);
    EXPECT_EQ(got[0].wr_id, size);
    EXPECT_TRUE(got[0].has_imm);
    EXPECT_EQ(got[0].imm, wr.imm);
    EXPECT_EQ(got[0].byte_len, size);
    EXPECT_EQ(got[0].qp_num, b_.qp->qp_num());
    EXPECT_EQ(std::memcmp(dmr->data(), src.data(), size), 0) << size << " bytes";
  }
}

TEST_F(IbverbsTransfer, ZeroByteWriteWithImmediateCarriesOnlyTheImmediate) {
  auto smr = allocate(*a_.pd, 64, kAll);
  auto dmr = allocate(*b_.pd, 64, kAll);
  const RecvWr recv{1, {}};
  ASSERT_TRUE(b_.qp->post_recv(&recv, 1).ok());
  SendWr wr = write(2, *smr, 0, 0, *dmr, 0);
  wr.opcode = WrOpcode::kRdmaWriteWithImm;
  wr.imm = 0xFFFFFFFE;
  ASSERT_TRUE(a_.qp->post_send(&wr, 1).ok());
  auto got = wait_for(*b_.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].ok());
  EXPECT_EQ(got[0].byte_len, 0u);
  EXPECT_EQ(got[0].imm, 0xFFFFFFFEu);
  auto sent = wait_for(*a_.cq, 1);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_TRUE(sent[0].ok());
}

TEST_F(IbverbsTransfer, ReadBringsRemoteBytesBack) {
  auto mra = allocate(*a_.pd, 8192, kAll);
  auto mrb = allocate(*b_.pd, 8192, kAll);
  std::memcpy(mrb->data() + 4000, "back", 4);
  SendWr wr = write(3, *mra, 10, 4, *mrb, 4000);
  wr.opcode = WrOpcode::kRdmaRead;
  ASSERT_TRUE(a_.qp->post_send(&wr, 1).ok());
  auto got = wait_for(*a_.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].ok());
  EXPECT_EQ(got[0].opcode, WcOpcode::kRdmaRead);
  EXPECT_EQ(std::memcmp(mra->data() + 10, "back", 4), 0);
}

TEST_F(IbverbsTransfer, LargestOperationReadsAndBeyondItIsRefused) {
  const std::uint64_t max_msg = a_.ctx->device().max_msg_sz;
  ASSERT_GT(max_msg, 0u);
  std::printf("[ info     ] %s max_msg_sz = %llu bytes\n", first().c_str(),
              static_cast<unsigned long long>(max_msg));
  const std::size_t size = std::min(kLargestIbverbsTransfer, static_cast<std::size_t>(max_msg));
  auto mra = allocate(*a_.pd, size + 4096, kAll);
  auto mrb = allocate(*b_.pd, size + 4096, kAll);
  std::vector<std::uint8_t> pattern = random_bytes(size, 99);
  std::memcpy(mrb->data(), pattern.data(), size);
  SendWr wr = write(4, *mra, 0, static_cast<std::uint32_t>(size), *mrb, 0);
  wr.opcode = WrOpcode::kRdmaRead;
  ASSERT_TRUE(a_.qp->post_send(&wr, 1).ok());
  auto got = wait_for(*a_.cq, 1, 120000);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].ok()) << to_string(got[0].status);
  EXPECT_EQ(std::memcmp(mra->data(), pattern.data(), size), 0);

  // one byte beyond max_msg_sz is refused before the region is looked at
  if (max_msg >= std::numeric_limits<std::uint32_t>::max()) return;  // no sge can say it
  SendWr too_big = write(5, *mra, 0, static_cast<std::uint32_t>(max_msg + 1), *mrb, 0);
  too_big.opcode = WrOpcode::kRdmaRead;
  const Status refused = a_.qp->post_send(&too_big, 1);
  EXPECT_EQ(refused.code(), Code::kInvalidArgument);
  EXPECT_NE(refused.message().find("max_msg_sz"), std::string::npos) << refused.message();
  EXPECT_EQ(a_.qp->state(), QpState::kRts);  // refused before the device saw it
}

TEST_F(IbverbsTransfer, SendLandsInAPostedReceive) {
  auto mra = allocate(*a_.pd, 8192, kAll);
  auto mrb = allocate(*b_.pd, 8192, kLocalWrite);
  std::memcpy(mra->data(), "hello", 5);
  const RecvWr recvs[2] = {{11, mrb->sge(100, 1000)}, {13, {}}};
  ASSERT_TRUE(b_.qp->post_recv(recvs, 2).ok());
  SendWr wr;
  wr.wr_id = 12;
  wr.opcode = WrOpcode::kSendWithImm;
  wr.sge = mra->sge(0, 5);
  wr.imm = 42;
  ASSERT_TRUE(a_.qp->post_send(&wr, 1).ok());
  auto sent = wait_for(*a_.cq, 1);
  auto got = wait_for(*b_.cq, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(sent[0].opcode, WcOpcode::kSend);
  EXPECT_EQ(got[0].wr_id, 11u);
  EXPECT_EQ(got[0].opcode, WcOpcode::kRecv);
  EXPECT_TRUE(got[0].has_imm);
  EXPECT_EQ(got[0].imm, 42u);
  EXPECT_EQ(got[0].byte_len, 5u);
  EXPECT_EQ(std::memcmp(mrb->data() + 100, "hello", 5), 0);
  // a send into a receive without a buffer: a length error at the receiver
  wr.wr_id = 14;
  ASSERT_TRUE(a_.qp->post_send(&wr, 1).ok());
  auto too_small = wait_for(*b_.cq, 1);
  ASSERT_EQ(too_small.size(), 1u);
  EXPECT_EQ(too_small[0].wr_id, 13u);
  EXPECT_EQ(too_small[0].status, WcStatus::kLocLenErr) << b_.qp->error_detail();
  EXPECT_EQ(too_small[0].opcode, WcOpcode::kRecv);
}

TEST_F(IbverbsTransfer, UnsignaledWritesCompleteUnseenAndKeepTheQueueDraining) {
  auto src = allocate(*a_.pd, 4096, kAll);
  auto dst = allocate(*b_.pd, 4096, kAll);
  for (int round = 0; round < 5; ++round) {  // far more than the send queue holds
    std::vector<SendWr> wrs;
    for (int i = 0; i < 63; ++i) {
      wrs.push_back(write(static_cast<std::uint64_t>(i), *src, 0, 64, *dst, 0));
      wrs.back().signaled = false;
    }
    wrs.push_back(write(1000 + static_cast<std::uint64_t>(round), *src, 0, 64, *dst, 0));
    ASSERT_TRUE(a_.qp->post_send(wrs.data(), wrs.size()).ok()) << a_.qp->error_detail();
    auto got = wait_for(*a_.cq, 1);
    ASSERT_EQ(got.size(), 1u);  // only the signaled one is seen
    EXPECT_EQ(got[0].wr_id, 1000u + static_cast<std::uint64_t>(round));
    WorkCompletion more[4];
    EXPECT_EQ(a_.cq->poll(more, 4), 0);
  }
}

TEST_F(IbverbsTransfer, AFullSendQueueIsRefusedNotOverrun) {
  auto src = allocate(*a_.pd, 4096, kAll);
  auto dst = allocate(*b_.pd, 4096, kAll);
  std::vector<SendWr> wrs;
  for (int i = 0; i < 65; ++i) wrs.push_back(write(static_cast<std::uint64_t>(i), *src, 0, 8, *dst, 0));
  const Status full = a_.qp->post_send(wrs.data(), wrs.size());  // the queue holds 64
  EXPECT_EQ(full.code(), Code::kResourceExhausted);
  EXPECT_NE(full.message().find("send queue"), std::string::npos) << full.message();
  ASSERT_TRUE(a_.qp->post_send(wrs.data(), 64).ok());
  auto got = wait_for(*a_.cq, 64);
  ASSERT_EQ(got.size(), 64u);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i].wr_id, i);
}

}  // namespace
}  // namespace tensorverbs::verbs::testing

#endif  // TENSORVERBS_HAVE_IBVERBS
