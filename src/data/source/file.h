// File access for the data tier behind a small interface, so tests can give
// a reader a torn file or a writer a full disk without touching the OS.
//
// Readers use positioned reads (pread), so one open shard serves any number
// of threads at once; writers append and publish with an atomic rename, so a
// crash never leaves a half-written shard under its final name.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hpct::data {

// A file opened for reading at any offset. Thread-safe: read_at does not
// move a shared position. Owns its descriptor.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to n bytes at offset into buf; returns how many were read (fewer
  // only at end of file). Io naming the file on a failed read. Blocks on disk.
  virtual size_t read_at(std::uint64_t offset, char* buf, size_t n) const = 0;
  // The bytes [offset, offset + n) in place, when the file's bytes are in
  // memory (a remote shard's spool): a pointer valid while this file is
  // open, after waiting for those bytes as read_at does; nullptr when this
  // file has no such memory (read_at then), or when the range runs past
  // the end of the file. Saves a copy per header and member on a shard
  // walk (docs/data.md, "Reading in place").
  virtual const char* view(std::uint64_t /*offset*/, size_t /*n*/) const { return nullptr; }
  // The n bytes at offset: in place (view), else read into scratch (n
  // bytes). nullptr when fewer than n bytes are there.
  const char* bytes_at(std::uint64_t offset, size_t n, char* scratch) const {
    if (const char* p = view(offset, n)) return p;
    return read_at(offset, scratch, n) == n ? scratch : nullptr;
  }
  // The n bytes at offset as a string, in place when view has them; false
  // when fewer than n bytes are there.
  bool read_string(std::uint64_t offset, size_t n, std::string* out) const {
    if (const char* p = view(offset, n)) {
      out->assign(p, n);
      return true;
    }
    out->assign(n, '\0');
    return read_at(offset, out->data(), n) == n;
  }
  virtual std::uint64_t size() const = 0;
  virtual const std::string& name() const = 0;
};

// A file being written. Not thread-safe (one writer). Owns its descriptor.
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  // Io naming the file (e.g. "No space left on device").
  virtual void append(std::string_view bytes) = 0;
  // Flushes to disk and publishes the file under its final name (rename of
  // the temporary). Until then the final name does not exist.
  virtual void commit() = 0;
  virtual const std::string& name() const = 0;
};

// The bytes [first, end) of a file a reader will read (FileSystem::will_read).
struct ReadRange {
  std::uint64_t first = 0;
  std::uint64_t end = UINT64_MAX;  // UINT64_MAX: to the file's end
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;
  // Io naming the path when it cannot be opened.
  virtual std::unique_ptr<RandomAccessFile> open_read(const std::string& path) = 0;
  // Writes go to "<path>.tmp-<pid>" until commit(); creates missing parent
  // directories. Dropping the file uncommitted removes the temporary.
  virtual std::unique_ptr<WritableFile> open_write(const std::string& path) = 0;
  // A hint: these paths will be opened, in this order, and of each the
  // bytes ranges[i] read (the whole file when not given). A remote file
  // system starts fetching those bytes ahead (the latest hint's first); a
  // local one ignores it.
  virtual void will_read(const std::vector<std::string>& /*paths*/,
                         const std::vector<ReadRange>& /*ranges*/ = {}) {}
  // Whether the shard index looks for a remote shard's sidecar index
  // (formats/shard_toc.h) before reading the shard (HPCT_DATA_SIDECARS).
  virtual bool sidecars() const { return true; }
  // The paths a pattern with '*' or '?' names, sorted (a remote file system
  // lists its bucket). Io when the listing fails.
  virtual std::vector<std::string> glob(const std::string& pattern);
};

// The real file system (POSIX calls). Stateless and thread-safe.
class PosixFileSystem final : public FileSystem {
 public:
  std::unique_ptr<RandomAccessFile> open_read(const std::string& path) override;
  std::unique_ptr<WritableFile> open_write(const std::string& path) override;
};

// What shard readers and writers use unless given another: local paths and
// file://, and http(s)/s3 URLs with the default settings and the process's
// AWS_* environment (a ShardFileSystem, source/remote_fs.h; commands build
// theirs from the job's config instead). Starts no thread until a URL is used.
std::shared_ptr<FileSystem> default_file_system();

// The whole file; Io naming it on failure.
std::string read_whole_file(FileSystem& fs, const std::string& path);

}  // namespace hpct::data
