#include "data/source/remote_fs.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/fd.h"
#include "core/units.h"
#include "data/source/s3_upload.h"
#include "data/source/spool.h"
#include "data/source/url.h"

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

// Threads that run the file systems' fetch loops (ShardFileSystem::Impl::
// fetcher), process-wide, each kept kFetchThreadIdle after its loop ends
// for the next file system's loop: a thread's start (clone, its stack,
// its first time slice) was 65-130 us of the 0.4-0.8 ms to a shard's first
// sample on loopback (2026-11-27, 2-vCPU EPYC), and `bench data` and a
// trainer's probe make several file systems in one process. A file system
// still owns its loops: its destructor waits for them to end (loops, in
// Impl). Never destroyed: a file system may go during the exit's static
// destructors.
struct FetchThreads {
  std::mutex mu;
  std::condition_variable cv;
  struct Job {
    std::uint64_t id;
    std::function<void()> run;
  };
  std::deque<Job> jobs;       // guarded by mu
  std::uint64_t next_id = 0;  // guarded by mu
  int idle = 0;               // guarded by mu: threads waiting for a job
};
constexpr std::chrono::seconds kFetchThreadIdle{30};

FetchThreads& fetch_threads() {
  static FetchThreads* t = new FetchThreads;
  return *t;
}

// Set on a fetch thread whose job counted it idle already.
thread_local bool counted_idle = false;

// Called by a job about to end (fetcher, before it lets its file system go):
// this thread counts as waiting for a job from now, so a file system made
// right after the last one ended takes this thread instead of making one.
void fetch_thread_ending_job() {
  FetchThreads& t = fetch_threads();
  std::lock_guard<std::mutex> lock(t.mu);
  if (counted_idle) return;
  t.idle += 1;
  counted_idle = true;
}

void fetch_thread_main() {
  FetchThreads& t = fetch_threads();
  std::unique_lock<std::mutex> lock(t.mu);
  while (true) {
    if (!counted_idle) t.idle += 1;
    counted_idle = false;
    const bool got = t.cv.wait_for(lock, kFetchThreadIdle, [&] { return !t.jobs.empty(); });
    t.idle -= 1;
    if (!got) return;
    std::function<void()> job = std::move(t.jobs.front().run);
    t.jobs.pop_front();
    lock.unlock();
    job();
    job = nullptr;
    lock.lock();
  }
}

// Runs job on a kept thread that waits for one, else on a new thread.
// std::system_error when a thread cannot be made and no kept thread took
// the job; the job is then dropped (never run), so the caller can count it
// as ended.
void run_on_fetch_thread(std::function<void()> job) {
  FetchThreads& t = fetch_threads();
  bool make = false;
  std::uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    id = ++t.next_id;
    t.jobs.push_back({id, std::move(job)});
    make = static_cast<int>(t.jobs.size()) > t.idle;
  }
  if (make) {
    try {
      std::thread(fetch_thread_main).detach();
    } catch (...) {
      std::lock_guard<std::mutex> lock(t.mu);
      auto it =
          std::find_if(t.jobs.begin(), t.jobs.end(), [&](const auto& j) { return j.id == id; });
      if (it == t.jobs.end()) return;  // a kept thread took it
      t.jobs.erase(it);
      throw;
    }
  }
  t.cv.notify_one();
}

std::string base_name(const std::string& url) {
  const size_t q = url.find('?');
  const std::string p = url.substr(0, q);
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}


}  // namespace

