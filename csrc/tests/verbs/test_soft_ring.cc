// The event ring and the key table on their own: wrap-around, back-pressure, the
// producer_waiting flag, a corrupt peer; keys, the in-flight guard and window revocation.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "verbs/soft/event_ring.h"
#include "verbs/soft/key_table.h"
#include "verbs/work.h"

namespace tensorverbs::verbs::soft {
namespace {

UniqueFd dup_fd(int fd) { return UniqueFd(::fcntl(fd, F_DUPFD_CLOEXEC, 0)); }

TEST(SoftRing, WrapsAroundAndPushesBackWhenFull) {
  auto ring = EventRing::create(4);
  ASSERT_TRUE(ring.ok());
  auto producer = EventRingProducer::map(dup_fd(ring.value()->segment().fd()));
  ASSERT_TRUE(producer.ok()) << producer.status().message();
  std::uint32_t next_push = 1, next_pop = 1;
  for (int round = 0; round < 10; ++round) {  // 10 x 3 events through 4 slots
    for (int i = 0; i < 3; ++i) {
      ASSERT_EQ(producer.value()->push({next_push, next_push * 10, next_push}),
                EventRingProducer::Push::kDone);
      ++next_push;
    }
    for (int i = 0; i < 3; ++i) {
      RingEvent e;
      Status error;
      ASSERT_TRUE(ring.value()->peek(&e, &error)) << error.message();
      EXPECT_EQ(e.seq, next_pop);
      EXPECT_EQ(e.imm, next_pop * 10);
      EXPECT_FALSE(ring.value()->pop());
      ++next_pop;
    }
  }
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(producer.value()->push({next_push++, 0, 0}), EventRingProducer::Push::kDone);
  }
  // full: refused, nothing lost, and the consumer learns that the producer waits
  EXPECT_EQ(producer.value()->push({next_push, 0, 0}), EventRingProducer::Push::kFull);
  RingEvent e;
  Status error;
  ASSERT_TRUE(ring.value()->peek(&e, &error));
  EXPECT_EQ(e.seq, next_pop);
  EXPECT_TRUE(ring.value()->pop());  // the producer waits for this room
  EXPECT_EQ(producer.value()->push({next_push, 0, 0}), EventRingProducer::Push::kDone);
  producer.value()->clear_waiting();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(ring.value()->peek(&e, &error));
    EXPECT_EQ(e.seq, ++next_pop);
    EXPECT_FALSE(ring.value()->pop());
  }
  EXPECT_FALSE(ring.value()->peek(&e, &error));
  EXPECT_TRUE(error.ok());
}

// The producer that found the ring full waits for the consumer's head to move from where
// it was then: room the consumer made (and rang for) before the producer looked again is
// seen, not taken for the state to wait from.
TEST(SoftRing, RoomMadeAsTheProducerFoundTheRingFullIsSeen) {
  auto ring = EventRing::create(4);
  ASSERT_TRUE(ring.ok());
  auto producer = EventRingProducer::map(dup_fd(ring.value()->segment().fd()));
  ASSERT_TRUE(producer.ok()) << producer.status().message();
  for (std::uint32_t seq = 1; seq <= 4; ++seq) {
    ASSERT_EQ(producer.value()->push({seq, 0, 0}), EventRingProducer::Push::kDone);
  }
  ASSERT_EQ(producer.value()->push({5, 0, 0}), EventRingProducer::Push::kFull);
  RingEvent e;
  Status error;
  ASSERT_TRUE(ring.value()->peek(&e, &error));
  EXPECT_TRUE(ring.value()->pop());  // the producer waits: the consumer rings for it
  EXPECT_NE(producer.value()->consumed(), producer.value()->head_when_full());
  EXPECT_EQ(producer.value()->push({5, 0, 0}), EventRingProducer::Push::kDone);
}

TEST(SoftRing, AnImpossibleTailIsAnErrorNotACrash) {
  auto ring = EventRing::create(4);
  ASSERT_TRUE(ring.ok());
  auto* header = static_cast<ring_layout::Header*>(static_cast<void*>(ring.value()->segment().data()));
  header->tail.store(1000);
  RingEvent e;
  Status error;
  EXPECT_FALSE(ring.value()->peek(&e, &error));
  EXPECT_FALSE(error.ok());
  header->tail.store(1);  // an entry with bad flags
  EXPECT_FALSE(ring.value()->peek(&e, &error));
  EXPECT_FALSE(error.ok());
  auto producer = EventRingProducer::map(dup_fd(ring.value()->segment().fd()));
  ASSERT_TRUE(producer.ok());
  header->head.store(77);  // past the tail
  EXPECT_EQ(producer.value()->push({1, 0, 0}), EventRingProducer::Push::kCorrupt);
}

TEST(SoftRing, MapsOnlySealedSegmentsOfTheRightSize) {
  UniqueFd plain(::memfd_create("unsealed", MFD_CLOEXEC));
  ASSERT_EQ(::ftruncate(plain.get(), 4096), 0);
  EXPECT_FALSE(EventRingProducer::map(std::move(plain)).ok());
  EXPECT_FALSE(EventRingProducer::map(UniqueFd(::open("/dev/null", O_RDWR | O_CLOEXEC))).ok());
  auto segment = SharedSegment::create(4096, "not-a-ring", false);
  ASSERT_TRUE(segment.ok());
  EXPECT_FALSE(EventRingProducer::map(dup_fd(segment.value()->fd())).ok());  // no magic
}

