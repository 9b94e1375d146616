// MissingPages: anonymous memory whose pages stay missing (a userfaultfd serves them only
// when the test says so): a thread that touches one blocks there, which makes "while a copy
// is under way" a state a test can hold.
#pragma once

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tensorverbs::testing_memory {

class MissingPages {
 public:
  explicit MissingPages(std::size_t bytes) : bytes_(bytes) {
#ifdef UFFD_USER_MODE_ONLY  // (enough without privileges: the touches are the user's)
    uffd_ = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | UFFD_USER_MODE_ONLY));
#endif
    if (uffd_ < 0) uffd_ = static_cast<int>(::syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
    if (uffd_ < 0) {
      why_ = std::string("no userfaultfd here: ") + std::strerror(errno);
      return;
    }
    uffdio_api api{};
    api.api = UFFD_API;
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (::ioctl(uffd_, UFFDIO_API, &api) != 0 || p == MAP_FAILED) {
      why_ = std::string("cannot set up userfaultfd: ") + std::strerror(errno);
      return;
    }
    data_ = static_cast<std::uint8_t*>(p);
    uffdio_register reg{};
    reg.range.start = reinterpret_cast<std::uintptr_t>(data_);
    reg.range.len = bytes;
    reg.mode = UFFDIO_REGISTER_MODE_MISSING;
    if (::ioctl(uffd_, UFFDIO_REGISTER, &reg) != 0) {
      why_ = std::string("cannot register with userfaultfd: ") + std::strerror(errno);
    }
  }
  ~MissingPages() {
    if (uffd_ >= 0) ::close(uffd_);  // wakes any thread still blocked on a page
    if (data_ != nullptr) ::munmap(data_, bytes_);
  }
  const std::string& unavailable() const { return why_; }
  std::uint8_t* data() const { return data_; }

  // Waits until a thread touched a missing page (and is blocked on it).
  bool wait_touched() {
    pollfd p{uffd_, POLLIN, 0};
    if (::poll(&p, 1, 60000) != 1) return false;
    uffd_msg msg{};
    return ::read(uffd_, &msg, sizeof(msg)) == sizeof(msg) && msg.event == UFFD_EVENT_PAGEFAULT;
  }

  // Every page at once, with `content`'s bytes: wakes the blocked threads.
  bool fill(const std::vector<std::uint8_t>& content) {
    uffdio_copy copy{};
    copy.dst = reinterpret_cast<std::uintptr_t>(data_);
    copy.src = reinterpret_cast<std::uintptr_t>(content.data());
    copy.len = bytes_;
    return ::ioctl(uffd_, UFFDIO_COPY, &copy) == 0 && copy.copy == static_cast<std::int64_t>(bytes_);
  }

 private:
  std::size_t bytes_;
  int uffd_ = -1;
  std::uint8_t* data_ = nullptr;
  std::string why_;
};

}  // namespace tensorverbs::testing_memory