struct ShardFileSystem::Impl {
  ShardSourceOptions o;
  std::shared_ptr<const Env> env;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, std::shared_ptr<Spool>> spools;  // guarded by mu
  std::deque<std::shared_ptr<Spool>> queue;              // guarded by mu
  std::map<std::string, std::unique_ptr<SourceCounters>>
      counters;                      // guarded by mu; entries never removed
  std::unique_ptr<S3Settings> s3;    // guarded by mu; read on first use
  // Fetch threads: each runs one download at a time, so their number is
  // the downloads in flight. One is made on the first will_read/open_read;
  // more, up to o.fetches, only when a reader needs them (grow_locked). On
  // loopback and few cores every extra download is a runnable thread that
  // takes a core from the reader and the server (2-vCPU EPYC: 4 fetch
  // threads, the reader and nginx on 2 cores; from a namespace host behind
  // 1 Gbit/s, 1 fetch read 0.93 of curl and 4 fetches 0.86, docs/data.md),
  // while a slow or far link wants several. Each runs fetcher() on a
  // thread of FetchThreads (kept across file systems); the destructor waits
  // for them to end. The first starts outside mu (start_threads), later ones
  // under it (grow_locked: a new loop blocks on mu a moment, no more).
  int loops = 0;                        // guarded by mu: fetcher() calls not yet ended
  std::condition_variable loops_ended;  // with mu
  std::atomic<bool> stopping{false};
  std::shared_ptr<StallHook> stall_hook = std::make_shared<StallHook>();
  int made = 0;       // guarded by mu: threads made or being made
  int busy = 0;       // guarded by mu: threads with a download in flight
  DownloadLoad load;  // of all downloads; reset when grow_locked judges it
  static constexpr Millis kIdleWait{5};
  static constexpr std::uint64_t kLoadSamples = 8;  // 8 MiB of downloads
  // One more fetch thread when every thread is busy, shards are queued and
  // a reader waits: `idle_shard`, open_read of a shard no thread has taken
  // after kIdleWait (a thread for it); else a stall on a download in
  // flight while the downloads waited for the network more often than they
  // ran (DownloadLoad, over kLoadSamples samples at least): then the link,
  // or one connection's share of it, is not full, and another download
  // starts the next queued shard on its own connection. A download held
  // back by its CPU (loopback) gets no company. Never more than o.fetches.
  // Called with mu held.
  void grow_locked(bool idle_shard) {
    if (stopping || made == 0 || queue.empty() || busy < made) return;
    if (made >= std::max(1, o.fetches)) return;
    if (!idle_shard) {
      if (load.busy.load() + load.waiting.load() < kLoadSamples) return;
      const std::uint64_t ran = load.busy.exchange(0), waited = load.waiting.exchange(0);
      if (waited <= ran) return;
    }
    const int i = made++;
    loops += 1;
    try {
      run_on_fetch_thread([this, i] { fetcher(i); });
    } catch (...) {
      made -= 1;
      loops -= 1;
      throw;
    }
  }
  void grow_on_stall() {
    std::lock_guard<std::mutex> lock(mu);
    grow_locked(false);
  }
  std::atomic<std::uint64_t> part_seq{0};
  std::uint64_t memory_used = 0;  // guarded by mu: bytes of spools in memory
  std::uint64_t open_clock = 0;   // guarded by mu: orders spools by last open

  // Room for a spool of n bytes in memory, dropping finished spools in
  // memory that were read and that nobody holds (least recently opened
  // first) if need be.
  // False: no room; the caller spools to a file instead.
  bool reserve_memory(std::uint64_t n, std::uint64_t* in_use) {
    std::lock_guard<std::mutex> lock(mu);
    if (memory_used + n > o.spool_memory) {
      std::vector<std::map<std::string, std::shared_ptr<Spool>>::iterator> idle;
      for (auto it = spools.begin(); it != spools.end(); ++it) {
        // Held only by this map: every other holder (a queue, a fetch
        // thread, a reader) got its reference through it, under mu.
        if (it->second.use_count() != 1) continue;
        Spool& x = *it->second;
        std::lock_guard<std::mutex> sl(x.mu);
        // Shards fetched ahead and not yet opened are kept: they are next.
        if (x.in_memory && x.done && !x.error && x.last_open > 0) idle.push_back(it);
      }
      std::sort(idle.begin(), idle.end(), [](const auto& a, const auto& b) {
        return a->second->last_open < b->second->last_open;
      });
      for (auto it : idle) {
        if (memory_used + n <= o.spool_memory) break;
        memory_used -= it->second->size;
        spools.erase(it);
      }
    }
    if (memory_used + n > o.spool_memory) return false;
    memory_used += n;
    *in_use = memory_used;
    return true;
  }

