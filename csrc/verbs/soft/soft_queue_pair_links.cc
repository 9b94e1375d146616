// SoftQueuePair, links: the further streams to the peer, one per network link both
// contexts have, and the writes striped over them (see soft_queue_pair.h).
#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cstring>

#include "verbs/soft/soft_context.h"
#include "verbs/soft/soft_protection_domain.h"
#include "verbs/soft/soft_queue_pair.h"

namespace tensorverbs::verbs::soft {
namespace {

// What a stripe that comes early takes of the held-requests budget: its bytes and what
// keeping it costs beside them (so that tiny stripes cannot hold much more than they say).
std::size_t early_charge(std::size_t bytes) { return bytes + 4096; }

// Whether the dialer closed `sock` already (it gave the dial up: a greeting read late).
bool closed_by_peer(int sock) {
  char byte = 0;
  return ::recv(sock, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace

std::vector<std::uint64_t> SoftQueuePair::bytes_sent() const {
  std::lock_guard lock(mu_);
  return std::vector<std::uint64_t>(bytes_sent_.begin(),
                                    bytes_sent_.begin() + 1 + context_->links().size());
}

bool SoftQueuePair::in_open_write_locked(const FrameHeader& h) {
  if (h.rkey == open_.rkey && h.addr >= open_.addr && h.length <= open_.length &&
      h.addr - open_.addr <= open_.length - h.length) {
    return true;
  }
  enter_error_locked("protocol error: a stripe outside its write " + std::to_string(h.seq));
  return false;
}

void SoftQueuePair::note_link_error_locked(std::uint32_t number, const std::string& why) {
  link_errors_[number] = why;
}

std::string SoftQueuePair::link_errors() const {
  std::lock_guard lock(mu_);
  std::string all;
  for (const std::string& why : link_errors_) {
    if (!why.empty()) all += (all.empty() ? "" : "; ") + why;
  }
  return all;
}

LinkStats SoftQueuePair::link_stats() const {
  std::lock_guard lock(mu_);
  LinkStats stats = link_counts_;
  stats.live = static_cast<std::uint64_t>(std::count_if(
      links_.begin(), links_.end(), [](const std::unique_ptr<Link>& link) { return !link->broken; }));
  return stats;
}

// ------------------------------------------------------------------------- connection
void SoftQueuePair::dial_links(const SoftEndpoint& remote) {
  const std::vector<SoftLinkAddress>& mine = context_->links();
  const std::size_t count = std::min(mine.size(), remote.links.size());
  {
    std::lock_guard lock(mu_);
    remote_links_.assign(remote.links.begin(), remote.links.begin() + static_cast<std::ptrdiff_t>(count));
  }
  for (std::size_t i = 0; i < count; ++i) {
    const auto number = static_cast<std::uint32_t>(i + 1);
    auto dialed = dial_link(mine[i].tcp_host, remote.links[i], remote.token, token_, number);
    std::lock_guard lock(mu_);
    if (state_.load() != QpState::kRts || !stream_) return;
    if (dialed.ok() && find_link_locked(number) == nullptr) {
      add_link_locked(number, std::move(dialed.value().sock));
    } else if (!dialed.ok()) {  // left out for now: the other links carry its share
      note_link_error_locked(number, dialed.status().message());
      ++link_counts_.breaks;
      redial_later_locked(number);
    }
  }
}

void SoftQueuePair::redial_later_locked(std::uint32_t number) {
  // the side that dialed in waits for its peer to dial again
  if (dialed_in_ || state_.load() != QpState::kRts || !stream_ || stream_->is_unix() ||
      number == 0 || number > remote_links_.size() || redial_due_.test(number)) {
    return;
  }
  std::chrono::milliseconds& after = redial_after_[number];
  after = after.count() == 0 ? kLinkRedialFirst : std::min(after * 2, kLinkRedialMost);
  redial_due_.set(number);
  context_->redial_at(cookie_, number, std::chrono::steady_clock::now() + after);
}

void SoftQueuePair::redial_link(std::uint32_t number) {
  SoftLinkAddress remote;
  Token target{};
  {
    std::lock_guard lock(mu_);
    redial_due_.reset(number);
    if (state_.load() != QpState::kRts || !stream_ || number == 0 ||
        number > remote_links_.size() || find_link_locked(number) != nullptr) {
      return;
    }
    remote = remote_links_[number - 1];
    target = remote_token_;
  }
  auto dialed = dial_link(context_->links()[number - 1].tcp_host, remote, target, token_, number);
  std::lock_guard lock(mu_);
  if (state_.load() != QpState::kRts || !stream_ || find_link_locked(number) != nullptr) return;
  if (!dialed.ok()) {
    note_link_error_locked(number, dialed.status().message());
    redial_later_locked(number);
    return;
  }
  add_link_locked(number, std::move(dialed.value().sock));
}

void SoftQueuePair::on_link_dial_locked(const Hello& hello, UniqueFd sock, bool is_unix) {
  Hello reply = hello;
  reply.kind = HelloKind::kReply;
  reply.fd_count = 0;
  const std::uint32_t number = hello.pd;
  const bool taken = !is_unix && stream_ && !stream_->is_unix() && dialed_in_ &&
                     state_.load() != QpState::kError && dialer_token_ == hello.dialer &&
                     number >= 1 && number <= context_->links().size() && !closed_by_peer(sock.get());
  reply.status = taken ? HelloStatus::kOk : HelloStatus::kTaken;
  const Status sent = send_hello(sock.get(), reply, nullptr, 0);
  if (!taken || !sent.ok()) return;
  // the peer dials a link again once it left it out: the stream this side has of it, if
  // it did not see it break yet, is over (marked broken whatever the state: two live
  // links of one number would share its events)
  if (Link* old = find_link_locked(number)) link_broke_locked(*old, "the peer dialed it again");
  add_link_locked(number, std::move(sock));
}

void SoftQueuePair::add_link_locked(std::uint32_t number, UniqueFd sock) {
  tune_link_stream(sock.get());
  if (joined_.test(number)) ++link_counts_.rejoins;
  joined_.set(number);
  auto link = std::make_unique<Link>();
  link->number = number;
  link->stream = std::make_shared<Stream>(std::move(sock), false);
  link->cookie = context_->add_link(weak_from_this(), number);
  Link& added = *link;
  links_.push_back(std::move(link));
  if (state_.load() == QpState::kRts && stream_) watch_link_locked(added);  // (else at start)
}

void SoftQueuePair::watch_link_locked(Link& link) {
  const int fd = link.stream->fd();
  Progress* progress = &context_->progress();
  const std::uint64_t cookie = link.cookie;
  link.stream->set_write_watch([progress, fd, cookie](bool on) {
    (void)progress->watch(fd, cookie, on, false);
  });
  const Status watched = progress->watch(fd, cookie, false, true);
  if (!watched.ok()) {  // left out (dropped by prune_links_locked)
    link.broken = true;
    note_link_error_locked(link.number, "link " + std::to_string(link.number) + ": " + watched.message());
    ++link_counts_.breaks;
    redial_later_locked(link.number);
    return;
  }
  link.watched = true;
}

void SoftQueuePair::close_links_locked() {
  for (const auto& link : links_) {
    if (link->watched) context_->progress().unwatch(link->stream->fd());
    link->stream->shutdown();
    context_->remove_link(link->cookie);
  }
  links_.clear();
  stripes_.clear();
  sent_stripes_.clear();
  in_flight_bytes_ = 0;
}

SoftQueuePair::Link* SoftQueuePair::find_link_locked(std::uint32_t number) {
  for (const auto& link : links_) {
    if (link->number == number && !link->broken) return link.get();
  }
  return nullptr;
}

void SoftQueuePair::link_broke_locked(Link& link, const std::string& why) {
  if (link.broken) return;
  link.broken = true;
  note_link_error_locked(link.number, "link " + std::to_string(link.number) + " broke: " + why);
  ++link_counts_.breaks;
  if (link.watched) context_->progress().unwatch(link.stream->fd());
  link.watched = false;
  link.stream->shutdown();  // (the peer leaves it out too)
  if (link.rx.active && link.rx.sink == Sink::kBuffer) {
    held_.release(early_charge(link.rx.buffer.size()));
    link.rx.sink = Sink::kDiscard;
  }
  if (state_.load() != QpState::kRts) return;  // (nothing of this side's in flight, or failed)
  if (std::chrono::steady_clock::now() - link.joined >= kLinkRedialMost) {
    redial_after_[link.number] = {};  // it held: the waits start over
  }
  // its stripes of writes not acknowledged yet: again, on the first stream (behind their
  // writes' frames, maybe: the peer holds those until every stripe landed)
  std::vector<TxItem> again;
  for (SentStripe& stripe : sent_stripes_) {
    if (stripe.link != link.number) continue;
    stripe.link = 0;
    TxItem item = frame_item(stripe.header);
    item.payload = stripe.payload;
    item.payload_len = stripe.header.length;
    item.copy_if_queued = true;  // (a copy may outlive its write's completion)
    again.push_back(std::move(item));
  }
  send_frames_locked(again.data(), again.size());
  redial_later_locked(link.number);
}

void SoftQueuePair::prune_links_locked() {
  for (auto it = links_.begin(); it != links_.end();) {
    if ((*it)->broken) {
      context_->remove_link((*it)->cookie);
      it = links_.erase(it);
    } else {
      ++it;
    }
  }
}

// -------------------------------------------------------------------------- requester
void SoftQueuePair::send_striped_locked(FrameHeader h, const std::uint8_t* payload) {
  std::vector<Link*> live;
  for (const auto& link : links_) {
    if (!link->broken) live.push_back(link.get());
  }
  const std::uint32_t length = h.length;
  const std::uint32_t part = std::max(kStripeBytes, (length + kMaxStripes - 1) / kMaxStripes);
  const std::uint32_t count = (length + part - 1) / part;
  std::vector<TxItem> first;  // the write, then the first stream's stripes
  first.reserve(count / (live.size() + 1) + 2);
  h.flags = static_cast<std::uint16_t>(h.flags | kFlagStriped);
  h.status = static_cast<std::uint8_t>(count);
  first.push_back(frame_item(stamp_ack_locked(h)));
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::uint32_t offset = i * part;
    FrameHeader stripe;
    stripe.op = FrameOp::kStripe;
    stripe.imm = i;
    stripe.seq = h.seq;
    stripe.rkey = h.rkey;
    stripe.addr = h.addr + offset;
    stripe.length = std::min(part, length - offset);
    TxItem item = frame_item(stripe);
    item.payload = payload + offset;
    item.payload_len = stripe.length;
    const std::size_t way = i % (live.size() + 1);
    if (way == 0 || live[way - 1]->broken) {
      first.push_back(std::move(item));
      continue;
    }
    Link& link = *live[way - 1];
    sent_stripes_.push_back(SentStripe{h.seq, i, link.number, stripe, payload + offset});
    bytes_sent_[link.number] += stripe.length;
    const Status sent = link.stream->send(&item, 1);
    if (!sent.ok()) link_broke_locked(link, sent.message());  // (its stripes go again)
  }
  send_frames_locked(first.data(), first.size());
}

// -------------------------------------------------------------------------- responder
void SoftQueuePair::setup_stripe_locked(RxFrame& rx, const FrameHeader& h) {
  rx.sink = Sink::kDiscard;
  const auto ahead = static_cast<std::int32_t>(h.seq - rx_next_);
  if (ahead >= static_cast<std::int32_t>(kMaxStripedAhead)) {
    enter_error_locked("protocol error: a stripe of write " + std::to_string(h.seq) + " (" +
                       std::to_string(rx_next_) + " is the next to carry out)");
    return;
  }
  // discarded: a copy of a stripe of a write carried out (its link broke after it landed),
  // or after a refusal (the requester fails anyway)
  if (ahead < 0 || nak_sent_) return;
  Tally& tally = stripes_[h.seq];
  if (tally.landed.test(h.imm)) return;  // (landed already: this is the copy)
  if (open_seq_ != h.seq) {  // early: it waits in a buffer for its write to open
    if (!held_.reserve(early_charge(h.length))) {
      detail_ = "the peer sent more than " + std::to_string(kMaxHeldBytes >> 20) +
                " MiB ahead of the requests carried out";
      refuse_locked(h, WcStatus::kRemOpErr, detail_);
      return;
    }
    rx.sink = Sink::kBuffer;
    rx.buffer.resize(h.length);
    return;
  }
  if (!in_open_write_locked(h)) return;
  context_->keys().with_region(h.rkey, [&](const RegionInfo* region) {
    std::string why = check_remote(region, h.rkey, through(), h.addr, h.length, kRemoteWrite);
    if (!why.empty()) {  // (deregistered since the write opened)
      rx.error = WcStatus::kRemAccessErr;
      rx.why = std::move(why);
      return;
    }
    rx.sink = Sink::kRegion;
    rx.key = h.rkey;
    rx.dst = region->data + (h.addr - region->addr);
  });
}

void SoftQueuePair::stripe_landed_locked(RxFrame& rx) {
  const FrameHeader& h = rx.header;
  const auto it = stripes_.find(h.seq);
  const bool buffered = rx.sink == Sink::kBuffer;
  if (nak_sent_ || it == stripes_.end() || it->second.landed.test(h.imm)) {
    if (buffered) held_.release(early_charge(rx.buffer.size()));  // (a copy, or a refusal)
    return;
  }
  Tally& tally = it->second;
  if (rx.error != WcStatus::kSuccess && tally.error == WcStatus::kSuccess) {
    tally.error = rx.error;  // (its region was deregistered while it landed)
    tally.why = rx.why;
  }
  if (buffered) {
    Early early{h, std::move(rx.buffer)};
    if (open_seq_ == h.seq) {  // (its write opened while it came): it lands now
      held_.release(early_charge(early.payload.size()));
      if (!land_early_locked(early, tally)) return;
    } else {
      tally.early.push_back(std::move(early));  // (its bytes stay taken from the budget)
    }
  }
  tally.landed.set(h.imm);
  if (open_seq_ == h.seq && !held_.empty() && held_.front().header.seq == h.seq) drain_held_locked();
}

bool SoftQueuePair::open_striped_locked(const FrameHeader& h) {
  std::string why;
  context_->keys().with_region(h.rkey, [&](const RegionInfo* region) {
    why = check_remote(region, h.rkey, through(), h.addr, h.length, kRemoteWrite);
  });
  if (!why.empty()) {
    refuse_locked(h, WcStatus::kRemAccessErr, why);
    return false;
  }
  open_seq_ = h.seq;
  open_ = h;
  const auto it = stripes_.find(h.seq);
  if (it == stripes_.end()) return true;
  Tally& tally = it->second;
  std::vector<Early> early = std::move(tally.early);  // they land now, in their write's turn
  for (Early& one : early) {
    held_.release(early_charge(one.payload.size()));
    if (!land_early_locked(one, tally)) return false;
  }
  return true;
}

bool SoftQueuePair::land_early_locked(const Early& early, Tally& tally) {
  const FrameHeader& e = early.header;
  if (!in_open_write_locked(e)) return false;
  std::string why;
  context_->keys().with_region(e.rkey, [&](const RegionInfo* region) {
    why = check_remote(region, e.rkey, through(), e.addr, e.length, kRemoteWrite);
    if (why.empty()) std::memcpy(region->data + (e.addr - region->addr), early.payload.data(), e.length);
  });
  if (!why.empty() && tally.error == WcStatus::kSuccess) {  // (deregistered since it opened)
    tally.error = WcStatus::kRemAccessErr;
    tally.why = why;
  }
  return true;
}

bool SoftQueuePair::stripes_landed_locked(const FrameHeader& h) const {
  const auto it = stripes_.find(h.seq);
  return it != stripes_.end() && it->second.landed.count() >= h.status;
}

bool SoftQueuePair::take_stripes_locked(const FrameHeader& h) {
  Tally tally;
  for (auto it = stripes_.begin(); it != stripes_.end();) {
    if (it->first == h.seq) {
      tally = std::move(it->second);
    } else if (static_cast<std::int32_t>(it->first - h.seq) > 0) {
      ++it;  // (a later write's)
      continue;
    } else {
      for (const Early& early : it->second.early) held_.release(early_charge(early.payload.size()));
    }
    it = stripes_.erase(it);  // this write's, or an earlier one's (a copy that came late)
  }
  open_seq_ = 0;
  if (rx_.active && rx_.header.op == FrameOp::kStripe && rx_.header.seq == h.seq) {
    if (rx_.sink == Sink::kBuffer) held_.release(early_charge(rx_.buffer.size()));
    rx_.sink = Sink::kDiscard;
  }
  for (const auto& link : links_) {  // a copy still arriving lands nowhere from now on
    if (link->rx.active && link->rx.header.op == FrameOp::kStripe && link->rx.header.seq == h.seq) {
      if (link->rx.sink == Sink::kBuffer) held_.release(early_charge(link->rx.buffer.size()));
      link->rx.sink = Sink::kDiscard;
    }
  }
  if (tally.landed.count() != h.status || (tally.landed >> h.status).any()) {
    enter_error_locked("protocol error: write " + std::to_string(h.seq) + " came as " +
                       std::to_string(tally.landed.count()) + " stripes, " +
                       std::to_string(h.status) + " announced");
    return false;
  }
  if (tally.error != WcStatus::kSuccess) {
    refuse_locked(h, tally.error, tally.why);
    return false;
  }
  return true;
}

void SoftQueuePair::on_link_socket(std::uint32_t number, std::uint32_t events) {
  std::lock_guard lock(mu_);
  if (!stream_ || state_.load() != QpState::kRts) return;
  Link* link = find_link_locked(number);
  if (link == nullptr || link->broken) return;
  if ((events & EPOLLOUT) != 0) {
    const Status flushed = link->stream->flush();
    if (!flushed.ok()) {
      link_broke_locked(*link, flushed.message());
      after_reading_locked();
      return;
    }
  }
  if ((events & (EPOLLIN | EPOLLHUP | EPOLLERR | EPOLLRDHUP)) != 0) read_link_locked(*link);
  after_reading_locked();
}

void SoftQueuePair::read_link_locked(Link& link) {
  // `link` stays valid while the queue pair is connected (links close as it fails, and one
  // that broke stays until prune_links_locked()); its stream is kept here in any case
  const std::shared_ptr<Stream> stream = link.stream;
  std::size_t budget = kPassBudget;
  while (state_.load() == QpState::kRts && !link.broken) {
    RxFrame& rx = link.rx;
    if (!rx.active) {
      if (stream->buffered() < kFrameHeaderBytes) {
        if (budget == 0) return;
        std::string why;
        const Stream::Io io = stream->fill(&why);
        if (io == Stream::Io::kAgain) return;
        if (io != Stream::Io::kOk) {
          link_broke_locked(link, io == Stream::Io::kClosed ? "the peer closed it" : why);
          return;
        }
        continue;
      }
      auto decoded = decode_frame(stream->buffered_data());
      if (!decoded.ok() || decoded.value().op != FrameOp::kStripe) {
        enter_error_locked("protocol error on link " + std::to_string(link.number) + ": " +
                           (decoded.ok() ? std::string("a frame other than a stripe")
                                         : decoded.status().message()));
        return;
      }
      stream->consume(kFrameHeaderBytes);
      rx = RxFrame{};
      rx.active = true;
      rx.header = decoded.value();
      rx.left = rx.header.length;
      setup_stripe_locked(rx, rx.header);
      budget = budget > kFrameHeaderBytes ? budget - kFrameHeaderBytes : 0;
      continue;
    }
    bool progress = false;
    const std::uint32_t before = rx.left;
    payload_locked(*stream, rx, &link, &progress);
    if (state_.load() != QpState::kRts) return;
    const std::uint32_t read = before - rx.left;
    if (rx.left == 0) {
      RxFrame landed = std::move(rx);
      rx = RxFrame{};
      stripe_landed_locked(landed);  // (may fail the queue pair: `link` is checked above)
    }
    if (!progress) return;
    budget = read >= budget ? 0 : budget - read;
    if (budget == 0 && stream->buffered() == 0) return;
  }
}

}  // namespace tensorverbs::verbs::soft
