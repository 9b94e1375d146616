// name_thread: the name a thread of the core shows in top -H, perf, gdb and
// /proc/<pid>/task/*/comm ("tv-" and what it does; at most 15 characters).
#pragma once

#include <pthread.h>

namespace tensorverbs {

inline void name_thread(const char* name) noexcept { ::pthread_setname_np(::pthread_self(), name); }

}  // namespace tensorverbs
