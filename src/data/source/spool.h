// A remote shard on its way to local disk (the spool of remote_fs.h) and
// the reader that takes its bytes as they arrive, waiting, with a bound,
// for those not there yet. Private to src/data/source/.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "core/clock.h"
#include "core/error.h"
#include "core/fd.h"
#include "data/source/file.h"
#include "data/source/http.h"

namespace hpct::data {

// One remote shard on its way to local disk: a file mapped into memory, so
// that a read of bytes already there is a memcpy, with no lock and no system
// call (a tar walk reads two small pieces per member).
struct Spool {
  std::string url;     // as the user wrote it
  std::string source;  // metrics key
  HttpRequest request;
  std::mutex mu;
  std::condition_variable cv;
  bool queued = false;                      // guarded by mu
  bool size_known = false;                  // guarded by mu
  bool done = false;                        // guarded by mu
  std::uint64_t size = 0;                   // written once under mu before size_known
  std::atomic<std::uint64_t> available{0};  // bytes [0, available) are in map
  std::atomic<int> waiters{0};              // readers waiting for bytes
  // The least byte count a waiting reader wakes for (UINT64_MAX: none). A
  // reader far into the shard asks for more than it needs, so the fetch
  // thread wakes it once per stretch of bytes, not once per network read.
  std::atomic<std::uint64_t> wake_at{UINT64_MAX};
  std::exception_ptr error;                 // guarded by mu
  UniqueFd fd;                              // set before size_known
  char* map = nullptr;                      // size bytes of fd, set before size_known
  std::uint64_t written = 0;                // the fetch thread's

  ~Spool() {
    if (map != nullptr) ::munmap(map, size);
  }
  // The fetch thread, once the size is known: the file takes that size and
  // is mapped (writable when it is being downloaded).
  void set_size(std::uint64_t n, bool writable) {
    std::lock_guard<std::mutex> lock(mu);
    if (n > 0) {
      if (writable && ::ftruncate(fd.get(), static_cast<off_t>(n)) != 0)
        throw_io("size the spool of " + url, errno);
      void* m = ::mmap(nullptr, n, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED,
                       fd.get(), 0);
      if (m == MAP_FAILED) throw_io("map the spool of " + url, errno);
      map = static_cast<char*>(m);
    }
    size = n;
    size_known = true;
    cv.notify_all();
  }
  // The fetch thread: the next bytes of the object.
  void append(const char* data, size_t n) {
    if (written + n > size)
      throw_data_corrupt(url + ": the server sent more than the " + std::to_string(size) +
                         " bytes it announced");
    std::memcpy(map + written, data, n);
    written += n;
    available.store(written);
    if (waiters.load() > 0 && written >= wake_at.load()) {
      std::lock_guard<std::mutex> lock(mu);
      wake_at.store(UINT64_MAX);
      cv.notify_all();
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
