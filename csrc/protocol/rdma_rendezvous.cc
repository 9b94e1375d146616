#include "protocol/rdma_rendezvous.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "protocol/channel_description.h"
#include "protocol/local_recv.h"
#include "protocol/rdma_message_buffer.h"
#include "protocol/rdma_tensor_request.h"
#include "protocol/rdma_tensor_response.h"
#include "protocol/shared_registration.h"
#include "verbs/provider.h"

namespace tensorverbs {

namespace {

constexpr std::uint64_t kDefaultMaxMessage = std::uint64_t{1} << 30;
// How long a stop waits for what its channels posted to leave (a peer that is gone never
// completes it).
constexpr std::chrono::milliseconds kLinger{500};

// Why `channel` went: replaced by a new one, of a peer that restarted or not.
Status replaced(const RdmaChannel& channel, bool restarted) {
  return Status(Code::kUnavailable, channel.name() + " was replaced by a new one" +
                                        (restarted ? " (the peer restarted)" : ""));
}

}  // namespace

Result<std::unique_ptr<RdmaRendezvous>> RdmaRendezvous::open(RendezvousSettings settings) {
  if (settings.task < 0 || static_cast<std::size_t>(settings.task) >= settings.task_names.size()) {
    return Status(Code::kInvalidArgument, "task id out of range");
  }
  std::unique_ptr<RdmaRendezvous> rv(new RdmaRendezvous(std::move(settings)));
  auto provider = verbs::select_provider(rv->settings_.verbs);
  if (!provider.ok()) return provider.status();
  rv->provider_ = provider.value()->name();
  auto context = provider.value()->open(rv->settings_.verbs, rv->settings_.listen_host);
  if (!context.ok()) return context.status();
  rv->context_ = context.take();
  auto pd = rv->context_->alloc_pd();
  if (!pd.ok()) return pd.status();
  rv->pd_ = pd.take();
  const int peers = static_cast<int>(rv->settings_.task_names.size());
  const int per_channel = 2 * rv->settings_.verbs.queue_depth +
                          static_cast<int>(RdmaChannel::message_receives(rv->settings_.slots));
  auto cq = rv->context_->create_cq(per_channel * std::max(1, peers));
  if (!cq.ok()) return cq.status();
  rv->cq_ = cq.take();
  rv->pool_ = std::make_shared<RegisteredPool>(rv->pd_, rv->settings_.pool_block, rv->settings_.pool_limit);
  const std::uint64_t device_max = rv->context_->device().max_msg_sz;
  rv->max_message_bytes_ = device_max ? std::min(device_max, kDefaultMaxMessage) : kDefaultMaxMessage;
  RdmaRendezvous* self = rv.get();
  rv->adapter_ = std::make_unique<RdmaAdapter>(rv->cq_, [self] { return self->housekeeping(); });
  rv->adapter_->start();
  return rv;
}

RdmaRendezvous::~RdmaRendezvous() { stop(); }

const std::string& RdmaRendezvous::task_name(std::int32_t task) const {
  static const std::string unknown = "an unknown task";
  if (task < 0 || static_cast<std::size_t>(task) >= settings_.task_names.size()) return unknown;
  return settings_.task_names[static_cast<std::size_t>(task)];
}

// -- the control plane ------------------------------------------------------------------------

Result<std::string> RdmaRendezvous::channel(std::int32_t peer, std::uint64_t incarnation,
                                            std::string_view offered) {
  if (peer < 0 || static_cast<std::size_t>(peer) >= settings_.task_names.size() || peer == task()) {
    return Status(Code::kInvalidArgument, "no such peer task: " + std::to_string(peer));
  }
  std::optional<ChannelDescription> remote;
  if (!offered.empty()) {
    auto parsed = ChannelDescription::parse(offered);
    if (!parsed.ok()) {
      return Status(Code::kInvalidArgument, task_name(peer) +
                                                " offered a channel description this task refuses: " +
                                                parsed.status().message());
    }
    remote = parsed.take();
  }
  std::shared_ptr<RdmaChannel> old, channel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status(Code::kCancelled, "the server stopped");
    auto it = channels_.find(peer);
    if (it != channels_.end()) {
      channel = it->second;
      if (channel->incarnation() == incarnation && !channel->error() &&
          (!remote || channel->accepts(*remote))) {
        return channel->description();
      }
      old = std::move(channel);
    }
    // the receive queue: the messages' receives and one for each request in flight
    const int depth = settings_.verbs.queue_depth;
    const int receives = depth + static_cast<int>(RdmaChannel::message_receives(settings_.slots));
    auto qp = context_->create_qp(pd_, cq_, cq_, verbs::QpCaps{depth, receives});
    if (!qp.ok()) return qp.status();
    auto buffer = RdmaMessageBuffer::create(*pd_, settings_.slots);
    if (!buffer.ok()) return buffer.status();
    channel = std::make_shared<RdmaChannel>(*this, peer, incarnation, qp.take(), buffer.take(),
                                            max_message_bytes_, provider_,
                                            static_cast<std::uint32_t>(depth));
    Status started = channel->start();
    if (!started.ok()) return started;
    adapter_->attach(channel);
    channels_[peer] = channel;
  }
  if (old) {
    // the same incarnation set the channel up again: what was asked on it is asked again
    const bool restarted = old->incarnation() != incarnation;
    const Status why = replaced(*old, restarted);
    const bool transient = !restarted && !old->error();
    old->fail(why, transient);  // (still attached: the flush of a read it posted comes there)
    if (restarted) {  // what the last incarnation was asked for is gone with it
      for (auto& request : take_held(peer)) request->give_up(why);
    } else if (transient) {
      // the peer connects its side next; if it never does, this side sets it up again
      channel_lost(peer);
    }
  }
  return channel->description();
}