  const S3Settings& s3_settings() {
    std::lock_guard<std::mutex> lock(mu);
    if (!s3) s3 = std::make_unique<S3Settings>(s3_settings_from(*env));
    return *s3;
  }
  SourceCounters* counters_for(const std::string& source) {
    std::lock_guard<std::mutex> lock(mu);
    auto& c = counters[source];
    if (!c) c = std::make_unique<SourceCounters>();
    return c.get();
  }
  HttpRequest request_for(const std::string& url) {
    HttpRequest r;
    r.shown = url;
    S3Location loc;
    if (parse_s3_url(url, &loc)) {
      if (loc.key.empty())
        throw_invalid_argument(url + ": no object key; expected s3://BUCKET/KEY");
      r.s3 = &s3_settings();
      r.url = s3_object_url(*r.s3, loc);
    } else {
      r.url = url;
    }
    return r;
  }
  // The spool of a URL, made (and queued unless `front`) on first sight.
  std::shared_ptr<Spool> spool_for(const std::string& url, bool front);
  void fetcher(int index);
  void fetch(Spool& s);
  bool fetch_cached(Spool& s, SourceCounters* c);
  void evict(const std::string& keep);
  // The first fetch thread (once), made outside mu: it takes the queue at
  // once instead of blocking on mu while its maker holds it.
  void start_threads() {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (made > 0 || stopping) return;
      made = 1;
      loops += 1;
    }
    try {
      run_on_fetch_thread([this] { fetcher(0); });
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      made = 0;
      loops -= 1;
      loops_ended.notify_all();
      throw;
    }
  }
  Millis read_bound() const {
    return Millis(o.http.attempts * (o.http.timeout.count() * 2 + o.http.backoff_max.count()) +
                  60000);
  }
};

namespace {



}  // namespace

std::shared_ptr<Spool> ShardFileSystem::Impl::spool_for(const std::string& url, bool front) {
  HttpRequest r = request_for(url);  // may read AWS settings: outside the lock below
  std::lock_guard<std::mutex> lock(mu);
  auto& s = spools[url];
  if (!s) {
    s = std::make_shared<Spool>();
    s->url = url;
    s->source = source_of(url);
    s->request = std::move(r);
    s->on_stall = stall_hook;
    s->request.load = &load;
  }
  std::lock_guard<std::mutex> sl(s->mu);
  if (!s->queued) {
    s->queued = true;
    if (front) {
      queue.push_front(s);
    } else {
      queue.push_back(s);
    }
    // All: a fetch thread held back for the first answer must not take the
    // wake-up meant for the one that may start now.
    cv.notify_all();
  } else if (front && !s->size_known) {
    // Needed now: move it ahead of shards merely announced.
    auto it = std::find(queue.begin(), queue.end(), s);
    if (it != queue.end()) {
      queue.erase(it);
      queue.push_front(s);
    }
  }
  return s;
}

void ShardFileSystem::Impl::fetcher(int) {
  std::unique_lock<std::mutex> lock(mu);
  while (true) {
    cv.wait(lock, [&] { return stopping.load() || !queue.empty(); });
    if (stopping) {
      fetch_thread_ending_job();
      // The last touch of this file system: its destructor may go on once
      // mu is released.
      loops -= 1;
      loops_ended.notify_all();
      return;
    }
    std::shared_ptr<Spool> s = queue.front();
    queue.pop_front();
    {
      std::lock_guard<std::mutex> sl(s->mu);
      s->started = true;
    }
    busy += 1;
    lock.unlock();
    try {
      fetch(*s);
    } catch (...) {
      s->finish(std::current_exception());
    }
    s.reset();
    lock.lock();
    busy -= 1;
  }
}

