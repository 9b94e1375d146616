#include "verbs/ibverbs/ib_memory_window.h"

#include <sys/random.h>

#include <cerrno>
#include <utility>

#include "verbs/ibverbs/ib_memory_region.h"
#include "verbs/ibverbs/ib_queue_pair.h"
#include "verbs/ibverbs/ib_region_window.h"

namespace tensorverbs::verbs::ibverbs {
namespace {

// The key of the next bind of a window whose key is `current`: the device's index (the
// upper 24 bits) with a key byte drawn at random, never the one it has, so that a peer
// that saw one key of the window cannot name the next (ibv_inc_rkey's would be the byte
// plus one). Only 8 bits: the device checks no more of a type 2 window's key.
std::uint32_t next_rkey(std::uint32_t current) {
  std::uint8_t byte = 0;
  do {
    if (::getrandom(&byte, sizeof(byte), 0) != static_cast<ssize_t>(sizeof(byte))) {
      return ibv_inc_rkey(current);
    }
  } while (byte == (current & 0xFF));
  return (current & 0xFFFFFF00u) | byte;
}

}  // namespace

IbMemoryWindow::IbMemoryWindow(std::shared_ptr<IbQueuePair> qp, ibv_mw* mw, std::uint64_t addr,
                               std::size_t length, std::uint32_t rkey)
    : MemoryWindow(addr, length, rkey), qp_(std::move(qp)), mw_(mw) {}

IbMemoryWindow::~IbMemoryWindow() {
  std::lock_guard<std::mutex> lock(mu_);
  revoked_ = true;
  if (!invalidate() && mw_ != nullptr) {
    // no room in the send queue for the invalidation: deallocating invalidates too (a bind
    // of it still queued then fails, taking the queue pair to the error state)
    ibv_dealloc_mw(mw_);
    mw_ = nullptr;
  }
}

Result<std::unique_ptr<MemoryWindow>> IbMemoryWindow::bind(std::shared_ptr<IbQueuePair> qp,
                                                           const MemoryRegion& region,
                                                           std::uint64_t addr, std::size_t length,
                                                           std::uint32_t access) {
  Result<const IbMemoryRegion*> checked = check_window(qp->pd(), region, addr, length, access);
  if (!checked.ok()) return checked.status();
  int error = 0;
  ibv_mw* mw = qp->take_window(&error);
  if (mw == nullptr) {
    return Status(error == EOPNOTSUPP ? Code::kUnimplemented : Code::kResourceExhausted,
                  "allocating a type 2 memory window on " + qp->context().where() + ": " +
                      errno_text(error));
  }
  const std::uint32_t rkey = next_rkey(mw->rkey);
  std::unique_ptr<IbMemoryWindow> window(new IbMemoryWindow(qp, mw, addr, length, rkey));
  Status status = qp->post_bind(mw, rkey, checked.value()->raw(), addr, length,
                                static_cast<int>(access),  // IBV_ACCESS_REMOTE_* bits
                                window->bound_);
  if (!status.ok()) {
    window->mw_ = nullptr;
    window->done_ = true;
    qp->return_window(mw);  // never bound
    return status;
  }
  mw->rkey = rkey;  // what the next bind of this window names it by
  return std::unique_ptr<MemoryWindow>(window.release());
}

bool IbMemoryWindow::invalidate() {
  if (done_) return true;
  if (qp_->state() == QpState::kError) {
    // an erroring queue pair takes no remote access; deallocating unbinds the window
    if (mw_ != nullptr) ibv_dealloc_mw(mw_);
    mw_ = nullptr;
    done_ = true;
    return true;
  }
  if (mw_ != nullptr && bound_->load(std::memory_order_acquire)) {
    // the bind has run: deallocating invalidates the window before it returns
    ibv_dealloc_mw(mw_);
    mw_ = nullptr;
    done_ = true;
    return true;
  }
  if (mw_ != nullptr) {
    if (!qp_->post_invalidate(rkey(), invalidated_)) return false;  // tried again later
    qp_->return_window(mw_);
    mw_ = nullptr;
  }
  done_ = invalidated_->load(std::memory_order_acquire);
  return done_;
}

bool IbMemoryWindow::revoke() {
  std::lock_guard<std::mutex> lock(mu_);
  revoked_ = true;
  return invalidate();
}

bool IbMemoryWindow::quiesced() {
  std::lock_guard<std::mutex> lock(mu_);
  return revoked_ && invalidate();
}

}  // namespace tensorverbs::verbs::ibverbs
