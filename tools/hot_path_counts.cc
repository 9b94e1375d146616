// An LD_PRELOAD library for tools/hot_path_counts.py: counts the heap allocations (malloc,
// calloc, realloc, operator new) and the mutex and condition-variable operations that code
// of the tensorverbs core makes, by call site (the caller's return address, when it lies in
// the core's shared object). hot_path_counts_start() zeroes the counts (the core must be
// loaded by then), hot_path_counts_dump(path) writes "kind offset count" lines, the offset
// from the core's load address (addr2line reads it against the same build, unstripped).
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

extern "C" void* __libc_malloc(std::size_t);
extern "C" void* __libc_calloc(std::size_t, std::size_t);
extern "C" void* __libc_realloc(void*, std::size_t);
extern "C" void* __libc_memalign(std::size_t, std::size_t);

namespace {

enum Kind : unsigned { kAlloc, kLock, kNotify, kWait };
constexpr const char* kNames[] = {"alloc", "lock", "notify", "wait"};
constexpr unsigned kSlots = 1u << 14;

struct Slot {
  std::atomic<std::uintptr_t> key{0};  // (offset << 2) | kind, 0: free
  std::atomic<unsigned long> count{0};
};

Slot slots[kSlots];
std::atomic<std::uintptr_t> core_begin{0}, core_end{0};

void hit(Kind kind, void* return_address) {
  const auto at = reinterpret_cast<std::uintptr_t>(return_address);
  const std::uintptr_t begin = core_begin.load(std::memory_order_relaxed);
  if (at < begin || at >= core_end.load(std::memory_order_relaxed)) return;
  const std::uintptr_t key = ((at - begin) << 2) | kind;
  for (unsigned i = static_cast<unsigned>(key * 2654435761u) % kSlots, n = 0; n < kSlots;
       i = (i + 1) % kSlots, ++n) {
    std::uintptr_t seen = slots[i].key.load(std::memory_order_acquire);
    if (seen == 0 && slots[i].key.compare_exchange_strong(seen, key)) seen = key;
    if (seen == key) {
      slots[i].count.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
}

template <typename F>
F next(const char* name, const char* version = nullptr) {
  void* f = version ? dlvsym(RTLD_NEXT, name, version) : dlsym(RTLD_NEXT, name);
  return reinterpret_cast<F>(f);
}

int find_core(dl_phdr_info* info, std::size_t, void*) {
  if (std::strstr(info->dlpi_name, "tensorverbs/_core") == nullptr) return 0;
  std::uintptr_t end = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& header = info->dlpi_phdr[i];
    if (header.p_type != PT_LOAD) continue;
    const std::uintptr_t last = info->dlpi_addr + header.p_vaddr + header.p_memsz;
    if (last > end) end = last;
  }
  core_begin = info->dlpi_addr;
  core_end = end;
  return 1;
}

}  // namespace

extern "C" {

void* malloc(std::size_t n) {
  hit(kAlloc, __builtin_return_address(0));
  return __libc_malloc(n);
}

void* calloc(std::size_t count, std::size_t size) {
  hit(kAlloc, __builtin_return_address(0));
  return __libc_calloc(count, size);
}

void* realloc(void* p, std::size_t n) {
  hit(kAlloc, __builtin_return_address(0));
  return __libc_realloc(p, n);
}

int pthread_mutex_lock(pthread_mutex_t* m) {
  static const auto f = next<int (*)(pthread_mutex_t*)>("pthread_mutex_lock");
  hit(kLock, __builtin_return_address(0));
  return f(m);
}

int pthread_cond_signal(pthread_cond_t* c) {
  static const auto f = next<int (*)(pthread_cond_t*)>("pthread_cond_signal", "GLIBC_2.3.2");
  hit(kNotify, __builtin_return_address(0));
  return f(c);
}

int pthread_cond_broadcast(pthread_cond_t* c) {
  static const auto f = next<int (*)(pthread_cond_t*)>("pthread_cond_broadcast", "GLIBC_2.3.2");
  hit(kNotify, __builtin_return_address(0));
  return f(c);
}

int pthread_cond_wait(pthread_cond_t* c, pthread_mutex_t* m) {
  static const auto f =
      next<int (*)(pthread_cond_t*, pthread_mutex_t*)>("pthread_cond_wait", "GLIBC_2.3.2");
  hit(kWait, __builtin_return_address(0));
  return f(c, m);
}

int pthread_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m, const timespec* t) {
  static const auto f = next<int (*)(pthread_cond_t*, pthread_mutex_t*, const timespec*)>(
      "pthread_cond_timedwait", "GLIBC_2.3.2");
  hit(kWait, __builtin_return_address(0));
  return f(c, m, t);
}

int pthread_cond_clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock,
                           const timespec* t) {
  static const auto f =
      next<int (*)(pthread_cond_t*, pthread_mutex_t*, clockid_t, const timespec*)>(
          "pthread_cond_clockwait");
  hit(kWait, __builtin_return_address(0));
  return f(c, m, clock, t);
}

void hot_path_counts_start() {
  dl_iterate_phdr(find_core, nullptr);
  for (Slot& slot : slots) {
    slot.key = 0;
    slot.count = 0;
  }
}

int hot_path_counts_dump(const char* path) {
  std::FILE* out = std::fopen(path, "w");
  if (out == nullptr) return -1;
  for (const Slot& slot : slots) {
    const std::uintptr_t key = slot.key.load();
    if (key != 0) {
      std::fprintf(out, "%s %lx %lu\n", kNames[key & 3], static_cast<unsigned long>(key >> 2),
                   slot.count.load());
    }
  }
  return std::fclose(out);
}

}  // extern "C"

void* operator new(std::size_t n) {
  hit(kAlloc, __builtin_return_address(0));
  if (void* p = __libc_malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}

void* operator new[](std::size_t n) {
  hit(kAlloc, __builtin_return_address(0));
  if (void* p = __libc_malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}

void* operator new(std::size_t n, std::align_val_t alignment) {
  hit(kAlloc, __builtin_return_address(0));
  if (void* p = __libc_memalign(static_cast<std::size_t>(alignment), n ? n : 1)) return p;
  throw std::bad_alloc();
}
