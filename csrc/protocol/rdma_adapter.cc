#include "protocol/rdma_adapter.h"

#include <algorithm>
#include <functional>
#include <iterator>
#include <string>

#include "core/thread_guard.h"
#include "core/thread_name.h"
#include "verbs/work.h"

namespace tensorverbs {

namespace {

constexpr int kBatch = 64;
constexpr int kHousekeepingMs = 10;
// How often a lingering thread looks again whether the channels are quiet (their last sends
// complete on the queue, which wakes it sooner).
constexpr int kLingerMs = 1;

// The handler of what a channel's handling throws: it fails that channel, with the reason.
auto failing(const std::shared_ptr<RdmaChannel>& channel) {
  return [&channel](const char* what) {
    channel->fail(Status(Code::kInternal, channel->name() + " failed: " + what +
                                              " (thrown in the completion thread)"));
  };
}

}  // namespace

RdmaAdapter::RdmaAdapter(std::shared_ptr<verbs::CompletionQueue> cq,
                         std::function<bool()> housekeeping)
    : cq_(std::move(cq)), housekeeping_(std::move(housekeeping)) {}

RdmaAdapter::~RdmaAdapter() { stop(); }

void RdmaAdapter::attach(const std::shared_ptr<RdmaChannel>& channel) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = channels_.begin(); it != channels_.end();) {  // (channels gone leave nothing)
    it = it->second.expired() ? channels_.erase(it) : std::next(it);
  }
  channels_[channel->qp_num()] = channel;
}

std::vector<std::shared_ptr<RdmaChannel>> RdmaAdapter::channels() {
  std::vector<std::shared_ptr<RdmaChannel>> channels;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [qp_num, weak] : channels_) {
    if (auto channel = weak.lock()) channels.push_back(std::move(channel));
  }
  return channels;
}

void RdmaAdapter::add_deadline(Clock::time_point when, double timeout,
                               std::weak_ptr<Expiring> what) {
  bool earliest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (deadlines_.size() >= sweep_at_) {  // recvs that finished leave nothing behind
      deadlines_.erase(std::remove_if(deadlines_.begin(), deadlines_.end(),
                                      [](const Deadline& d) { return d.what.expired(); }),
                       deadlines_.end());
      std::make_heap(deadlines_.begin(), deadlines_.end(), std::greater<Deadline>());
      sweep_at_ = std::max<std::size_t>(1024, 2 * deadlines_.size());
    }
    earliest = deadlines_.empty() || when < deadlines_.front().when;
    deadlines_.push_back(Deadline{when, timeout, std::move(what)});
    std::push_heap(deadlines_.begin(), deadlines_.end(), std::greater<Deadline>());
  }
  if (earliest) cq_->wake();
}

void RdmaAdapter::wants_housekeeping() {
  if (!housekeeping_wanted_.exchange(true)) cq_->wake();
}

void RdmaAdapter::start() {
  thread_ = std::thread([this] {
    name_thread("tv-completion");
    run();
  });
}

void RdmaAdapter::linger(std::chrono::milliseconds bound) {
  if (!thread_.joinable() || std::this_thread::get_id() == thread_.get_id()) return;
  std::unique_lock<std::mutex> lock(mu_);
  lingering_ = true;
  cq_->wake();
  quiet_.wait_for(lock, bound, [this] { return !lingering_.load(); });
  lingering_ = false;
}

void RdmaAdapter::check_quiet() {
  bool quiet = true;
  for (auto& channel : channels()) {
    run_guarded([&] { quiet = channel->quiet() && quiet; }, failing(channel));
  }
  if (quiet) {
    std::lock_guard<std::mutex> lock(mu_);
    lingering_ = false;
    quiet_.notify_all();
  }
}

void RdmaAdapter::stop() {
  if (!thread_.joinable()) return;
  stopping_ = true;
  cq_->wake();
  thread_.join();
}

int RdmaAdapter::wait_ms() {
  if (lingering_) return kLingerMs;
  int ms = housekeeping_wanted_ ? kHousekeepingMs : -1;
  std::lock_guard<std::mutex> lock(mu_);
  // deadlines of recvs that are gone are dropped here, so they cannot pile up
  while (!deadlines_.empty() && deadlines_.front().what.expired()) {
    std::pop_heap(deadlines_.begin(), deadlines_.end(), std::greater<Deadline>());
    deadlines_.pop_back();
  }
  if (deadlines_.empty()) return ms;
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                        deadlines_.front().when - Clock::now()).count() + 1;
  const int until = static_cast<int>(std::clamp<long long>(left, 0, 1000));
  return ms < 0 ? until : std::min(ms, until);
}

void RdmaAdapter::expire() {
  const auto now = Clock::now();
  std::vector<Deadline> due;
  {
    std::lock_guard<std::mutex> lock(mu_);
    while (!deadlines_.empty() && deadlines_.front().when <= now) {
      std::pop_heap(deadlines_.begin(), deadlines_.end(), std::greater<Deadline>());
      due.push_back(std::move(deadlines_.back()));
      deadlines_.pop_back();
    }
  }
  for (Deadline& deadline : due) {
    if (auto what = deadline.what.lock()) {
      // what a recv's caller throws as it is answered is the caller's: nothing else fails
      run_guarded([&] { what->expire(deadline.timeout); }, [](const char*) {});
    }
  }
}

void RdmaAdapter::run() {
  verbs::WorkCompletion wcs[kBatch];
  std::vector<std::shared_ptr<RdmaChannel>> touched;
  while (!stopping_) {
    const int n = cq_->wait(wcs, kBatch, wait_ms());
    for (int i = 0; i < n; ++i) {
      std::shared_ptr<RdmaChannel> channel;
      {
        std::lock_guard<std::mutex> lock(mu_);
        auto it = channels_.find(wcs[i].qp_num);
        if (it != channels_.end()) channel = it->second.lock();
      }
      if (!channel) continue;
      run_guarded(
          [&] {
            channel->on_completion(wcs[i]);
            if (std::find(touched.begin(), touched.end(), channel) == touched.end()) {
              touched.push_back(channel);
            }
          },
          failing(channel));
    }
    for (auto& channel : touched) run_guarded([&] { channel->after_batch(); }, failing(channel));
    touched.clear();
    if (n < kBatch) caught_up_.fetch_add(1, std::memory_order_acq_rel);
    expire();
    if (housekeeping_wanted_.exchange(false)) {
      // a housekeeping that throws is tried again after the next batch
      bool again = true;
      run_guarded([&] { again = housekeeping_(); }, [](const char*) {});
      if (again) housekeeping_wanted_ = true;
    }
    if (lingering_) check_quiet();
  }
}

}  // namespace tensorverbs
