// A remote shard on its way to the reader (the spool of remote_fs.h: in
// memory, or in a local file) and the reader that takes its bytes as they
// arrive, waiting, with a bound, for those not there yet. Private to
// src/data/source/.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/fd.h"
#include "data/source/file.h"
#include "data/source/http.h"

namespace hpct::data {

// Where a spool's bytes live. Memory (anonymous, small pages: spool.cc,
// SpoolMemory::take, says why) is the fast case: measured 2026-11-26 on
// the 2-vCPU EPYC, 100 MB in 512 KiB pieces took 11-16 ms to copy into
// fresh memory with huge pages (44-47 ms with small ones), 32-40 ms
// by pwrite into a file in /tmp (ext4: a page cache page, buffer heads and
// a delayed allocation per 4 KiB), and 40-240 ms through a shared mapping
// of that file (each first store faults, and the kernel zero-fills the page
// and the readahead around it before the copy). A file holds shards beyond
// the memory bound, and the cache's part files.
enum class SpoolBacking {
  kMemory,        // anonymous memory, written by memcpy
  kNewFile,       // fd, sized here and written by pwrite
  kFinishedFile,  // fd holds the whole object already (a cache hit)
};

// Anonymous memory for spools, kept after a spool is dropped and handed to
// the next spool that fits: the kernel zero-fills every fresh page on its
// first store, and perf showed that clearing as 31% of a streaming pass's
// CPU on loopback (2026-11-26, 2-vCPU EPYC), more than the socket reads;
// reused pages are already there. Process-wide (a file system made per pass
// reuses the last one's pages). Regions are whole 2 MiB multiples; a
// spool holds at most its size rounded up to 2 MiB of them.
class SpoolMemory {
 public:
  // A region of at least n bytes (*len: its size): a kept one that fits
  // (at most a quarter and 2 MiB larger), else fresh memory, after
  // releasing kept regions until `kept + in_use + the new one <= bound`
  // (in_use: the caller's spools in memory). nullptr if mmap fails.
  static char* take(std::uint64_t n, std::uint64_t in_use, std::uint64_t bound, std::uint64_t* len);
  // Keeps the region for reuse if the kept regions stay within `bound`,
  // else unmaps it.
  static void give(char* p, std::uint64_t len, std::uint64_t bound);
  static std::uint64_t kept_bytes();
};

struct Spool;

// What a reader's wait tells its file system (remote_fs.cc: it may start
// another download, or fetch the rest of a parked spool). Outlives the
// file system in spools a reader still holds: the file system clears the
// calls (under mu) before it goes.
struct StallHook {
  std::mutex mu;
  std::function<void()> call;                                 // guarded by mu
  std::function<void(const std::shared_ptr<Spool>&)> resume;  // guarded by mu
  void operator()() {
    std::lock_guard<std::mutex> lock(mu);
    if (call) call();
  }
  void resume_spool(const std::shared_ptr<Spool>& s) {
    std::lock_guard<std::mutex> lock(mu);
    if (resume) resume(s);
  }
};

// One remote shard on its way to the reader: the first `available` bytes
// in fetch order are in `map`, so a read of bytes already there is a
// memcpy, with no lock and no system call (a tar walk reads two small
// pieces per member). A file spool is written with pwrite and read
// through a read-only mapping of the same page cache.
//
// Fetch order: bytes [first, size), then [0, first). `first` is where the
// reader starts (a rank whose part of the epoch begins mid-shard), so its
// first sample does not wait for the bytes before it; 0 is plain order.
// The fetch stops (parks) once it holds `wanted` bytes in that order, the
// bytes its hint asked for; a reader that needs more, or a later hint,
// raises `wanted` and the file system fetches on from where it stopped.
struct Spool {
  std::string url;     // as the user wrote it
  std::string source;  // metrics key
  HttpRequest request;
  std::mutex mu;
  std::condition_variable cv;
  bool queued = false;                      // guarded by mu
  bool started = false;                     // guarded by mu: a fetch thread took it
  bool size_known = false;                  // guarded by mu
  bool done = false;                        // guarded by mu
  std::uint64_t size = 0;                   // written once under mu before size_known
  std::uint64_t first = 0;                  // guarded by mu until size_known, then fixed
  std::uint64_t wanted = UINT64_MAX;        // guarded by mu: fetch order bytes to fetch
  bool parked = false;                      // guarded by mu: stopped at `wanted`, not done
  std::atomic<std::uint64_t> available{0};  // bytes in fetch order in map
  std::atomic<int> waiters{0};              // readers waiting for bytes
  // The least byte count a waiting reader wakes for (UINT64_MAX: none). A
  // reader far into the shard asks for more than it needs, so the fetch
  // thread wakes it once per stretch of bytes, not once per network read.
  std::atomic<std::uint64_t> wake_at{UINT64_MAX};
  std::exception_ptr error;     // guarded by mu
  UniqueFd fd;                  // set before size_known (file spools)
  char* map = nullptr;          // size bytes, set before size_known
  bool in_memory = false;       // map is anonymous memory; set before size_known
  std::uint64_t map_len = 0;    // the mapping's length (in memory: SpoolMemory's region)
  std::uint64_t memory_bound = 0;  // in memory: the bound its region goes back under
  std::uint64_t memory_in_use = 0; // in memory: the owner's spools in memory, this one's included
  std::uint64_t last_open = 0;  // guarded by the file system's mu (LRU; 0: never opened)
  std::uint64_t written = 0;    // the fetch thread's, in fetch order
  // Called (without mu) when a reader is about to wait for bytes not yet
  // here; set before the spool is shared. May be empty.
  std::shared_ptr<StallHook> on_stall;