void ShardFileSystem::Impl::fetch(Spool& s) {
  SourceCounters* c = counters_for(s.source);
  if (!o.cache_dir.empty() && fetch_cached(s, c)) return;
  auto on_size = [&](std::uint64_t size) {
    std::uint64_t in_use = 0;
    if (reserve_memory(size, &in_use)) {
      s.memory_bound = o.spool_memory;
      s.memory_in_use = in_use;
      s.set_size(size, SpoolBacking::kMemory);
      return;
    }
    UniqueFd fd(::open(fs::temp_directory_path().c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600));
    if (!fd.valid())
      throw_io("create a spool file in " + fs::temp_directory_path().string(), errno);
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.fd = std::move(fd);
    }
    s.set_size(size, SpoolBacking::kNewFile);
  };
  fetch_object(
      s.request, o.http, 0, c, on_size,
      [&](const char* data, size_t n) {
        s.append(data, n);
        return !stopping.load();
      },
      &stopping);
  s.finish(
      s.written < s.size || !s.size_known
          ? std::make_exception_ptr(Error(ErrorCode::kIo, s.url + ": the download was cancelled"))
          : nullptr);
}

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
    fetch_object(
        s.request, o.http, 0, c,
        [&](std::uint64_t n) {
          too_big = n > o.cache_bytes;
          s.set_size(n, SpoolBacking::kNewFile);
        },
        [&](const char* data, size_t n) {
          s.append(data, n);
          return !stopping.load();
        },
        &stopping);
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

ShardSourceOptions shard_source_options(const Config& config, const Logger& log) {
  ShardSourceOptions o;
  if (config.data_fetches < 1) {
    throw_invalid_argument("HPCT_DATA_FETCHES must be at least 1, got " +
                           std::to_string(config.data_fetches));
  }
  if (config.data_fetch_attempts < 1) {
    throw_invalid_argument("HPCT_DATA_FETCH_ATTEMPTS must be at least 1, got " +
                           std::to_string(config.data_fetch_attempts));
  }
  if (!(config.data_fetch_timeout_s > 0)) {
    throw_invalid_argument("HPCT_DATA_FETCH_TIMEOUT_S must be above 0");
  }
  o.fetches = static_cast<int>(config.data_fetches);
  o.sidecars = config.data_sidecars;
  o.http.attempts = static_cast<int>(config.data_fetch_attempts);
  o.http.timeout = Millis(static_cast<std::int64_t>(config.data_fetch_timeout_s * 1000));
  o.http.ca_file = config.data_ca_file;
  if (!o.http.ca_file.empty() && ::access(o.http.ca_file.c_str(), R_OK) != 0) {
    throw_io("--ca-file " + o.http.ca_file, errno);
  }
  o.cache_dir = config.data_cache_dir;
  auto bytes = [](const std::string& name, const std::string& text) {
    try {
      return parse_bytes(text);
    } catch (const Error& e) {
      throw_invalid_argument(name + ": " + e.what());
    }
  };
  o.cache_bytes = bytes("HPCT_DATA_CACHE_SIZE (--cache-size)", config.data_cache_size);
  o.spool_memory = bytes("HPCT_DATA_SPOOL_MEMORY (--spool-memory)", config.data_spool_memory);
  o.logger = log;
  return o;
}

ShardFileSystem::ShardFileSystem(ShardSourceOptions options, std::shared_ptr<const Env> env)
    : impl_(std::make_unique<Impl>()) {
  impl_->o = std::move(options);
  impl_->env = std::move(env);
  Impl* m = impl_.get();
  impl_->stall_hook->call = [m] { m->grow_on_stall(); };
}

