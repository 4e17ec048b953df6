// Reading a sharded checkpoint (sharded_checkpoint.h): the ranges one rank
// needs, every file whole, and the newest checkpoint all ranks can read.
#include <algorithm>
#include <cstring>
#include <set>

#include "core/error.h"
#include "data/formats/crc32c.h"
#include "train/sharded_checkpoint.h"

namespace hpct::train {
namespace {

std::string ranks_text(const ShardedIndex& idx, const std::set<int>& files) {
  std::string s;
  for (int f : files) s += (s.empty() ? "" : ", ") + std::to_string(idx.files[f].rank);
  return s;
}

// Who wrote a file, for messages.
std::string file_text(const ShardedIndex& idx, int f) {
  return "shard file " + idx.file_path(f) + " (rank " + std::to_string(idx.files[f].rank) + " of " +
         std::to_string(idx.world_size) + ")";
}

// Reads and checks pieces, each file's size checked once.
class PieceReader {
 public:
  PieceReader(CheckpointFiles& files, const ShardedIndex& idx, std::set<int> needed)
      : files_(files), idx_(idx), needed_(std::move(needed)) {}

  const std::string& piece(const std::string& name, const ShardedTensor& t, std::size_t i) {
    const auto& p = t.pieces[i];
    auto key = std::make_pair(name, i);
    auto it = cache_.find(key);
    if (it != cache_.end()) return it->second;
    check_size(p.file);
    const std::uint64_t n = static_cast<std::uint64_t>(p.numel) * sharded_dtype_size(t.dtype);
    std::string bytes = files_.read_range(idx_.file_path(p.file), p.file_offset, n);
    if (bytes.size() != n) {
      throw_data_corrupt(file_text(idx_, p.file) + ": " + name + " is cut short at byte offset " +
                         std::to_string(p.file_offset + bytes.size()));
    }
    const std::uint32_t crc = data::crc32c(bytes.data(), bytes.size());
    if (crc != p.crc32c) {
      throw_data_corrupt(file_text(idx_, p.file) + ": CRC-32C " + std::to_string(crc) + " of " +
                         name + " elements [" + std::to_string(p.offset) + ", " +
                         std::to_string(p.offset + p.numel) + ") at byte offset " +
                         std::to_string(p.file_offset) + ", index says " +
                         std::to_string(p.crc32c));
    }
    return cache_.emplace(key, std::move(bytes)).first->second;
  }

 private:
  void check_size(int f) {
    if (!sized_.insert(f).second) return;
    const std::string path = idx_.file_path(f);
    std::uint64_t have = 0;
    try {
      have = files_.size(path);
    } catch (const Error& e) {
      throw Error(e.code(), file_text(idx_, f) + " cannot be read (" + e.what() +
                                "); this load needs the files of ranks " +
                                ranks_text(idx_, needed_) + " of the " +
                                std::to_string(idx_.world_size) + "-rank checkpoint in " +
                                idx_.folder);
    }
    if (have != idx_.files[f].bytes) {
      throw_data_corrupt(file_text(idx_, f) + ": " + std::to_string(have) + " bytes, index says " +
                         std::to_string(idx_.files[f].bytes) +
                         " (torn or overwritten from byte offset " +
                         std::to_string(std::min(have, idx_.files[f].bytes)) + ")");
    }
  }