  ~Spool() {
    if (map == nullptr) return;
    if (in_memory) {
      SpoolMemory::give(map, map_len, memory_bound);
    } else {
      ::munmap(map, map_len);
    }
  }
  // The fetch thread, once the size is known: the bytes get their place.
  void set_size(std::uint64_t n, SpoolBacking backing) {
    std::lock_guard<std::mutex> lock(mu);
    if (n > 0) {
      void* m = MAP_FAILED;
      if (backing == SpoolBacking::kMemory) {
        std::uint64_t len = 0;
        char* p = SpoolMemory::take(n, memory_in_use, memory_bound, &len);
        if (p != nullptr) {
          m = p;
          map_len = len;
        }
      } else {
        map_len = n;
        if (backing == SpoolBacking::kNewFile && ::ftruncate(fd.get(), static_cast<off_t>(n)) != 0)
          throw_io("size the spool of " + url, errno);
        m = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd.get(), 0);
      }
      if (m == MAP_FAILED) throw_io("map the spool of " + url, errno);
      map = static_cast<char*>(m);
      in_memory = backing == SpoolBacking::kMemory;
    }
    size = n;
    size_known = true;
    // No wake-up here: open_read waits for the first bytes too (publish,
    // or finish for an empty or failed object, wakes it).
  }
  // How many bytes in fetch order hold bytes [offset, want) of the object
  // (readers, after size_known).
  std::uint64_t needed(std::uint64_t offset, std::uint64_t want) const {
    if (offset >= first) return want - first;
    if (want <= first) return size - first + want;
    return size;  // both sides of `first`: all of it
  }
  // The fetch thread: the next bytes of the object, in fetch order.
  void append(const char* data, size_t n) {
    if (written + n > size)
      throw_data_corrupt(url + ": the server sent more than the " + std::to_string(size) +
                         " bytes it announced");
    const std::uint64_t tail = size - first;  // [first, size) comes first
    while (n > 0) {
      // The reader's first bytes are published a piece at a time, so the
      // first sample need not wait for a whole network read (up to 512 KiB)
      // to be written.
      size_t piece = written < kEagerBytes ? std::min<size_t>(n, kEagerPiece) : n;
      if (written < tail) piece = static_cast<size_t>(std::min<std::uint64_t>(piece, tail - written));
      const std::uint64_t at = written < tail ? first + written : written - tail;
      size_t k = piece;
      if (in_memory) {
        std::memcpy(map + at, data, piece);
      } else {
        const ssize_t w = ::pwrite(fd.get(), data, piece, static_cast<off_t>(at));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) throw_io("write the spool of " + url, w < 0 ? errno : ENOSPC);
        k = static_cast<size_t>(w);
      }
      data += k;
      n -= k;
      written += k;
      publish();
    }
  }
  static constexpr std::uint64_t kEagerBytes = 1 << 20;
  static constexpr size_t kEagerPiece = 32 << 10;
  void publish() {
    available.store(written);
    if (waiters.load() > 0 && written >= wake_at.load()) {
      {
        std::lock_guard<std::mutex> lock(mu);
        wake_at.store(UINT64_MAX);
        cv.notify_all();
      }
      // A reader woken for the shard's first bytes gets this core at once.
      // Without the yield the woken reader waited for the fetch thread or
      // the server to end its time slice: 0.3-1 ms (medians of 15 rounds)
      // after the bytes came on loopback, longer than the request itself,
      // against 7-53 us with it (2026-11-27, 2-vCPU EPYC, load 3-6;
      // docs/data.md, "Reading in place, the woken reader"). Only in the
      // first MiB, where the first samples wait for it.
      if (written <= kEagerBytes) std::this_thread::yield();
    }
  }
  void finish(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    if (e && !error) error = e;
    done = true;
    cv.notify_all();
  }
};

// A reader of the spool's bytes (c counts its stalls); a read of bytes not
// there yet waits for them at most `bound` (Timeout), or throws the
// download's error.
std::unique_ptr<RandomAccessFile> open_spool_reader(std::shared_ptr<Spool> s, SourceCounters* c, Millis bound);

}  // namespace hpct::data
