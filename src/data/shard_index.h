// The sample index of a set of shards: every sample's key and where its
// fields lie, found by walking the tar headers or the TFRecord record
// headers (the data is not read).
//
// Tar shards (WebDataset layout, sample.h) and TFRecord files
// (is_tfrecord_path) may be mixed. A TFRecord record is one sample with key
// "<file name>#<record number>" and one field, kTfRecordField, holding the
// record's data (a tf.train.Example, decoded by fields.h); its FieldRef
// holds the record number as member_index, the record's offset as
// header_offset, and the data's offset and length.
//
// The index gives the loader and the data server random access to samples
// by global id, which the epoch plan (sampler.h), exact resume and server
// reconnects rely on. It costs one header read per member: about 0.1 s per
// 100k members from the page cache. It holds the shards open.
//
// A remote shard (http(s), s3) with a sidecar index ("<shard>.idx",
// formats/shard_toc.h) is indexed from the sidecar instead, without its
// bytes: it is opened on the first read of one of its samples, which then
// waits only for the bytes it needs (the shard streams, source/remote_fs.h).
// Its size is checked against the sidecar on that open and every member's
// header on its read, so a stale sidecar is named (DataCorrupt), never read
// wrongly. A remote shard without one is walked, which waits for its
// download.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/log.h"
#include "data/source/file.h"
#include "data/sample.h"

namespace hpct::data {

struct ShardIndexStats {
  std::uint64_t skipped_samples = 0;  // samples lost to damage (on_error skip)
  std::uint64_t damaged_shards = 0;
  std::uint64_t toc_shards = 0;       // indexed from their sidecars, not walked
  std::vector<std::string> errors;    // the first few damage reports
};

// Immutable after build; thread-safe to read (files use pread).
class ShardIndex {
 public:
  ShardIndex();
  ~ShardIndex();
  // Walks every shard in order. With OnError::kFail the first damage raises
  // DataCorrupt (shard, member or record, byte offset); with kSkip a damaged
  // shard keeps the samples before the damage, the sample being read when it
  // hit is counted as skipped, and a shard that cannot be opened is skipped
  // whole. In a TFRecord file the damage found here is framing damage (a
  // length CRC, a file cut short); a record whose data CRC fails is found by
  // read(). Blocks on disk.
  static std::shared_ptr<const ShardIndex> build(const std::vector<std::string>& shards,
                                                 std::shared_ptr<FileSystem> fs, OnError on_error,
                                                 const Logger& log = Logger());

  const std::vector<std::string>& shards() const { return shards_; }
  const std::vector<std::uint64_t>& shard_samples() const { return shard_samples_; }
  std::uint64_t size() const { return samples_.size(); }
  const SampleRef& sample(std::uint64_t id) const { return samples_.at(id); }
  const ShardIndexStats& stats() const { return stats_; }
  // A hash of the shard names and their sample counts: ranks, servers and
  // saved loader states compare it to make sure they mean the same data.
  std::uint64_t fingerprint() const { return fingerprint_; }

  // Reads a sample's fields (DataCorrupt/Io naming shard, member, offset);
  // a TFRecord record's data CRC is checked here. Thread-safe.
  RawSample read(std::uint64_t id) const;
  bool is_tfrecord_shard(std::uint32_t shard) const { return tfrecord_.at(shard); }

 private:
  struct ShardFile;  // a shard's open file, opened at build or on first read
  const RandomAccessFile& file(std::uint32_t shard) const;

  std::vector<std::string> shards_;
  std::shared_ptr<FileSystem> fs_;
  std::vector<std::unique_ptr<ShardFile>> files_;
  std::vector<std::uint64_t> shard_samples_;
  std::vector<bool> tfrecord_;  // by shard: a TFRecord file, not a tar
  std::vector<SampleRef> samples_;
  ShardIndexStats stats_;
  std::uint64_t fingerprint_ = 0;
};

}  // namespace hpct::data
