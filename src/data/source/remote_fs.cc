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
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/fd.h"
#include "core/units.h"
#include "data/source/fetch_threads.h"
#include "data/source/remote_fs_impl.h"
#include "data/source/s3_upload.h"
#include "data/source/short_slice.h"
#include "data/source/spool.h"
#include "data/source/url.h"

namespace hpct::data {
namespace {

namespace fs = std::filesystem;

}  // namespace

std::shared_ptr<Spool> ShardFileSystem::Impl::spool_for(const std::string& url, bool front,
                                                        const ReadRange* hint) {
  HttpRequest r = request_for(url);  // may read AWS settings: outside the lock below
  std::lock_guard<std::mutex> lock(mu);
  auto& s = spools[url];
  if (s && hint != nullptr && o.cache_dir.empty() && worth_restarting(*s, *hint)) {
    // A few bytes read from elsewhere (the model's probe reads one sample
    // of the first shard): a new spool fetches from where this hint's
    // reader starts; holders of the old one keep it.
    if (s->in_memory) memory_used -= s->size;
    s.reset();
  }
  if (!s) {
    s = std::make_shared<Spool>();
    s->url = url;
    s->source = source_of(url);
    s->request = std::move(r);
    s->on_stall = stall_hook;
    s->request.load = &load;
  }
  // A reader's open counts at once: a later hint never drops a shard a
  // reader waits for (will_read).
  if (front) s->last_open = ++open_clock;
  std::lock_guard<std::mutex> sl(s->mu);
  if (hint != nullptr && o.cache_dir.empty()) want_range(*s, *hint);  // the cache keeps whole shards
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
  } else if (s->parked && s->written < s->wanted) {
    // A parked spool the hint wants more of: on from where it stopped.
    s->parked = false;
    queue.push_back(s);
    cv.notify_all();
  }
  return s;
}

bool ShardFileSystem::Impl::worth_restarting(Spool& s, const ReadRange& r) {
  std::lock_guard<std::mutex> sl(s.mu);
  // Its own fetch, if still in flight, stops at its small `wanted` anyway.
  return s.size_known && !s.done && !s.error && s.wanted <= kRestartBytes && r.first != s.first &&
         r.first < s.size && s.needed(r.first, std::min(r.end, s.size)) > s.wanted + kRestartBytes;
}

void ShardFileSystem::Impl::want_range(Spool& s, const ReadRange& r) {
  if (!s.started) {
    // Not begun: it starts where its reader does and stops where it ends.
    s.first = r.first;
    s.wanted = r.end == UINT64_MAX || r.end <= r.first ? UINT64_MAX : r.end - r.first;
  } else if (!s.size_known) {
    // Its order is set, its size not yet known: bytes from `first` on are
    // counted from there; bytes before it come after the end, so all.
    s.wanted = r.first < s.first || r.end == UINT64_MAX ? UINT64_MAX : std::max(s.wanted, r.end - s.first);
  } else if (s.wanted != UINT64_MAX) {
    const std::uint64_t end = std::min(r.end, s.size);
    if (r.first < end) s.wanted = std::max(s.wanted, s.needed(r.first, end));
  }
}

void ShardFileSystem::Impl::resume(const std::shared_ptr<Spool>& s) {
  std::lock_guard<std::mutex> lock(mu);
  if (stopping) return;
  {
    std::lock_guard<std::mutex> sl(s->mu);
    if (!s->parked) return;
    s->parked = false;
  }
  queue.push_front(s);
  cv.notify_all();
  grow_locked(true);
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

bool ShardFileSystem::Impl::fetch_body(Spool& s, SourceCounters* c,
                                      const std::function<void(std::uint64_t)>& on_size) {
  auto sink = [&](const char* data, size_t n) {
    s.append(data, n);
    return !stopping.load();
  };
  auto same_size = [&](std::uint64_t size) {
    if (size != s.size) {
      throw_data_corrupt(s.url + ": the object changed while it was read (" + std::to_string(s.size) +
                         " bytes, now " + std::to_string(size) + ")");
    }
  };
  // Each round asks for one stretch in fetch order: [first + written, ...)
  // of the part from `first` to the end, or [written - tail, ...) of the
  // part before `first`, up to `wanted`; then parks, or ends when whole.
  for (int round = 0; round < 8; ++round) {
    std::uint64_t first = 0, wanted = 0;
    bool known = false;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      known = s.size_known;
      if (known && s.written >= s.size) return true;
      if (s.written >= s.wanted) {
        s.parked = true;
        s.cv.notify_all();  // a reader waiting for more than it asked sees it must ask
        return false;
      }
      first = s.first;
      wanted = s.wanted;
    }
    const std::uint64_t before = s.written;
    if (!known) {
      const std::uint64_t end = wanted == UINT64_MAX ? UINT64_MAX : first + wanted;
      fetch_object(s.request, o.http, first, c, on_size, sink, &stopping, end);
      if (stopping.load()) return true;
      if (!s.size_known) {
        if (first == 0) throw Error(ErrorCode::kIo, s.url + ": the server sent no size");
        // Nothing at `first` (the object is no longer than that): in order.
        std::lock_guard<std::mutex> lock(s.mu);
        s.first = 0;
        s.wanted = UINT64_MAX;
      }
      continue;
    }
    const std::uint64_t tail = s.size - first, goal = std::min(wanted, s.size);
    std::uint64_t from, to;
    if (s.written < tail) {
      from = first + s.written;
      to = first + std::min(goal, tail);
    } else {
      from = s.written - tail;
      to = goal - tail;
    }
    fetch_object(s.request, o.http, from, c, same_size, sink, &stopping, to >= s.size ? UINT64_MAX : to);
    if (stopping.load()) return true;
    if (s.written == before && round > 0) break;
  }
  throw Error(ErrorCode::kIo, s.url + ": the download made no progress at byte " + std::to_string(s.written) +
                                  " of " + std::to_string(s.size) + " (in fetch order)");
}

