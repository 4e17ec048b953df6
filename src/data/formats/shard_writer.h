// Writes samples into numbered tar shards ("out/train-%06d.tar"), or records
// into numbered TFRecord files ("out/train-%05d.tfrecord"), starting a new
// shard when one reaches max_count samples or would pass max_size bytes.
// Each shard is published by rename only when complete (file.h), so readers
// never see half a shard.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/source/file.h"
#include "data/formats/shard_toc.h"
#include "data/formats/tar.h"

namespace hpct::data {

enum class ShardFormat { kTar, kTfRecord };

struct ShardWriterOptions {
  std::string pattern;                   // printf pattern with one integer conversion
  ShardFormat format = ShardFormat::kTar;
  std::uint64_t max_count = 10000;       // samples per shard
  std::uint64_t max_size = 1ull << 30;   // bytes per shard (a lone larger sample still goes in)
  std::shared_ptr<FileSystem> fs = default_file_system();  // local paths and URLs
  // Write each shard's table of contents beside it ("<shard>.idx",
  // shard_toc.h), committed after the shard, so a remote reader can plan
  // an epoch without downloading the shards first.
  bool write_index = true;
};

// Not thread-safe. Io when a write fails (the shard being written is
// removed, the ones already committed stay).
class ShardWriter {
 public:
  // InvalidArgument when the pattern lacks exactly one %d-style conversion.
  explicit ShardWriter(ShardWriterOptions options);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // A tar sample. fields: (extension, bytes) in the order they go into the tar.
  void write(const std::string& key, const std::vector<std::pair<std::string, std::string>>& fields);
  // A TFRecord record (one sample; usually a tf.train.Example, example.h).
  void write_record(std::string_view data);
  // Finishes and commits the last shard (and its index).
  void close();

  const std::vector<std::string>& shards() const { return shards_; }
  std::uint64_t samples() const { return samples_; }
  std::uint64_t bytes() const { return bytes_done_ + shard_bytes(); }

 private:
  // Starts a new shard first when one more sample of `need` bytes would
  // pass the limits; opens a shard when none is open.
  void make_room(std::uint64_t need);
  std::uint64_t shard_bytes() const;
  void finish_shard();
  ShardWriterOptions options_;
  std::unique_ptr<WritableFile> file_;
  std::unique_ptr<TarWriter> tar_;   // tar format
  std::uint64_t record_bytes_ = 0;  // TFRecord format: bytes in the open shard
  std::uint64_t in_shard_ = 0;
  std::uint64_t samples_ = 0;
  std::uint64_t bytes_done_ = 0;
  std::vector<std::string> shards_;
  ShardToc toc_;  // the open shard's members so far
};

// The shard name for number n: format_shard_name("a-%06d.tar", 3) = "a-000003.tar".
std::string format_shard_name(const std::string& pattern, std::uint64_t n);

}  // namespace hpct::data
