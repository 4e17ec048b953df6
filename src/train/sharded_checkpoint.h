// Sharded checkpoints: every rank writes the parts of the tensors it owns,
// rank 0 writes one small index, and a job of any world size reads back the
// ranges each of its ranks needs. The format knows nothing of how the
// tensors were partitioned: a tensor is a flat run of elements, and a piece
// is (tensor name, flat element offset, element count, dtype, bytes).
//
// A checkpoint at step S is a folder in the checkpoint directory:
//   sharded-<S, 10 digits>/shard-<rank, 5>-of-<world, 5>.bin   one per rank
//   sharded-<S, 10 digits>/index.json                          written last
// A shard file is the 8-byte magic "HPCTSHD1" and then its pieces' bytes,
// each at a 64-byte aligned offset. The index (format "hpctrain-sharded-1")
// holds the step, the world size, the caller's metadata ("meta"), every
// shard file's name, rank, size and CRC-32C, and every tensor's full shape,
// dtype and pieces: which file, which element range, at which byte offset,
// with the piece's own CRC-32C. A reader checks each piece it reads against
// its CRC and each file's size against the index; whole-file readers
// (consolidate, verify) check the file's CRC too.
//
// Writing (the protocol, step by step; the caller moves the bytes between
// ranks through its communicator):
//   1. every rank: write_shard() writes its file under a temporary name,
//      fsyncs it, renames it into place and fsyncs the folder; it returns
//      the file's description (ShardFile), which the rank sends to rank 0
//      (shard_file_to_json / shard_file_from_json);
//   2. rank 0, once it holds every rank's ShardFile: write_index() checks
//      that the pieces cover every tensor exactly once, writes index.json
//      atomically the same way, and prunes old checkpoints.
// A crash before step 2 completes leaves no index for S: the previous
// checkpoint stays the newest usable one. A shard damaged later (torn,
// bit-flipped, missing) fails its size or CRC when read, and the loaders
// fall back to the previous checkpoint, naming the file in a warning.
//
// Loading: load_newest() tries the checkpoints newest first; on each, every
// rank reads the ranges it needs (read_ranges: only the files and pieces
// that hold them) and the ranks agree through the caller's Agree callback
// (an allreduce in a job; identity in one process), so all of them load the
// same step or all fall back together.
//
// Thread-safety: the functions share no state; concurrent writers of one
// checkpoint write distinct files (one per rank). Not safe against two jobs
// writing the same directory.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/log.h"