void ShardFileSystem::Impl::fetch(Spool& s) {
  SourceCounters* c = counters_for(s.source);
  if (!o.cache_dir.empty()) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.wanted = UINT64_MAX;  // a cache entry is a whole shard
    }
    if (fetch_cached(s, c)) return;
  }
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
  if (!fetch_body(s, c, on_size)) return;  // parked: the rest when wanted
  s.finish(
      s.written < s.size || !s.size_known
          ? std::make_exception_ptr(Error(ErrorCode::kIo, s.url + ": the download was cancelled"))
          : nullptr);
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
  impl_->stall_hook->resume = [m](const std::shared_ptr<Spool>& s) { m->resume(s); };
}

ShardFileSystem::~ShardFileSystem() {
  {
    std::lock_guard<std::mutex> lock(impl_->stall_hook->mu);
    impl_->stall_hook->call = nullptr;
    impl_->stall_hook->resume = nullptr;
  }
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->stopping = true;
  impl_->cv.notify_all();
  impl_->loops_ended.wait(lock, [&] { return impl_->loops == 0; });
  // A reader still holding a parked spool is told at once, not at its bound.
  for (auto& [url, s] : impl_->spools) {
    bool parked = false;
    {
      std::lock_guard<std::mutex> sl(s->mu);
      parked = s->parked && !s->done;
    }
    if (parked) s->finish(std::make_exception_ptr(Error(ErrorCode::kIo, url + ": its file system was closed")));
  }
}

std::unique_ptr<RandomAccessFile> ShardFileSystem::open_read(const std::string& path) {
  if (!is_remote_url(path)) return PosixFileSystem().open_read(strip_file_scheme(path));
  Impl& m = *impl_;
  auto s = m.spool_for(path, true);
  m.start_threads();
  SourceCounters* c = m.counters_for(s->source);
  // Waits for the size and the first bytes together (or the end): the
  // reader reads the first header at once, and one wake-up instead of two
  // is what the first sample waits for (Spool::set_size does not notify).
  std::optional<ShortSlice> woken_at_once;  // asked for when it sleeps (short_slice.h)
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
    if (!woken_at_once) woken_at_once.emplace();
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

void ShardFileSystem::will_read(const std::vector<std::string>& paths, const std::vector<ReadRange>& ranges) {
  std::vector<std::shared_ptr<Spool>> order;
  for (size_t i = 0; i < paths.size(); ++i) {
    const ReadRange whole;
    const ReadRange& range = i < ranges.size() ? ranges[i] : whole;
    if (is_remote_url(paths[i])) order.push_back(impl_->spool_for(paths[i], false, &range));
  }
  if (order.empty()) return;
  Impl& m = *impl_;
  std::unique_lock<std::mutex> lock(m.mu);
  // The latest hint is what the readers will open next: its shards still
  // waiting take the queue, in its order. An earlier hint's shards that no
  // reader has opened leave it (a shard announced for a probe or a past
  // epoch would otherwise take the link from the shards the epoch reads);
  // those a reader opened stay, after the hint's.
  std::set<const Spool*> waiting, wanted;
  for (const auto& s : m.queue) waiting.insert(s.get());
  std::deque<std::shared_ptr<Spool>> queue;
  for (const auto& s : order) {
    if (waiting.count(s.get()) != 0 && wanted.insert(s.get()).second) queue.push_back(s);
  }
  for (auto& s : m.queue) {
    if (wanted.count(s.get()) != 0) continue;
    if (s->last_open > 0) {
      queue.push_back(std::move(s));
    } else {
      std::lock_guard<std::mutex> sl(s->mu);
      s->queued = false;  // a later hint or open queues it again
    }
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
