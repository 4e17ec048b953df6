// ShardFileSystem: the FileSystem the data tier reads shards through. Plain
// paths and file:// go to the local disk; http://, https:// and s3:// are
// streamed (http.h) and s3:// globs are expanded by listing the bucket.
//
// Streaming: a remote shard is downloaded by a fetch thread into a
// spool: memory (up to `spool_memory` bytes in all), else an unlinked
// temporary file, or with a cache the cache's temporary name; read_at
// returns as soon as the bytes it asks for have arrived, so a shard's first
// sample is read while the rest is still on the wire. will_read() queues the
// shards in reading order, so the next few download while the current one
// is read; a later hint replaces an earlier one (the earlier hint's shards
// no reader has opened leave the queue); open_read() moves a shard to the
// front. A hint may give the bytes of each shard its reader reads: the
// shard is fetched from the first of them (spool.h: to its end, then the
// bytes before it), so a rank whose part of an epoch begins mid-shard reads
// at once, and only up to the last of them (the rest of a shard other
// ranks read is not downloaded). A reader that reads past what a hint
// asked for, or a later hint, has the rest fetched from where it stopped.
// With a cache, shards are always fetched whole. A finished spool is kept for the file
// system's life (a second Loader over the same shards reads it, not the
// server), except that a spool in memory that no reader holds is dropped,
// least recently opened first, when a new one needs its room (a later read
// downloads it again; a cache keeps shards across epochs).
//
// Cache (cache_dir): a shard is downloaded under "<name>.part-<pid>-<n>"
// while holding an exclusive flock on "<name>.lock", checked against the
// size the server announced, and renamed to its final name; only final
// names are ever read, so a crash mid-download leaves nothing a later run
// uses (stale parts of dead processes are removed). The ranks of a host
// share the directory: a rank that finds the lock taken waits for it and
// then reads the finished file. After each download the least recently
// used files (mtime, touched on every hit) are removed until the total is
// within cache_bytes.
//
// Uploads: open_write("s3://b/k") returns a writer that sends each 8 MiB
// part as it fills (S3 multipart upload) and completes the upload on
// commit(); dropped uncommitted it aborts the upload, so the object never
// appears. Other remote schemes cannot be written (InvalidArgument).
//
// Downloads in flight: one at first; another (up to `fetches`) when a
// reader waits for a shard no thread has taken, or stalls while the
// downloads wait for the network rather than for the CPU (remote_fs.cc,
// grow_locked).
//
// Thread-safe. Owns its fetch threads; the destructor cancels transfers in
// flight and joins them (bounded by the transfer timeout).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/env.h"
#include "core/log.h"
#include "data/source/file.h"
#include "data/source/http.h"

namespace hpct::data {

struct ShardSourceOptions {
  HttpOptions http;
  int fetches = 4;        // downloads in flight at most (one until readers need more)
  // Bytes of spools held in memory at once (HPCT_DATA_SPOOL_MEMORY,
  // --spool-memory); further shards spool to an unlinked file in /tmp.
  std::uint64_t spool_memory = 1ull << 30;
  bool sidecars = true;   // the index looks for "<shard>.idx" (formats/shard_toc.h)
  std::string cache_dir;  // empty: no cache
  std::uint64_t cache_bytes = 10ull << 30;
  Logger logger;
};

// From HPCT_DATA_FETCHES, _FETCH_ATTEMPTS, _FETCH_TIMEOUT_S, _CA_FILE,
// _CACHE_DIR, _CACHE_SIZE and _SPOOL_MEMORY. InvalidArgument on a bad value.
ShardSourceOptions shard_source_options(const Config& config, const Logger& log);

class ShardFileSystem final : public FileSystem {
 public:
  // env: where AWS_* settings come from (read on the first s3:// use).
  ShardFileSystem(ShardSourceOptions options, std::shared_ptr<const Env> env);
  ~ShardFileSystem() override;
  ShardFileSystem(const ShardFileSystem&) = delete;
  ShardFileSystem& operator=(const ShardFileSystem&) = delete;

  // Blocks until the shard's size is known (its answer has begun). Errors
  // as http.h: Auth for refused credentials or certificates, Io for a
  // missing bucket/key/page or after the retries.
  std::unique_ptr<RandomAccessFile> open_read(const std::string& path) override;
  std::unique_ptr<WritableFile> open_write(const std::string& path) override;
  void will_read(const std::vector<std::string>& paths, const std::vector<ReadRange>& ranges = {}) override;
  bool sidecars() const override;
  std::vector<std::string> glob(const std::string& pattern) override;

  // Per source ("s3://bucket", "https://host:port"): bytes, requests,
  // retries, resumes, stalls, stall_ms, ttfb_ms (mean), cache_hits.
  nlohmann::json stats() const;
  // The same figures summed over sources, in a fixed order (for summing
  // across ranks): bytes, requests, retries, resumes, stalls, stall_ms,
  // cache_hits.
  std::vector<double> totals() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// A ShardFileSystem set from the config and the process environment.
std::shared_ptr<ShardFileSystem> make_shard_file_system(const Config& config, const Logger& log);

}  // namespace hpct::data