namespace hpct::train {

// Element types a piece may hold: float32, float64, float16, bfloat16,
// int64, int32, int16, int8, uint8, bool. InvalidArgument for others.
std::size_t sharded_dtype_size(const std::string& dtype);

// Elements of a tensor of that shape (1 for a scalar's empty shape).
std::int64_t sharded_numel(const std::vector<std::int64_t>& shape);

// What a rank writes: elements [offset, offset + numel) of the flattened
// tensor `name` of full `shape`. `data` points at numel elements of dtype
// and must stay valid during write_shard (not owned).
struct CheckpointPiece {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype;
  std::int64_t offset = 0;
  std::int64_t numel = 0;
  const void* data = nullptr;
};

// A piece as written: where its bytes are in the file, and their CRC.
struct WrittenPiece {
  std::string name;
  std::vector<std::int64_t> shape;
  std::string dtype;
  std::int64_t offset = 0;
  std::int64_t numel = 0;
  std::uint64_t file_offset = 0;
  std::uint32_t crc32c = 0;
};

// One rank's shard file as written (step 1 of the protocol).
struct ShardFile {
  int rank = 0;
  std::string name;  // file name inside the checkpoint's folder
  std::uint64_t bytes = 0;
  std::uint32_t crc32c = 0;
  std::vector<WrittenPiece> pieces;
};
std::string shard_file_to_json(const ShardFile& f);
ShardFile shard_file_from_json(const std::string& text);  // DataCorrupt when malformed

// The files a checkpoint touches, behind an interface so that tests can
// inject a failing or stalling write (a full disk, a crash mid-write).
// PosixCheckpointFiles is the real one. Implementations are thread-safe.
class CheckpointFiles {
 public:
  // A file being written under a temporary name; commit() fsyncs it,
  // renames it into place and fsyncs the folder. Destroyed without commit:
  // the temporary file is removed. Blocking; one thread at a time.
  class Writer {
   public:
    virtual ~Writer() = default;
    virtual void append(const void* data, std::size_t n) = 0;  // Io naming the file
    virtual void commit() = 0;
  };
  virtual ~CheckpointFiles() = default;
  virtual std::unique_ptr<Writer> create(const std::string& dir, const std::string& name) = 0;
  // Up to n bytes from offset (fewer at the end of the file); Io when the
  // file cannot be opened, naming it.
  virtual std::string read_range(const std::string& path, std::uint64_t offset,
                                 std::uint64_t n) = 0;
  virtual std::uint64_t size(const std::string& path) = 0;  // Io naming the file when missing
};
std::shared_ptr<CheckpointFiles> posix_checkpoint_files();

// The folder of the checkpoint at `step` in `dir`, and a shard file's name.
std::string sharded_folder(const std::string& dir, std::int64_t step);
std::string shard_file_name(int rank, int world_size);
// The step of a folder named sharded-<digits>; -1 for any other name.
std::int64_t sharded_folder_step(const std::string& folder_name);

// Step 1: this rank's shard file of the checkpoint at `step` (creates the
// folders). Blocks on fsync.
ShardFile write_shard(CheckpointFiles& files, const std::string& dir, std::int64_t step, int rank,
                      int world_size, const std::vector<CheckpointPiece>& pieces);

// Step 2 (rank 0): the index over every rank's ShardFile (one per rank,
// any order). InvalidArgument naming the tensor and range when the pieces
// leave a gap, overlap, or disagree on a tensor's shape or dtype. `meta` is
// stored as is. Keeps the newest `keep` checkpoints (0: all). Returns the
// index's path.
std::string write_index(CheckpointFiles& files, const std::string& dir, std::int64_t step,
                        int world_size, const std::vector<ShardFile>& shards,
                        const nlohmann::json& meta, int keep = 3);

// A tensor as the index describes it.
struct ShardedTensor {
  std::vector<std::int64_t> shape;
  std::string dtype;
  std::int64_t numel = 0;
  struct Piece {
    int file = 0;  // index into ShardedIndex::files
    std::int64_t offset = 0;
    std::int64_t numel = 0;
    std::uint64_t file_offset = 0;
    std::uint32_t crc32c = 0;
  };
  std::vector<Piece> pieces;  // sorted by offset, covering [0, numel) once
};

// A checkpoint's index, parsed and checked (read_index).
struct ShardedIndex {
  std::string folder;  // the checkpoint's folder
  std::string index_path;
  std::int64_t step = 0;
  int world_size = 0;
  nlohmann::json meta;
  struct File {
    std::string name;
    int rank = 0;
    std::uint64_t bytes = 0;
    std::uint32_t crc32c = 0;
  };
  std::vector<File> files;
  std::map<std::string, ShardedTensor> tensors;
  std::string file_path(int file) const { return folder + "/" + files[file].name; }
};

// Io when the index is missing, DataCorrupt naming it when it is not a
// sharded checkpoint's index or its pieces are inconsistent.
ShardedIndex read_index(CheckpointFiles& files, const std::string& index_path);

// Checkpoint folders in dir whose index exists, newest step first (the
// indexes are not read: read_index checks them).
std::vector<std::string> list_sharded_indexes(const std::string& dir);

// What a loading rank needs: elements [offset, offset + numel) of `name`,
// copied to dst (numel elements of the tensor's dtype; not owned). An empty
// dtype accepts the checkpoint's; a different one is a Mismatch.
struct RangeRequest {
  std::string name;
  std::int64_t offset = 0;
  std::int64_t numel = 0;
  std::string dtype;
  void* dst = nullptr;
};

// Reads the requested ranges, opening only the files that hold them and
// reading only the pieces that overlap them, each checked against its CRC
// and its file's size. InvalidArgument for a tensor or range not in the
// checkpoint; DataCorrupt or Io naming the shard file (and the ranks whose
// file it is) otherwise.
void read_ranges(CheckpointFiles& files, const ShardedIndex& index,
                 const std::vector<RangeRequest>& wants);

// Checks every shard file whole: size and CRC-32C against the index.
// DataCorrupt or Io naming the first bad file.
void verify_shards(CheckpointFiles& files, const ShardedIndex& index);

// Returns true only when every rank of the job passed ok = true for the
// checkpoint at `step` (a collective: every rank calls it once per try).
using AgreeFn = std::function<bool(std::int64_t step, bool ok)>;

// The first of `candidates` (index paths, newest first: rank 0's
// list_sharded_indexes, sent to every rank so they try the same ones) that
// every rank could read its ranges of: on each, parses the index, calls
// wants_for(index) for this rank's requests, reads them, and asks agree
// (once per candidate on every rank). Warns through log naming each
// damaged index or file it skips. nullopt when none is usable.
std::optional<ShardedIndex> load_newest(
    CheckpointFiles& files, const std::vector<std::string>& candidates, const Logger& log,
    const std::function<std::vector<RangeRequest>(const ShardedIndex&)>& wants_for,
    const AgreeFn& agree);

}  // namespace hpct::train
