// A reader thread asleep for bytes of a remote shard asks the scheduler for
// a short time slice while it waits, so that when the fetch thread wakes it
// the reader runs at once instead of after the fetch thread's or the
// server's time slice. Linux's EEVDF scheduler (6.12 on) takes a fair
// thread's sched_runtime as its slice: a woken thread with a short slice has
// an early deadline and preempts the running one.
//
// Measured on loopback (2026-11-27, 2-vCPU AMD EPYC, Debian 12, Linux 6.18,
// quiet; docs/data.md, "A short slice for the woken reader"): from the
// fetch thread's publishing of a shard's first bytes to the reader's return
// from open_read, 60 rounds of `bench data --source` took over 100 us in
// 15 of them without it (up to 5.8 ms) and in none with it (at most 60 us).
//
// Private to src/data/source/. Where the call is refused (an older kernel,
// a policy other than SCHED_OTHER) nothing changes.
#pragma once

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace hpct::data {

class ShortSlice {
 public:
  static constexpr std::uint64_t kSliceNs = 100'000;  // the kernel's least slice

  ShortSlice() {
    Attr a{};
    if (!get_fair(&a)) return;
    saved_ = a;
    a.size = sizeof a;
    a.runtime = kSliceNs;
    set_ = ::syscall(SYS_sched_setattr, 0, &a, 0) == 0;
  }
  ~ShortSlice() {
    if (!set_) return;
    saved_.size = sizeof saved_;
    ::syscall(SYS_sched_setattr, 0, &saved_, 0);
  }
  ShortSlice(const ShortSlice&) = delete;
  ShortSlice& operator=(const ShortSlice&) = delete;

  // A thread inherits its creator's slice: a fetch thread made while a
  // reader waited drops the reader's short one for the kernel's default.
  static void drop_inherited() {
    Attr a{};
    if (!get_fair(&a) || a.runtime != kSliceNs) return;
    a.size = sizeof a;
    a.runtime = 0;
    ::syscall(SYS_sched_setattr, 0, &a, 0);
  }

  // This thread's slice as the kernel reports it (0: not reported).
  static std::uint64_t current_ns() {
    Attr a{};
    return get_fair(&a) ? a.runtime : 0;
  }

 private:
  // struct sched_attr (include/uapi/linux/sched/types.h), its first fields.
  struct Attr {
    std::uint32_t size;
    std::uint32_t policy;
    std::uint64_t flags;
    std::int32_t nice;
    std::uint32_t priority;
    std::uint64_t runtime;
    std::uint64_t deadline;
    std::uint64_t period;
  };
  // This thread's attributes, if it is a fair (SCHED_OTHER) thread.
  static bool get_fair(Attr* a) {
    return ::syscall(SYS_sched_getattr, 0, a, sizeof *a, 0) == 0 && a->policy == SCHED_OTHER;
  }
  Attr saved_{};
  bool set_ = false;
};

}  // namespace hpct::data
