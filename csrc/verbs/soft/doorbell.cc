#include "verbs/soft/doorbell.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>

#include "verbs/soft/fd_passing.h"

namespace tensorverbs::verbs::soft {
namespace {

std::atomic<std::uint64_t> g_doorbell_writes{0};

void write_eventfd(int fd) {
  const std::uint64_t one = 1;
  ssize_t n;
  do {
    n = ::write(fd, &one, sizeof(one));
  } while (n < 0 && errno == EINTR);
  // EAGAIN: the count is at its maximum, the sleeper wakes anyway
}

}  // namespace

std::uint64_t doorbell_writes() { return g_doorbell_writes.load(std::memory_order_relaxed); }

Result<std::unique_ptr<Doorbell>> Doorbell::create() {
  UniqueFd fd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
  if (!fd.valid()) {
    return Status(Code::kResourceExhausted, "cannot create an eventfd: " + errno_text(errno));
  }
  return std::unique_ptr<Doorbell>(new Doorbell(std::move(fd)));
}

void drain_eventfd(int fd) {
  std::uint64_t count;
  while (::read(fd, &count, sizeof(count)) < 0 && errno == EINTR) {
  }
}

void Doorbell::drain() const { drain_eventfd(fd_.get()); }

void Doorbell::ring() const { write_eventfd(fd_.get()); }

Result<std::unique_ptr<PeerDoorbell>> PeerDoorbell::adopt(UniqueFd fd,
                                                         std::shared_ptr<KeyTableView> table) {
  if (!is_eventfd(fd.get())) {
    return Status(Code::kInvalidArgument, "the peer's doorbell is not an eventfd");
  }
  return std::unique_ptr<PeerDoorbell>(new PeerDoorbell(std::move(fd), std::move(table)));
}

bool PeerDoorbell::ring_if_sleeping() const {
  // the caller's publication was a seq_cst store: this seq_cst load is ordered after it
  if (table_->waiting().load(std::memory_order_seq_cst) == 0) return false;
  g_doorbell_writes.fetch_add(1, std::memory_order_relaxed);
  write_eventfd(fd_.get());
  return true;
}

}  // namespace tensorverbs::verbs::soft
