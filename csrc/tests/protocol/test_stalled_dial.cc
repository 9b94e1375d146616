// A peer that never answers its dial delays only what is addressed to it: while one channel
// dials a peer that took the connection and never speaks, the other channels of the task
// move tensors, their backlog drained by the adapter's housekeeping (which visits every
// channel), and the task describes its channels.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "protocol/channel_description.h"
#include "protocol/rdma_message.h"
#include "rendezvous_pair.h"
#include "verbs/soft/soft_endpoint.h"

namespace tensorverbs {
namespace {

using namespace rendezvous_testing;

constexpr std::int32_t kSilent = 2;

// A TCP listener on loopback that takes connections and never says a word.
class SilentPeer {
 public:
  SilentPeer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(fd_, 4) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
    }
    port_ = ntohs(addr.sin_port);
  }
  ~SilentPeer() {
    for (int fd : accepted_) ::close(fd);
    if (fd_ >= 0) ::close(fd_);
  }
  // A channel description whose endpoint dials this listener (over TCP).
  std::string description() const {
    verbs::soft::SoftEndpoint e;
    e.qp_num = 7;
    e.token.fill(0xFF);  // above any real token: the other side dials
    e.same_host = verbs::soft::SameHost::kNo;
    e.tcp_host = "127.0.0.1";
    e.tcp_port = port_;
    ChannelDescription d{"soft", verbs::soft::encode_endpoint(e), 4096, 1, 4 * kSlotBytes + 8, 4,
                         1u << 30};
    return d.serialize();
  }
  // Waits until the dial came in (and keeps it open, silent).
  bool wait_dialed() {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 60000) != 1) return false;
    accepted_.push_back(::accept(fd_, nullptr, nullptr));
    return accepted_.back() >= 0;
  }
  // Hangs up: the dial fails.
  void hang_up() {
    for (int fd : accepted_) ::shutdown(fd, SHUT_RDWR);
  }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
  std::vector<int> accepted_;
};

class StalledDialPair : public ShallowQueuePair {
 protected:
  void SetUp() override {
    extra_tasks_ = 1;
    ShallowQueuePair::SetUp();
  }
};

TEST_P(StalledDialPair, OtherChannelsMoveTensorsWhileADialHangs) {
  SilentPeer silent;
  ASSERT_TRUE(worker_->channel(kSilent, 3, {}).ok());
  auto dialing = std::async(std::launch::async, [&] {
    return worker_->connect(kSilent, 3, silent.description());
  });
  ASSERT_TRUE(silent.wait_dialed()) << (dialing.wait_for(std::chrono::seconds(0)) == std::future_status::ready
                                         ? dialing.get().message() : "still dialing");
  EXPECT_NE(worker_->describe_channels().find("not connected"), std::string::npos);
  // more than the shallow queues hold: the backlog is drained after batches and by the
  // housekeeping, which visits the dialing channel too
  constexpr int kCount = 100;
  std::vector<std::shared_ptr<Waiting>> waiting;
  const TensorValue sent = floats(std::size_t{1} << 14, 3.0f);
  for (int i = 0; i < kCount; ++i) {
    waiting.push_back(std::make_shared<Waiting>());
    worker_->recv(40, kPs, "s" + std::to_string(i), 60, waiting.back());
    ASSERT_TRUE(ps_->send(40, kWorker, "s" + std::to_string(i), sent).ok());
  }
  for (auto& w : waiting) {
    RecvResult got = w->get();
    ASSERT_TRUE(got.status.ok()) << got.status.message();
    EXPECT_TRUE(same(got.value, sent));
  }
  // all of it while the dial still hangs
  EXPECT_EQ(dialing.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
  silent.hang_up();
  EXPECT_FALSE(dialing.get().ok());
}

INSTANTIATE_TEST_SUITE_P(Modes, StalledDialPair, ::testing::Values(Options{false, false, "no"}),
                         mode_name);

}  // namespace
}  // namespace tensorverbs
