// Threads that run the shard file systems' fetch loops (remote_fs.cc,
// ShardFileSystem::Impl::fetcher), process-wide, each kept 30 s after its
// loop ends for the next file system's loop: a thread's start (clone, its
// stack, its first time slice) was 65-130 us of the 0.4-0.8 ms to a shard's
// first sample on loopback (2026-11-27, 2-vCPU EPYC), and `bench data` and a
// trainer's probe make several file systems in one process. A file system
// still owns its loops: its destructor waits for them to end. Thread-safe.
#pragma once

#include <functional>

namespace hpct::data {

// Runs job on a kept thread that waits for one, else on a new thread.
// std::system_error when a thread cannot be made and no kept thread took
// the job; the job is then dropped (never run), so the caller can count it
// as ended.
void run_on_fetch_thread(std::function<void()> job);

// Called by a job about to end (before it lets its file system go): this
// thread counts as waiting for a job from now, so a file system made right
// after the last one ended takes this thread instead of making one.
void fetch_thread_ending_job();

}  // namespace hpct::data
