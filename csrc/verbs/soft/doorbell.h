// Doorbells: how a process wakes a peer context that sleeps. Each context has an eventfd
// (in its epoll set) and a `waiting` flag in the header of its key table, set while it
// sleeps. A producer that published something for the peer calls ring_if_sleeping():
// after a seq_cst fence it reads the peer's flag and writes the eventfd only if the peer
// sleeps, so a spinning peer costs no system call. The sleeper sets its flag and checks
// once more for work before it sleeps (the classic lost-wakeup check). Both sides use
// seq_cst stores and loads (no fences, which ThreadSanitizer does not model): the
// publication, then the flag; the flag, then the last look.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "core/status.h"
#include "verbs/soft/key_table.h"
#include "verbs/soft/unique_fd.h"

namespace tensorverbs::verbs::soft {

// This context's own doorbell.
class Doorbell {
 public:
  static Result<std::unique_ptr<Doorbell>> create();
  int fd() const { return fd_.get(); }
  void drain() const;  // reads the count (after a wake-up)
  void ring() const;   // from this process (wakes its own sleeper)

 private:
  explicit Doorbell(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

// A peer context's doorbell and `waiting` flag.
class PeerDoorbell {
 public:
  // `fd` must be an eventfd (checked); `table` is the peer's key table, holding the flag.
  static Result<std::unique_ptr<PeerDoorbell>> adopt(UniqueFd fd,
                                                     std::shared_ptr<KeyTableView> table);
  // After a seq_cst store that published something: writes the eventfd if the peer
  // sleeps; true when it did (a system call was made).
  bool ring_if_sleeping() const;
  const KeyTableView& table() const { return *table_; }

 private:
  PeerDoorbell(UniqueFd fd, std::shared_ptr<KeyTableView> table)
      : fd_(std::move(fd)), table_(std::move(table)) {}
  UniqueFd fd_;
  std::shared_ptr<KeyTableView> table_;
};

// Reads an eventfd's count (after a wake-up), retrying on EINTR; a count already read
// (EAGAIN on a non-blocking eventfd) is no error.
void drain_eventfd(int fd);

// Counts doorbell writes (system calls) made by this process, for tests.
std::uint64_t doorbell_writes();

}  // namespace tensorverbs::verbs::soft
