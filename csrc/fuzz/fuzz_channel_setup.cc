// libFuzzer: a task's channel set-up against a hostile peer, in one process over the soft
// provider. A task and its peer are opened once per message-slot count; in each input the
// peer hands the task its description changed as ChannelSetupInput says (or raw bytes),
// offered (channel()) or as the answer to the task's own set-up (connect()). Whatever the
// task accepts, a tensor then moves each way. No input may end the process, leave a recv
// unanswered past its deadline, or keep the next input from setting a channel up.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "channel_setup_input.h"
#include "protocol/channel_description.h"
#include "protocol/rdma_rendezvous.h"

namespace {

using namespace tensorverbs;
using fuzzing::ChannelSetupInput;

constexpr std::int32_t kTask = 0, kPeer = 1;
constexpr std::int32_t kUint8 = 4;  // DT_UINT8

struct Pair {
  std::unique_ptr<RdmaRendezvous> task, peer;
};

std::unique_ptr<RdmaRendezvous> open(std::int32_t id, std::uint32_t slots) {
  RendezvousSettings settings;
  settings.task = id;
  settings.task_names = {"/job:task/replica:0/task:0", "/job:peer/replica:0/task:0"};
  settings.verbs.provider = "soft";
  settings.listen_host = "127.0.0.1";
  settings.slots = slots;
  settings.pool_block = 4 << 20;
  settings.pool_limit = 64 << 20;
  auto opened = RdmaRendezvous::open(settings);
  if (!opened.ok()) std::abort();
  return opened.take();
}

Pair& pair_with(std::uint32_t slots) {
  static std::map<std::uint32_t, Pair> pairs;
  Pair& pair = pairs[slots];
  if (!pair.task) pair = Pair{open(kTask, slots), open(kPeer, slots)};
  return pair;
}

// The peer's genuine description, changed as `in` says.
std::string hostile(const std::string& genuine, const ChannelSetupInput& in) {
  if (in.flags & fuzzing::kRaw) return in.raw;
  auto parsed = ChannelDescription::parse(genuine);
  if (!parsed.ok()) std::abort();  // the peer's own description must be one
  ChannelDescription d = parsed.take();
  if (in.flags & fuzzing::kSetMaxMessage) d.max_message_bytes = in.max_message_bytes;
  if (in.flags & fuzzing::kSetSlots) d.slots = in.slots;
  if (in.flags & fuzzing::kSetRxLength) d.rx_length = in.rx_length;
  if (in.flags & fuzzing::kMoveRx) d.rx_addr += in.rx_shift;
  if (in.flags & fuzzing::kFlipRkey) d.rx_rkey ^= in.rkey_flip;
  if ((in.flags & fuzzing::kCutEndpoint) && in.endpoint_keep < d.endpoint.size()) {
    d.endpoint.resize(in.endpoint_keep);  // (never another address: no dial leaves loopback)
  }
  return d.serialize();
}

class Waiting : public RecvCallback {
 public:
  void complete(RecvResult) override { done_.set_value(); }
  bool answered_within(std::chrono::seconds limit) {
    return done_.get_future().wait_for(limit) == std::future_status::ready;
  }

 private:
  std::promise<void> done_;
};

// `bytes` from `from` to `to` at `step`, received with a deadline: any outcome will do, but
// there must be one.
void move(RdmaRendezvous& from, RdmaRendezvous& to, std::int64_t step, std::uint32_t bytes) {
  auto data = std::make_shared<std::vector<std::uint8_t>>(bytes, std::uint8_t{0x5a});
  const TensorValue value{TensorMeta{kUint8, {static_cast<std::int64_t>(bytes)}, false, bytes},
                          data->data(), data};
  (void)from.send(step, to.task(), "t", value);
  auto waiting = std::make_shared<Waiting>();
  to.recv(step, from.task(), "t", 1.0, waiting);
  if (!waiting->answered_within(std::chrono::seconds(60))) std::abort();
  from.cleanup_step(step);
  to.cleanup_step(step);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ChannelSetupInput in =
      ChannelSetupInput::read(std::string_view(reinterpret_cast<const char*>(data), size));
  static const std::uint32_t kSlots[] = {1, 4, 16};
  Pair& pair = pair_with(kSlots[in.task_slots % 3]);
  static std::uint64_t incarnation = 0;
  const std::uint64_t now = ++incarnation;  // fresh channels on both sides
  auto genuine = pair.peer->channel(kTask, now, {});
  if (!genuine.ok()) std::abort();
  const std::string description = hostile(genuine.value(), in);
  const bool offered = in.flags & fuzzing::kOffered;
  auto mine = pair.task->channel(kPeer, now, offered ? std::string_view(description) : "");
  if (!mine.ok() || !pair.task->connect(kPeer, now, description).ok()) return 0;
  if (!pair.peer->connect(kTask, now, mine.value()).ok()) return 0;
  const std::uint32_t bytes = in.tensor_bytes % (1u << 20);
  move(*pair.peer, *pair.task, static_cast<std::int64_t>(now), bytes);
  move(*pair.task, *pair.peer, static_cast<std::int64_t>(now), bytes);
  return 0;
}