Status RdmaRendezvous::connect(std::int32_t peer, std::uint64_t incarnation, std::string_view remote) {
  const Result<ChannelDescription> description = ChannelDescription::parse(remote);
  if (!description.ok()) {
    return Status(Code::kInvalidArgument, task_name(peer) +
                                              " sent a channel description this task refuses: " +
                                              description.status().message());
  }
  std::shared_ptr<RdmaChannel> channel = find_channel(peer);
  if (!channel || channel->incarnation() != incarnation) {
    return Status(Code::kFailedPrecondition, "no verbs channel to " + task_name(peer) + " to connect");
  }
  Status connected = channel->connect(description.value());
  if (connected.ok()) {
    counters_.add(counters_.channels_connected);
    for (auto& request : take_held(peer)) resume(request, channel);
  }
  return connected;
}

void RdmaRendezvous::fail_channel(std::int32_t peer, const Status& why, bool transient,
                                  std::optional<std::uint64_t> incarnation) {
  std::shared_ptr<RdmaChannel> channel = find_channel(peer);
  if (incarnation && channel && channel->incarnation() != *incarnation) return;  // a later one's
  if (transient) {
    if (channel && channel->fail(why, true)) channel_lost(peer);
    return;
  }
  if (channel) channel->fail(why);
  for (auto& request : take_held(peer)) request->give_up(why);
}

bool RdmaRendezvous::hold(const std::shared_ptr<RdmaTensorRequest>& request,
                          std::string* why_not) {
  std::shared_ptr<RdmaChannel> channel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!settings_.recover || stopped_) {
      if (why_not) {
        *why_not = stopped_ ? "this task stopped" : "this task does not recover channels";
      }
      return false;
    }
    auto it = channels_.find(request->peer());
    if (it == channels_.end() || (!it->second->gone() && !it->second->ready())) {
      held_[request->peer()].push_back(request);
      return true;
    }
    channel = it->second;  // set up again already, or gone
  }
  if (channel->gone()) {  // the peer is gone (the reason under the channel's lock, not ours)
    if (why_not) *why_not = "its channel failed for good (" + channel->gone_reason() + ")";
    return false;
  }
  resume(request, channel);
  return true;
}

