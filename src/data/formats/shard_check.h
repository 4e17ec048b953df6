// What `hpctrain data inspect` and `data verify` report about a shard: its
// samples, fields and sizes, and whether every member reads and every image
// decodes. Tar shards and TFRecord files (is_tfrecord_path), whose records
// are read as tf.train.Examples.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/source/file.h"

namespace hpct::data {

struct FieldSummary {
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;
  std::uint64_t min_bytes = 0;
  std::uint64_t max_bytes = 0;
};

struct ShardSummary {
  std::string path;
  std::uint64_t file_bytes = 0;
  std::uint64_t samples = 0;   // tar: samples; TFRecord: records
  std::uint64_t members = 0;
  std::map<std::string, FieldSummary> fields;  // by extension
};

// Walks the headers (reads no data). DataCorrupt / Io as the tar reader.
ShardSummary inspect_shard(FileSystem& fs, const std::string& path);

// Reads every member (TFRecord: every record and its CRCs, each parsed as a
// tf.train.Example with an image and a label feature, fields.h) and decodes
// every .png/.jpg/.jpeg field (TFRecord: the image feature). Returns the failures, each naming the shard,
// member and byte offset; stops at the first unless all is set. A tar whose
// headers are damaged yields one failure (nothing after it can be trusted).
std::vector<std::string> verify_shard(FileSystem& fs, const std::string& path, bool all);

}  // namespace hpct::data
