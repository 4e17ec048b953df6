// ShardFileSystem's inside (remote_fs.h), shared by remote_fs.cc (spools,
// fetch loops, the FileSystem calls) and remote_fs_cache.cc (the local
// cache of whole shards). Private to src/data/source.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "data/source/fetch_threads.h"
#include "data/source/remote_fs.h"
#include "data/source/spool.h"
#include "data/source/url.h"

namespace hpct::data {

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
  // The spool of a URL, made and queued on first sight (at the front for
  // a reader: `front`). A hint's range (want_range) sets where a spool not
  // yet begun starts and stops, and queues a parked one again when it
  // wants more of it.
  std::shared_ptr<Spool> spool_for(const std::string& url, bool front, const ReadRange* hint = nullptr);
  void want_range(Spool& s, const ReadRange& r);  // under s.mu
  // A spool that asked for at most kRestartBytes and that a hint wants
  // read from elsewhere, more than kRestartBytes away in its fetch order
  // (under mu).
  bool worth_restarting(Spool& s, const ReadRange& r);
  static constexpr std::uint64_t kRestartBytes = 1 << 20;
  // A reader needs bytes past a parked spool's `wanted`: to the front.
  void resume(const std::shared_ptr<Spool>& s);
  void fetcher(int index);
  void fetch(Spool& s);
  // The object's bytes into the spool in its fetch order (spool.h) up to
  // its `wanted`: true when whole (or cancelled), false when parked.
  bool fetch_body(Spool& s, SourceCounters* c, const std::function<void(std::uint64_t)>& on_size);
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


}  // namespace hpct::data