void RdmaRendezvous::resume(const std::shared_ptr<RdmaTensorRequest>& request,
                            const std::shared_ptr<RdmaChannel>& channel) {
  if (channel->incarnation() == request->incarnation()) {
    request->resume(channel);
    return;
  }
  // the peer restarted meanwhile: what its last incarnation was asked for is gone
  request->give_up(replaced(*channel, true));
}

std::vector<std::shared_ptr<RdmaTensorRequest>> RdmaRendezvous::take_held(std::int32_t peer) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(peer);
  if (it == held_.end()) return {};
  std::vector<std::shared_ptr<RdmaTensorRequest>> held = std::move(it->second);
  held_.erase(it);
  return held;
}

void RdmaRendezvous::channel_lost(std::int32_t peer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!settings_.recover || stopped_ ||
        std::find(lost_.begin(), lost_.end(), peer) != lost_.end()) {
      return;
    }
    lost_.push_back(peer);
  }
  lost_ready_.notify_all();
}

std::optional<std::int32_t> RdmaRendezvous::next_lost(double timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  const auto some = [this] { return stopped_ || lost_ended_ || !lost_.empty(); };
  if (timeout < 0) {
    lost_ready_.wait(lock, some);
  } else if (!lost_ready_.wait_for(lock, std::chrono::duration<double>(timeout), some)) {
    return std::nullopt;
  }
  if (stopped_ || lost_ended_) return std::nullopt;
  const std::int32_t peer = lost_.front();
  lost_.pop_front();
  return peer;
}

void RdmaRendezvous::end_lost() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    lost_ended_ = true;
  }
  lost_ready_.notify_all();
}

bool RdmaRendezvous::ready(std::int32_t peer) const {
  auto channel = find_channel(peer);
  return channel && channel->ready();
}

std::shared_ptr<RdmaChannel> RdmaRendezvous::find_channel(std::int32_t peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = channels_.find(peer);
  return it == channels_.end() ? nullptr : it->second;
}

// -- tensors ---------------------------------------------------------------------------------------

Status RdmaRendezvous::send(std::int64_t step, std::int32_t dst, std::string name, TensorValue value) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return Status(Code::kFailedPrecondition, "the server is stopped");
  }
  return table_.send(step, RendezvousKey{task(), dst, std::move(name)}, std::move(value));
}

std::vector<Status> RdmaRendezvous::broadcast(std::int64_t step,
                                              const std::vector<std::int32_t>& dsts,
                                              const std::string& name, TensorValue value,
                                              std::vector<std::shared_ptr<SendTicket>> tickets) {
  const TensorValue own = value;  // this task's own recv gets the sender's bytes as they are
  if (dsts.size() > 1) {
    const std::size_t size = value.size();  // each receiver's send takes all of it
    value = register_once(std::move(value), size, *pool_, *pd_, counters_);
  }
  std::vector<Status> done;
  done.reserve(dsts.size());
  for (std::size_t i = 0; i < dsts.size(); ++i) {
    TensorValue copy = dsts[i] == task() ? own : value;
    copy.ticket = i < tickets.size() ? tickets[i] : nullptr;
    done.push_back(send(step, dsts[i], name, std::move(copy)));
  }
  return done;
}

