// A shard's table of contents: the sidecar "<shard>.idx" that lists where
// every member (tar) or record (TFRecord) lies, so a reader can index a
// remote shard without downloading it first.
//
// Without it the index (shard_index.h) walks every tar header, which for a
// shard in a bucket means waiting for its download; with it the Loader
// plans the epoch from the sidecars alone and the shards stream as they
// are read. `data pack` writes one beside each shard; `data index` writes
// them for shards made by other tools.
//
// The format is text, one line per member, so a user can read it:
//
//   hpctrain-shard-index 1 tar <shard bytes> <members>
//   <header offset> <data offset> <size> <member name>
//   ...
//
//   hpctrain-shard-index 1 tfrecord <file bytes> <records>
//   <record offset> <data length>
//   ...
//
// A sidecar is checked against its shard: the shard's size when the shard
// is opened, and (tar) each member's header when its data is read, so a
// shard repacked under the same name with a stale sidecar is named, with
// the command that remakes the sidecar, not read wrongly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "data/formats/tar.h"

namespace hpct::data {

inline constexpr const char* kTocSuffix = ".idx";

// "<shard>.idx" (also for URLs: the sidecar sits beside the object).
std::string toc_path(const std::string& shard);
bool is_toc_path(const std::string& path);

struct ShardToc {
  bool tfrecord = false;
  std::uint64_t shard_bytes = 0;
  // tar: regular files in archive order (TarMember::index is the position).
  // TFRecord: one entry per record, header_offset the record's offset,
  // size its data length (name empty).
  std::vector<TarMember> members;
};

// The sidecar's text.
std::string format_toc(const ShardToc& toc);

// Parses a sidecar; DataCorrupt naming `where` (the sidecar's path) and the
// line when it is not one.
ShardToc parse_toc(std::string_view text, const std::string& where);

// The table of contents of a shard read whole (tar members by their headers,
// TFRecord records by their frames); DataCorrupt on damage, as the walk of
// the index would give.
ShardToc make_toc(const RandomAccessFile& file, bool tfrecord);

}  // namespace hpct::data
