// The local cache of whole shards (--cache-dir, --cache-size): written
// under a part name and renamed when complete, least recently used dropped
// first, shared by the ranks of a host through file locks (docs/data.md).
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "core/fd.h"
#include "data/source/remote_fs_impl.h"

namespace hpct::data {
namespace {

namespace fs = std::filesystem;

std::string hex64(std::uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string base_name(const std::string& url) {
  const size_t q = url.find('?');
  const std::string p = url.substr(0, q);
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

}  // namespace

bool ShardFileSystem::Impl::fetch_cached(Spool& s, SourceCounters* c) {
  std::error_code ec;
  fs::create_directories(o.cache_dir, ec);
  const std::string name = hex64(fnv1a(s.url)) + "-" + base_name(s.url);
  const std::string final_path = o.cache_dir + "/" + name;
  UniqueFd lock_fd(
      ::open((o.cache_dir + "/." + name + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock_fd.valid()) throw_io("open a lock file in the cache " + o.cache_dir, errno);
  // Another rank of this host may be downloading it: wait for its lock.
  const auto deadline = std::chrono::steady_clock::now() + read_bound();
  while (::flock(lock_fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK && errno != EINTR) throw_io("lock " + final_path, errno);
    if (stopping) return true;
    if (std::chrono::steady_clock::now() > deadline) {
      throw_timeout("the cache entry " + final_path + " stayed locked by another process for " +
                    std::to_string(read_bound().count() / 1000) + " s");
    }
    std::this_thread::sleep_for(Millis(20));
  }
  UniqueFd hit(::open(final_path.c_str(), O_RDONLY | O_CLOEXEC));
  if (hit.valid()) {
    struct stat st {};
    if (::fstat(hit.get(), &st) != 0) throw_io("stat " + final_path, errno);
    ::utimensat(AT_FDCWD, final_path.c_str(), nullptr, 0);  // most recently used
    c->cache_hits += 1;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.fd = std::move(hit);
    }
    s.set_size(static_cast<std::uint64_t>(st.st_size), SpoolBacking::kFinishedFile);
    s.written = s.size;
    s.available.store(s.size);
    s.finish(nullptr);
    return true;
  }
  const std::string part =
      final_path + ".part-" + std::to_string(::getpid()) + "-" + std::to_string(part_seq++);
  UniqueFd fd(::open(part.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd.valid()) throw_io("create " + part, errno);
  const int raw = fd.get();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.fd = std::move(fd);
  }
  bool too_big = false;
  try {
    fetch_body(s, c, [&](std::uint64_t n) {  // whole: fetch() set wanted to all
      too_big = n > o.cache_bytes;
      s.set_size(n, SpoolBacking::kNewFile);
    });
  } catch (...) {
    ::unlink(part.c_str());
    throw;
  }
  // Published only whole and of the announced size (even when the reader is
  // already closing); a shard larger than the whole cache is read from its
  // part file and never kept.
  const bool complete = s.size_known && s.written == s.size;
  if (complete && !too_big && ::fsync(raw) == 0 &&
      ::rename(part.c_str(), final_path.c_str()) == 0) {
    evict(final_path);
  } else {
    ::unlink(part.c_str());
  }
  s.finish(complete ? nullptr
                    : std::make_exception_ptr(
                          Error(ErrorCode::kIo, s.url + ": the download was cancelled")));
  return true;
}

void ShardFileSystem::Impl::evict(const std::string& keep) {
  UniqueFd lock_fd(
      ::open((o.cache_dir + "/.evict.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!lock_fd.valid() || ::flock(lock_fd.get(), LOCK_EX) != 0) return;
  struct Entry {
    std::string path;
    std::uint64_t bytes;
    fs::file_time_type used;
  };
  std::vector<Entry> entries;
  std::uint64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(o.cache_dir, ec)) {
    const std::string n = e.path().filename().string();
    if (n.empty() || n[0] == '.') continue;
    const size_t part = n.find(".part-");
    if (part != std::string::npos) {
      // A part of a process that died mid-download: never to be finished.
      const pid_t pid = static_cast<pid_t>(std::atol(n.c_str() + part + 6));
      if (pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) fs::remove(e.path(), ec);
      continue;
    }
    const auto bytes = e.file_size(ec);
    if (ec) continue;
    entries.push_back({e.path().string(), bytes, e.last_write_time(ec)});
    total += bytes;
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.used < b.used; });
  for (const auto& e : entries) {
    if (total <= o.cache_bytes) break;
    if (e.path == keep) continue;
    if (::unlink(e.path.c_str()) == 0) total -= e.bytes;
  }
}

}  // namespace hpct::data