std::shared_ptr<PendingRecv> RdmaRendezvous::recv(std::int64_t step, std::int32_t src,
                                                  std::string name, double timeout,
                                                  std::shared_ptr<RecvCallback> caller,
                                                  std::optional<RecvDestination> destination) {
  StepKey key{step, RendezvousKey{src, task(), std::move(name)}};
  const std::string what = "recv of '" + key.key.name + "' from " + task_name(src) + " at step " +
                           std::to_string(step);
  std::shared_ptr<PendingRecv> recv;
  if (src == task()) {
    auto local = std::make_shared<LocalRecv>(table_, key, what, caller, std::move(destination));
    (void)recvs_.track(local);  // no tensor of this task's own comes late
    add_deadline(timeout, local);
    local->start();
    return local;
  }
  if (auto aborted = table_.start_recv(step)) {
    caller->complete(RecvResult{*aborted, TensorValue{}});
    return nullptr;
  }
  if (auto late = recvs_.take_late(key)) {
    caller->complete(RecvResult{Status(), std::move(*late)});
    return nullptr;
  }
  std::shared_ptr<RdmaChannel> channel = find_channel(src);
  // a channel that broke under the transport, of a task that recovers channels, holds the
  // request (start() finds it failed) until the control plane sets it up again
  const bool held = channel && settings_.recover && !channel->gone();
  if (!channel || (!held && !channel->ready())) {
    const std::optional<Status> error = channel ? channel->error() : std::nullopt;
    caller->complete(RecvResult{error ? *error
                                      : Status(Code::kFailedPrecondition,
                                               what + ": no verbs channel to " + task_name(src)),
                                TensorValue{}});
    return nullptr;
  }
  auto request =
      std::make_shared<RdmaTensorRequest>(*this, channel, key, caller, std::move(destination));
  add_deadline(timeout, request);
  start_request(request);  // a late tensor may have come back since the check above
  return request;
}

void RdmaRendezvous::start_request(const std::shared_ptr<RdmaTensorRequest>& request) {
  if (auto late = recvs_.track(request)) {  // untracked: it takes the tensor
    TensorValue value = std::move(*late);
    if (!request->hand_over(value)) keep_late(request->key(), std::move(value));
    return;
  }
  request->start();
}

void RdmaRendezvous::add_hold(const std::shared_ptr<RdmaTensorResponse>& response) {
  const auto after = std::chrono::duration_cast<RdmaAdapter::Clock::duration>(
      std::chrono::duration<double>(settings_.hold_seconds));
  adapter_->add_deadline(RdmaAdapter::Clock::now() + after, settings_.hold_seconds, response);
}

void RdmaRendezvous::add_deadline(double timeout, const std::shared_ptr<PendingRecv>& recv) {
  if (timeout < 0) return;
  const auto after = std::chrono::duration_cast<RdmaAdapter::Clock::duration>(std::chrono::duration<double>(timeout));
  adapter_->add_deadline(RdmaAdapter::Clock::now() + after, timeout, recv);
}

void RdmaRendezvous::abort_step(std::int64_t step, const Status& why) {
  table_.abort_step(step, why);
  recvs_.abort_step(step, why);
}

void RdmaRendezvous::cleanup_step(std::int64_t step) {
  table_.cleanup_step(step);
  recvs_.cleanup_step(step);
}

std::optional<TensorValue> RdmaRendezvous::copy_of(const TensorValue& value) {
  std::shared_ptr<const void> keepalive;
  std::uint8_t* data = nullptr;
  if (auto pooled = pool_->allocate(value.size()); pooled.ok()) {
    PoolBuffer buffer = pooled.take();
    data = buffer->data();
    keepalive = std::move(buffer);
  } else {  // the pool is full: the heap holds it (it only goes to a local recv)
    std::shared_ptr<std::uint8_t[]> heap(new (std::nothrow) std::uint8_t[std::max<std::size_t>(value.size(), 1)]);
    if (!heap) return std::nullopt;
    data = heap.get();
    keepalive = std::move(heap);
  }
  if (value.size()) std::memcpy(data, value.data, value.size());
  return TensorValue{value.meta, data, std::move(keepalive)};
}

void RdmaRendezvous::keep_late(const StepKey& key, TensorValue value) {
  if (key.key.src == task()) {
    table_.requeue(key.step, key.key, std::move(value));
    return;
  }
  if (table_.drops_late(key.step)) return;  // (it would bring the step back, for nobody)
  if (value.borrowed) {  // its caller may reuse that memory: the next recv gets a copy
    std::optional<TensorValue> copy = copy_of(value);
    if (!copy) return;  // no memory left anywhere to keep it in
    value = std::move(*copy);
  }
  recvs_.hand_over(key, std::move(value));
  // a clean-up of the step since the look above dropped its late tensors before this one
  if (table_.drops_late(key.step)) recvs_.cleanup_step(key.step);
}

