// Futex sleep and wake on a 32-bit word in memory that other processes may
// map too (a shared file or shm segment: no FUTEX_PRIVATE_FLAG). Used by the
// shared-memory allreduce and by the benchmark's pacing page.
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

namespace hpct {

// Sleeps while *word == expected, for at most `timeout` (or until a wake or
// a signal; callers re-check their condition and their deadline).
inline void futex_wait(const void* word, std::uint32_t expected, std::chrono::nanoseconds timeout) {
  const auto ns = timeout.count() > 0 ? timeout.count() : 0;
  timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
  ::syscall(SYS_futex, const_cast<void*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

// The spin-wait hint between two looks at a word another CPU will write
// (the shared-memory allreduce's waits and its cache-line probe).
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Wakes every waiter on word.
inline void futex_wake_all(const void* word) {
  ::syscall(SYS_futex, const_cast<void*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace hpct
