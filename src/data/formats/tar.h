// Tar archives, the container of WebDataset shards.
//
// TarScanner walks a tar's headers (ustar, GNU and pax: GNU 'L' long names,
// pax 'x' path and size records, base-256 sizes) and reports each regular
// file's name and where its data lies, without reading the data. TarWriter
// writes ustar members (pax records for names over 100 bytes), readable by
// GNU tar, bsdtar and Python's tarfile/webdataset.
//
// Every damage is DataCorrupt naming the archive, the member (number and
// name when known) and the byte offset: a header whose checksum fails, a
// member whose data runs past the end of the file, an archive that ends
// without its end-of-archive blocks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "data/source/file.h"

namespace hpct::data {

constexpr size_t kTarBlock = 512;

struct TarMember {
  std::string name;               // full path inside the archive
  std::uint64_t index = 0;        // 0-based count of regular files before it
  std::uint64_t header_offset = 0;  // first header block (incl. GNU/pax headers) of the member
  std::uint64_t data_offset = 0;
  std::uint64_t size = 0;
};

// Not thread-safe; borrows the file, which must outlive the scanner.
class TarScanner {
 public:
  explicit TarScanner(const RandomAccessFile& file);
  // Starts at a header boundary other than 0 (resuming a scan).
  TarScanner(const RandomAccessFile& file, std::uint64_t offset, std::uint64_t next_index);

  // The next regular file, or nullopt after the end-of-archive marker.
  // Directories, links and other entries are passed over. DataCorrupt as
  // described above; after an error the scanner stays failed.
  std::optional<TarMember> next();
  std::uint64_t offset() const { return offset_; }

 private:
  [[noreturn]] void fail(const std::string& what, std::uint64_t at, const std::string& member);
  const RandomAccessFile& file_;
  std::uint64_t offset_ = 0;
  std::uint64_t index_ = 0;
  bool failed_ = false;
};

// Reads a member's data (size bytes at data_offset); DataCorrupt when the
// file is shorter than the header promised.
std::string read_member(const RandomAccessFile& file, const TarMember& m);

// Writes members to a WritableFile it borrows. Not thread-safe.
class TarWriter {
 public:
  // mtime: the modification time stamped on every member (fixed, so that
  // packing the same data twice gives the same bytes).
  explicit TarWriter(WritableFile& out, std::uint64_t mtime = 0);
  void add(const std::string& name, std::string_view data);
  // Writes the two zero blocks that end the archive. Does not commit.
  void finish();
  // Bytes written so far, including the end blocks after finish().
  std::uint64_t bytes() const { return bytes_; }
  // What add(name, data) will add to bytes().
  static std::uint64_t member_bytes(const std::string& name, size_t data_size);

 private:
  void write_header(const std::string& name, std::uint64_t size, char type);
  WritableFile& out_;
  std::uint64_t mtime_;
  std::uint64_t bytes_ = 0;
};

// Whether a member's own 512-byte header block names `name` (case not
// compared) and holds `size` bytes: the check a member read through a
// sidecar index gets (shard_toc.h).
bool tar_header_matches(const char* block, const std::string& name, std::uint64_t size);

// The header block of one member (exposed so tests can damage headers).
std::string tar_header(const std::string& name, std::uint64_t size, char type, std::uint64_t mtime);

}  // namespace hpct::data
