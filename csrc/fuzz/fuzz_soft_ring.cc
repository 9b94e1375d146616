// Feeds arbitrary bytes to an event ring as its (untrusted) producer would write them: the
// header's tail and the entries. The consumer must report every impossible state as an
// error, never read outside the ring, and deliver only events that pass the checks.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "core/little_endian.h"
#include "verbs/soft/event_ring.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace tensorverbs;
  using namespace tensorverbs::verbs::soft;
  if (size < 8) return 0;
  // a fresh consumer each time: the ring starts empty
  auto fresh = EventRing::create(8);
  if (!fresh.ok()) std::abort();
  EventRing& r = *fresh.value();
  std::uint8_t* base = r.segment().data();
  auto* header = static_cast<ring_layout::Header*>(static_cast<void*>(base));
  header->tail.store(little_endian::load<std::uint64_t>(data) & 0x3F);
  const std::size_t entries = (size - 8) < 8 * kRingEntryBytes ? size - 8 : 8 * kRingEntryBytes;
  std::memcpy(base + kRingHeaderBytes, data + 8, entries);
  for (int i = 0; i < 16; ++i) {
    RingEvent event;
    Status error;
    if (!r.peek(&event, &error)) break;
    if (event.byte_len > kMaxMessageBytes) std::abort();
    r.pop();
  }
  return 0;
}
