#include "verbs/soft/stream.h"

#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "verbs/soft/fd_passing.h"

namespace tensorverbs::verbs::soft {
namespace {

constexpr std::size_t kRxBuffer = 256 << 10;
constexpr std::size_t kMaxIov = 64;
// descriptors held ahead of the frames that use them: the answers to the segments a queue
// pair asks for (PeerMemory::kMaxRequested at most in flight), and no more
constexpr std::size_t kMaxHeldFds = 64;

}  // namespace

TxItem frame_item(const FrameHeader& header) {
  TxItem item;
  encode_frame(header, item.header.data());
  return item;
}

Stream::Stream(UniqueFd fd, bool is_unix) : fd_(std::move(fd)), unix_(is_unix), rx_(kRxBuffer) {}

Stream::~Stream() = default;

void Stream::set_write_watch(std::function<void(bool)> watch) {
  std::lock_guard lock(tx_mu_);
  watch_ = std::move(watch);
}

Status Stream::send(TxItem* items, std::size_t count) {
  std::lock_guard lock(tx_mu_);
  if (broken_) return Status(Code::kUnavailable, broken_why_);
  for (std::size_t i = 0; i < count; ++i) {
    TxItem& item = items[i];
    if (!item.owned.empty()) {
      item.payload = reinterpret_cast<const std::uint8_t*>(item.owned.data());
      item.payload_len = item.owned.size();
    }
    tx_.push_back(std::move(item));
    if (!tx_.back().owned.empty()) {  // the string moved: point into the queued copy
      tx_.back().payload = reinterpret_cast<const std::uint8_t*>(tx_.back().owned.data());
    }
  }
  Status pushed = push_locked();
  for (TxItem& item : tx_) {
    if (!item.copy_if_queued) continue;
    item.copy_if_queued = false;
    const std::size_t done = item.sent > kFrameHeaderBytes ? item.sent - kFrameHeaderBytes : 0;
    std::string rest(reinterpret_cast<const char*>(item.payload) + done, item.payload_len - done);
    item.owned = std::move(rest);
    item.payload = reinterpret_cast<const std::uint8_t*>(item.owned.data());
    item.payload_len = item.owned.size();
    if (item.sent > kFrameHeaderBytes) item.sent = kFrameHeaderBytes;
  }
  return pushed;
}

Status Stream::flush() {
  std::lock_guard lock(tx_mu_);
  if (broken_) return Status(Code::kUnavailable, broken_why_);
  return push_locked();
}

Status Stream::push_locked() {
  while (!tx_.empty()) {
    iovec iov[kMaxIov];
    int iovcnt = 0;
    int fd = -1;
    std::size_t fd_item = 0;
    for (std::size_t i = 0; i < tx_.size() && static_cast<std::size_t>(iovcnt) + 2 <= kMaxIov; ++i) {
      TxItem& item = tx_[i];
      if (item.fd >= 0) {
        if (fd >= 0) break;  // one descriptor per message
        fd = item.fd;
        fd_item = i;
      }
      std::size_t skip = item.sent;
      if (skip < kFrameHeaderBytes) {
        iov[iovcnt++] = {item.header.data() + skip, kFrameHeaderBytes - skip};
        skip = 0;
      } else {
        skip -= kFrameHeaderBytes;
      }
      if (item.payload_len > skip) {
        iov[iovcnt++] = {const_cast<std::uint8_t*>(item.payload) + skip, item.payload_len - skip};
      }
    }
    const ssize_t n = send_with_fds(fd_.get(), iov, iovcnt, &fd, fd >= 0 ? 1 : 0, MSG_DONTWAIT);
    if (n < 0) {
      if (n == -EAGAIN) break;
      broken_ = true;
      broken_why_ = "the connection to the peer broke: " + errno_text(n);
      tx_.clear();
      return Status(Code::kUnavailable, broken_why_);
    }
    if (fd >= 0) tx_[fd_item].fd = -1;  // it went with the first byte sent
    auto left = static_cast<std::size_t>(n);
    while (!tx_.empty() && left >= tx_.front().size() - tx_.front().sent) {
      left -= tx_.front().size() - tx_.front().sent;
      tx_.pop_front();
    }
    if (left > 0) {
      tx_.front().sent += left;
      break;  // the socket is full
    }
  }
  const bool want = !tx_.empty();
  if (want != watching_) {
    watching_ = want;
    if (watch_) watch_(want);
  }
  return ok_status();
}

Stream::Io Stream::receive(iovec* iov, std::size_t* got, std::string* error) {
  ssize_t n;
  if (unix_) {
    std::vector<UniqueFd> fds;
    n = recv_with_fds(fd_.get(), iov, 1, &fds, MSG_DONTWAIT);
    for (UniqueFd& fd : fds) fds_.push_back(std::move(fd));
    if (fds_.size() > kMaxHeldFds) {
      *error = "protocol error: the peer sent more descriptors than frames that use them";
      return Io::kError;
    }
  } else {
    do {
      n = ::recv(fd_.get(), iov->iov_base, iov->iov_len, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0) n = -errno;
  }
  if (n == 0) return Io::kClosed;
  if (n < 0) {
    if (n == -EAGAIN) return Io::kAgain;
    *error = "the connection to the peer broke: " + errno_text(n);
    return Io::kError;
  }
  *got = static_cast<std::size_t>(n);
  return Io::kOk;
}

Stream::Io Stream::fill(std::string* error) {
  if (head_ == tail_) {
    head_ = tail_ = 0;
  } else if (tail_ == rx_.size() || rx_.size() - tail_ < kFrameHeaderBytes) {
    std::memmove(rx_.data(), rx_.data() + head_, tail_ - head_);
    tail_ -= head_;
    head_ = 0;
  }
  iovec iov{rx_.data() + tail_, rx_.size() - tail_};
  std::size_t got = 0;
  const Io io = receive(&iov, &got, error);
  if (io == Io::kOk) tail_ += got;
  return io;
}

Stream::Io Stream::read_into(std::uint8_t* dst, std::size_t len, std::size_t* got,
                             std::string* error) {
  iovec iov{dst, len};
  return receive(&iov, got, error);
}

UniqueFd Stream::take_fd() {
  if (fds_.empty()) return UniqueFd();
  UniqueFd fd = std::move(fds_.front());
  fds_.pop_front();
  return fd;
}

void Stream::shutdown() {
  ::shutdown(fd_.get(), SHUT_RDWR);
  std::lock_guard lock(tx_mu_);
  broken_ = true;
  broken_why_ = "the connection was closed";
  tx_.clear();
}

}  // namespace tensorverbs::verbs::soft