ShardFileSystem::~ShardFileSystem() {
  {
    std::lock_guard<std::mutex> lock(impl_->stall_hook->mu);
    impl_->stall_hook->call = nullptr;
  }
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->stopping = true;
  impl_->cv.notify_all();
  impl_->loops_ended.wait(lock, [&] { return impl_->loops == 0; });
}

std::unique_ptr<RandomAccessFile> ShardFileSystem::open_read(const std::string& path) {
  if (!is_remote_url(path)) return PosixFileSystem().open_read(strip_file_scheme(path));
  Impl& m = *impl_;
  auto s = m.spool_for(path, true);
  m.start_threads();
  {
    std::lock_guard<std::mutex> lock(m.mu);
    s->last_open = ++m.open_clock;
  }
  SourceCounters* c = m.counters_for(s->source);
  // Waits for the size and the first bytes together (or the end): the
  // reader reads the first header at once, and one wake-up instead of two
  // is what the first sample waits for (Spool::set_size does not notify).
  std::unique_lock<std::mutex> lock(s->mu);
  s->waiters += 1;
  const auto deadline = SteadyClock::now() + m.read_bound();
  // A shard no thread has taken after kIdleWait (every thread busy with
  // others) gets a thread of its own (grow_locked). Not at once: a thread
  // finishing the shard before it takes this one a moment later.
  auto grow_at = SteadyClock::now() + Impl::kIdleWait;
  bool answered = true;
  while (true) {
    s->wake_at.store(1);  // as RemoteFile::wait_for: lowered before the check
    if (s->error || s->done || (s->size_known && (s->size == 0 || s->available.load() > 0))) break;
    const bool grow_first = grow_at < deadline && !s->started;
    if (s->cv.wait_until(lock, grow_first ? grow_at : deadline) == std::cv_status::timeout) {
      if (grow_first) {
        grow_at = deadline;
        if (s->started) continue;
        lock.unlock();  // the order is m.mu, then s->mu
        {
          std::lock_guard<std::mutex> ml(m.mu);
          bool started = false;
          {
            std::lock_guard<std::mutex> sl(s->mu);
            started = s->started;
          }
          if (!started) m.grow_locked(true);
        }
        lock.lock();
        continue;
      }
      answered = s->error || s->done || (s->size_known && (s->size == 0 || s->available.load() > 0));
      break;
    }
  }
  s->waiters -= 1;
  if (!answered) {
    throw_timeout(path + ": no answer within " + std::to_string(m.read_bound().count() / 1000) +
                  " s");
  }
  if (!s->size_known) std::rethrow_exception(s->error);
  return open_spool_reader(s, c, m.read_bound());
}

std::unique_ptr<WritableFile> ShardFileSystem::open_write(const std::string& path) {
  if (!is_remote_url(path)) return PosixFileSystem().open_write(strip_file_scheme(path));
  S3Location loc;
  if (!parse_s3_url(path, &loc)) {
    throw_invalid_argument(path +
                           ": only s3:// URLs can be written (http(s) servers take no uploads)");
  }
  Impl& m = *impl_;
  HttpRequest base = m.request_for(path);
  return open_s3_upload(path, base, m.o.http, m.counters_for(source_of(path)));
}

bool ShardFileSystem::sidecars() const { return impl_->o.sidecars; }

void ShardFileSystem::will_read(const std::vector<std::string>& paths) {
  std::vector<std::shared_ptr<Spool>> order;
  for (const auto& p : paths) {
    if (is_remote_url(p)) order.push_back(impl_->spool_for(p, false));
  }
  if (order.empty()) return;
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mu);
  // The latest hint is what a reader will open next: its shards still
  // waiting go ahead of earlier hints, in its order.
  std::set<const Spool*> waiting, wanted;
  for (const auto& s : m.queue) waiting.insert(s.get());
  std::deque<std::shared_ptr<Spool>> queue;
  for (const auto& s : order) {
    if (waiting.count(s.get()) != 0 && wanted.insert(s.get()).second) queue.push_back(s);
  }
  for (auto& s : m.queue) {
    if (wanted.count(s.get()) == 0) queue.push_back(std::move(s));
  }
  m.queue = std::move(queue);
  m.cv.notify_all();
  lock.unlock();
  m.start_threads();
}