void RdmaRendezvous::on_tensor_request(const std::shared_ptr<RdmaChannel>& channel,
                                       const RdmaMessage& message) {
  // (made before it is known to be wanted: a std::function to make it would allocate too)
  auto response = std::make_shared<RdmaTensorResponse>(*this, channel, message);
  if (channel->add_response(message, response)) {
    response->start();
  }
}

Result<PoolBuffer> RdmaRendezvous::allocate(std::size_t nbytes) { return pool_->allocate(nbytes); }

void RdmaRendezvous::quarantine(std::function<bool()> quiesced) {
  quarantine_.add(std::move(quiesced));
  adapter_->wants_housekeeping();
}

void RdmaRendezvous::wants_housekeeping() { adapter_->wants_housekeeping(); }

bool RdmaRendezvous::housekeeping() {
  bool left = quarantine_.check();
  std::vector<std::shared_ptr<RdmaChannel>> channels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [peer, channel] : channels_) channels.push_back(channel);
  }
  for (auto& channel : channels) left = channel->drain() || left;
  return left;
}

std::string RdmaRendezvous::describe_channels() const {
  std::vector<std::shared_ptr<RdmaChannel>> channels;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [peer, channel] : channels_) channels.push_back(channel);
  }
  std::string out;
  for (const auto& channel : channels) out += channel->describe() + "\n";
  return out;
}

std::vector<std::pair<std::string, std::uint64_t>> RdmaRendezvous::stats() const {
  auto out = counters_.snapshot();
  std::vector<std::shared_ptr<RdmaChannel>> open;
  {
    std::lock_guard<std::mutex> lock(mu_);
    open.reserve(channels_.size());
    for (const auto& [peer, channel] : channels_) open.push_back(channel);
  }
  const std::size_t channels = open.size();
  verbs::LinkStats links;  // over every channel's queue pair (its lock, not this one's)
  for (const auto& channel : open) {
    const verbs::LinkStats each = channel->link_stats();
    links.live += each.live;
    links.breaks += each.breaks;
    links.rejoins += each.rejoins;
  }
  out.emplace_back("links_live", links.live);
  out.emplace_back("link_breaks", links.breaks);
  out.emplace_back("link_rejoins", links.rejoins);
  // every channel's message buffer (the pool's blocks are counted apart)
  out.emplace_back("message_buffer_bytes",
                   channels * RdmaMessageBuffer::registered_bytes(settings_.slots));
  const PoolStats pool = pool_->stats();
  out.emplace_back("registered_bytes", pool.registered_bytes);
  out.emplace_back("pool_in_use_bytes", pool.in_use_bytes);
  out.emplace_back("registrations", pool.registrations);
  return out;
}

void RdmaRendezvous::stop() {
  std::unordered_map<std::int32_t, std::shared_ptr<RdmaChannel>> channels;
  std::unordered_map<std::int32_t, std::vector<std::shared_ptr<RdmaTensorRequest>>> held;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
    channels.swap(channels_);
    held.swap(held_);  // tracked: stopping the recvs ends them (kept alive until then)
  }
  table_.unmatched().end();
  if (!adapter_) return;  // open() failed before it was running: nothing was made to stop
  lost_ready_.notify_all();
  // the ACKs of the messages taken last leave first: else their senders take the tensors as
  // never received (a flush waits for them, a restarted receiver would get them again)
  adapter_->linger(kLinger);
  recvs_.stop();
  for (auto& [peer, channel] : channels) channel->fail(Status(Code::kUnavailable, channel->name() + " was closed"));
  adapter_->stop();
  // no completion is taken any more: what waits for a read's end or a flush of receives is
  // let go now (on the channels replaced earlier too)
  for (auto& channel : adapter_->channels()) {
    channel->abandon_reads();
    channel->abandon_writes();
    channel->drained();
  }
  quarantine_.check();
  channels.clear();
  pool_->close();
}

}  // namespace tensorverbs
