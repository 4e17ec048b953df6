// Checkpoint files of `hpctrain train`: how a checkpoint reaches the disk
// whole or not at all, and how a resume finds the newest whole one.
//
// A checkpoint at step S is two files in the checkpoint directory:
//   ckpt-<S, 10 digits>.pt     the payload (a libtorch archive, see trainer.cc)
//   ckpt-<S, 10 digits>.json   its manifest: step, epoch, payload bytes, CRC-32C
// Each is written to a temporary name, fsynced, renamed into place, and the
// directory fsynced, payload first: a manifest exists only for a payload
// that was complete when it was written. A payload damaged later (truncated,
// bit-flipped) fails its manifest's size or checksum, and find_latest skips
// it with a warning and falls back to the previous checkpoint.
//
// Only rank 0 writes (the directory must be shared when ranks are on several
// hosts). Not thread-safe against another writer of the same directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/log.h"

namespace hpct::train {

struct CheckpointInfo {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  std::string payload_path;
  std::string manifest_path;
};

// Writes the payload and its manifest atomically (as above); keeps the
// newest `keep` checkpoints and removes older ones (0: keep all). Io naming
// the file on failure. Blocks on fsync.
CheckpointInfo write_checkpoint(const std::string& dir, std::int64_t step, std::int64_t epoch,
                                const std::string& payload, int keep = 3);

// The payload of one checkpoint, checked against its manifest: DataCorrupt
// naming the file and the first bad byte offset or the checksums.
std::string read_checkpoint(const CheckpointInfo& info);

// Checkpoints in dir with a readable manifest, newest step first.
std::vector<CheckpointInfo> list_checkpoints(const std::string& dir);

// The newest checkpoint whose payload passes its manifest (payload returned
// in *payload), warning through log about each damaged one skipped; nullopt
// when there is none (or dir does not exist).
std::optional<CheckpointInfo> find_latest(const std::string& dir, const Logger& log,
                                          std::string* payload);

// The checkpoint a manifest or payload path names (either file of the pair).
CheckpointInfo checkpoint_at(const std::string& path);

}  // namespace hpct::train