TEST(SoftKeyTable, KeysAreNeverZeroAndNeverRepeat) {
  auto table = KeyTable::create(64);
  ASSERT_TRUE(table.ok());
  std::uint32_t previous = 0;
  for (int i = 0; i < 64; ++i) {
    RegionInfo info;
    info.pd = 1;
    info.length = 64;
    auto key = table.value()->add(info);
    ASSERT_TRUE(key.ok());
    EXPECT_NE(key.value(), 0u);
    EXPECT_NE(key.value(), previous);
    previous = key.value();
    EXPECT_TRUE(table.value()->remove(key.value()));
  }
}

// 4096 bytes at 0x10000 of PD 3, remotely writable, bound to queue pair `qp` (0: none).
RegionInfo writable(std::uint32_t qp = 0) {
  RegionInfo info;
  info.pd = 3;
  info.qp = qp;
  info.addr = 0x10000;
  info.length = 4096;
  info.access = kRemoteWrite | kLocalWrite;
  return info;
}

TEST(SoftKeyTable, ThePinGuardsRevocation) {
  auto table = KeyTable::create(64);
  ASSERT_TRUE(table.ok());
  RegionInfo info = writable();
  info.segment_id = 9;
  info.segment_offset = 128;
  auto key = table.value()->add(info);
  ASSERT_TRUE(key.ok());
  auto view = KeyTableView::map(dup_fd(table.value()->segment().fd()));
  ASSERT_TRUE(view.ok()) << view.status().message();
  const Through via{3, 0};  // a queue pair of PD 3
  KeyTableView::Pinned pinned;
  EXPECT_FALSE(view.value()->pin(key.value(), via, 0x10000, 4097, kRemoteWrite, &pinned).ok());
  EXPECT_FALSE(view.value()->pin(key.value(), via, 0x10000, 16, kRemoteRead, &pinned).ok());
  EXPECT_FALSE(view.value()->pin(key.value(), Through{4, 0}, 0x10000, 16, kRemoteWrite, &pinned).ok());
  EXPECT_FALSE(view.value()->pin(key.value() ^ 0x10000, via, 0x10000, 16, kRemoteWrite, &pinned).ok());
  ASSERT_TRUE(view.value()->pin(key.value(), via, 0x10010, 16, kRemoteWrite, &pinned).ok());
  EXPECT_EQ(pinned.segment_id, 9u);
  EXPECT_EQ(pinned.segment_offset, 128u + 16u);
  // a copy is under way: revocation cannot say it is over
  EXPECT_FALSE(table.value()->remove(key.value()));
  EXPECT_FALSE(table.value()->quiesced(key.value()));
  KeyTableView::Pinned again;
  EXPECT_FALSE(view.value()->pin(key.value(), via, 0x10010, 16, kRemoteWrite, &again).ok());
  KeyTableView::unpin(pinned);
  EXPECT_TRUE(table.value()->quiesced(key.value()));
}

// Keys live near their home slot (the key modulo the slot count), wherever that is: a table
// fills up, each key is found by its owner and by a peer, and slots freed are taken again.
TEST(SoftKeyTable, EveryKeyIsFoundWhereverItLives) {
  auto table = KeyTable::create(64);
  ASSERT_TRUE(table.ok());
  KeyTable& keys = *table.value();
  auto view = KeyTableView::map(dup_fd(keys.segment().fd()));
  ASSERT_TRUE(view.ok()) << view.status().message();
  std::vector<std::uint32_t> live;
  for (;;) {
    RegionInfo info;
    info.pd = 1;
    info.addr = 0x1000 * (live.size() + 1);
    info.length = 64;
    info.access = kLocalWrite | kRemoteWrite;
    auto key = keys.add(info);
    if (!key.ok()) {
      EXPECT_EQ(key.status().code(), Code::kResourceExhausted);
      break;
    }
    live.push_back(key.value());
  }
  EXPECT_EQ(live.size(), 64u);  // every slot
  for (std::size_t i = 0; i < live.size(); ++i) {
    const std::uint64_t addr = 0x1000 * (i + 1);
    EXPECT_TRUE(keys.with_region(live[i], [&](const RegionInfo* r) { return r && r->addr == addr; }));
    KeyTableView::Pinned pinned;
    ASSERT_TRUE(view.value()->pin(live[i], Through{1, 0}, addr, 64, kRemoteWrite, &pinned).ok());
    KeyTableView::unpin(pinned);
  }
  for (std::size_t i = 0; i < live.size(); i += 2) EXPECT_TRUE(keys.remove(live[i]));
  for (std::size_t i = 0; i < live.size(); i += 2) {
    RegionInfo info;
    info.pd = 1;
    EXPECT_TRUE(keys.add(info).ok());
  }
}

TEST(SoftKeyTable, AWindowOfAQueuePairServesThatQueuePairOnly) {
  auto table = KeyTable::create(64);
  ASSERT_TRUE(table.ok());
  auto key = table.value()->add(writable(7));
  ASSERT_TRUE(key.ok());
  auto view = KeyTableView::map(dup_fd(table.value()->segment().fd()));
  ASSERT_TRUE(view.ok()) << view.status().message();
  KeyTableView::Pinned pinned;
  const Status other = view.value()->pin(key.value(), Through{3, 8}, 0x10000, 16, kRemoteWrite,
                                         &pinned);
  EXPECT_NE(other.message().find("another queue pair"), std::string::npos) << other.message();
  ASSERT_TRUE(view.value()->pin(key.value(), Through{3, 7}, 0x10000, 16, kRemoteWrite, &pinned).ok());
  KeyTableView::unpin(pinned);
  EXPECT_TRUE(table.value()->remove(key.value()));
}

}  // namespace
}  // namespace tensorverbs::verbs::soft