  CheckpointFiles& files_;
  const ShardedIndex& idx_;
  std::set<int> needed_;
  std::set<int> sized_;
  std::map<std::pair<std::string, std::size_t>, std::string> cache_;
};

const ShardedTensor& find_tensor(const ShardedIndex& idx, const RangeRequest& w) {
  auto it = idx.tensors.find(w.name);
  if (it == idx.tensors.end()) {
    throw_invalid_argument(idx.index_path + ": no tensor " + w.name +
                           " in the checkpoint at step " + std::to_string(idx.step) + " (" +
                           std::to_string(idx.tensors.size()) + " tensors)");
  }
  const ShardedTensor& t = it->second;
  if (!w.dtype.empty() && w.dtype != t.dtype) {
    throw_mismatch(idx.index_path + ": " + w.name + " is " + t.dtype + " in the checkpoint, " +
                   w.dtype + " is asked for");
  }
  if (w.offset < 0 || w.numel < 0 || w.offset + w.numel > t.numel) {
    throw_invalid_argument(idx.index_path + ": " + w.name + " elements [" +
                           std::to_string(w.offset) + ", " + std::to_string(w.offset + w.numel) +
                           ") asked for; it has " + std::to_string(t.numel));
  }
  return t;
}

}  // namespace

void read_ranges(CheckpointFiles& files, const ShardedIndex& idx,
                 const std::vector<RangeRequest>& wants) {
  std::set<int> needed;
  for (const auto& w : wants) {
    const ShardedTensor& t = find_tensor(idx, w);
    for (const auto& p : t.pieces) {
      if (p.offset < w.offset + w.numel && w.offset < p.offset + p.numel) needed.insert(p.file);
    }
  }
  PieceReader reader(files, idx, needed);
  for (const auto& w : wants) {
    const ShardedTensor& t = idx.tensors.at(w.name);
    const std::size_t esize = sharded_dtype_size(t.dtype);
    for (std::size_t i = 0; i < t.pieces.size(); ++i) {
      const auto& p = t.pieces[i];
      const std::int64_t lo = std::max(p.offset, w.offset);
      const std::int64_t hi = std::min(p.offset + p.numel, w.offset + w.numel);
      if (lo >= hi) continue;
      const std::string& bytes = reader.piece(w.name, t, i);
      std::memcpy(static_cast<char*>(w.dst) + (lo - w.offset) * esize,
                  bytes.data() + (lo - p.offset) * esize,
                  static_cast<std::size_t>(hi - lo) * esize);
    }
  }
}

void verify_shards(CheckpointFiles& files, const ShardedIndex& idx) {
  constexpr std::uint64_t kChunk = 8u << 20;
  for (std::size_t f = 0; f < idx.files.size(); ++f) {
    const std::string path = idx.file_path(static_cast<int>(f));
    const auto& want = idx.files[f];
    std::uint64_t have = 0;
    try {
      have = files.size(path);
    } catch (const Error& e) {
      throw Error(e.code(), file_text(idx, static_cast<int>(f)) + " cannot be read (" + e.what() +
                                "); reading the whole checkpoint needs the files of all " +
                                std::to_string(idx.world_size) + " ranks (" +
                                idx.files.front().name + " .. " + idx.files.back().name + ") in " +
                                idx.folder);
    }
    if (have != want.bytes) {
      throw_data_corrupt(file_text(idx, static_cast<int>(f)) + ": " + std::to_string(have) +
                         " bytes, index says " + std::to_string(want.bytes));
    }
    std::uint32_t crc = 0;
    for (std::uint64_t at = 0; at < have; at += kChunk) {
      std::string chunk = files.read_range(path, at, std::min(kChunk, have - at));
      crc = data::crc32c(chunk.data(), chunk.size(), crc);
    }
    if (crc != want.crc32c) {
      throw_data_corrupt(file_text(idx, static_cast<int>(f)) + ": CRC-32C " + std::to_string(crc) +
                         " over bytes 0.." + std::to_string(have) + ", index says " +
                         std::to_string(want.crc32c));
    }
  }
}

std::optional<ShardedIndex> load_newest(
    CheckpointFiles& files, const std::vector<std::string>& candidates, const Logger& log,
    const std::function<std::vector<RangeRequest>(const ShardedIndex&)>& wants_for,
    const AgreeFn& agree) {
  for (const auto& path : candidates) {
    std::optional<ShardedIndex> idx;
    std::int64_t step = -1;
    try {
      idx = read_index(files, path);
      step = idx->step;
      read_ranges(files, *idx, wants_for(*idx));
    } catch (const Error& e) {
      log.warn("train",
               std::string("skipping damaged sharded checkpoint (falling back to an older one): ") +
                   e.what());
      idx.reset();
    }
    if (agree(step, idx.has_value())) return idx;
    if (idx)
      log.warn("train",
               "skipping sharded checkpoint " + path + ": another rank could not read its part");
  }
  return std::nullopt;
}

}  // namespace hpct::train