std::vector<std::string> ShardFileSystem::glob(const std::string& pattern) {
  S3Location loc;
  if (!parse_s3_url(pattern, &loc)) {
    if (is_remote_url(pattern)) {
      throw_invalid_argument(
          pattern +
          ": an http(s) server cannot be listed, so '*' cannot be expanded: name "
          "the shards with a brace range, e.g. train-{000000..000099}.tar");
    }
    return FileSystem::glob(strip_file_scheme(pattern));
  }
  Impl& m = *impl_;
  const S3Settings& s3 = m.s3_settings();
  const size_t wild = loc.key.find_first_of("*?[");
  const std::string prefix = loc.key.substr(0, wild);
  SourceCounters* c = m.counters_for(source_of(pattern));
  std::vector<std::string> out;
  std::string token;
  for (int page = 0; page < 100000; ++page) {
    // Query parameters in SigV4's canonical (sorted) order.
    std::string query = token.empty() ? "" : "continuation-token=" + uri_encode(token, false) + "&";
    query += "list-type=2&prefix=" + uri_encode(prefix, false);
    HttpRequest r;
    r.s3 = &s3;
    r.shown = "s3://" + loc.bucket + "/" + prefix;
    r.url = s3.endpoint + "/" + uri_encode(loc.bucket, false) + "?" + query;
    const std::string xml = http_call(r, m.o.http, c);
    for (const auto& key : xml_values(xml, "Key")) {
      if (::fnmatch(loc.key.c_str(), key.c_str(), FNM_PATHNAME) == 0)
        out.push_back("s3://" + loc.bucket + "/" + key);
    }
    auto truncated = xml_values(xml, "IsTruncated");
    auto next = xml_values(xml, "NextContinuationToken");
    if (truncated.empty() || truncated[0] != "true" || next.empty()) break;
    token = next[0];
  }
  std::sort(out.begin(), out.end());
  return out;
}

nlohmann::json ShardFileSystem::stats() const {
  nlohmann::json j = nlohmann::json::object();
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (const auto& [source, c] : impl_->counters) {
    const std::uint64_t n = c->ttfb_count.load();
    j[source] = {{"bytes", c->bytes.load()},
                 {"requests", c->requests.load()},
                 {"retries", c->retries.load()},
                 {"resumes", c->resumes.load()},
                 {"stalls", c->stalls.load()},
                 {"stall_ms", c->stall_us.load() / 1000.0},
                 {"ttfb_ms", n ? c->ttfb_us_sum.load() / 1000.0 / n : 0.0},
                 {"cache_hits", c->cache_hits.load()}};
  }
  return j;
}

std::vector<double> ShardFileSystem::totals() const {
  std::vector<double> t(7, 0.0);
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (const auto& [source, c] : impl_->counters) {
    t[0] += c->bytes.load();
    t[1] += c->requests.load();
    t[2] += c->retries.load();
    t[3] += c->resumes.load();
    t[4] += c->stalls.load();
    t[5] += c->stall_us.load() / 1000.0;
    t[6] += c->cache_hits.load();
  }
  return t;
}

std::shared_ptr<ShardFileSystem> make_shard_file_system(const Config& config, const Logger& log) {
  return std::make_shared<ShardFileSystem>(shard_source_options(config, log),
                                           std::make_shared<ProcessEnv>());
}

std::shared_ptr<FileSystem> default_file_system() {
  return std::make_shared<ShardFileSystem>(ShardSourceOptions(), std::make_shared<ProcessEnv>());
}

}  // namespace hpct::data
