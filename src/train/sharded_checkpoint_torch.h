// Sharded checkpoints (sharded_checkpoint.h) of a libtorch model and
// optimizer, and their consolidation into one ordinary file. Internal to
// train/ and the `hpctrain checkpoint` command.
//
// The names a training checkpoint uses for its tensors:
//   param/<name>                  a parameter (model.named_parameters())
//   buffer/<name>                 a buffer (batch norm's running statistics)
//   optim/<name>/<key>            the optimizer's state of parameter <name>:
//                                 sgd: momentum_buffer; adam: exp_avg,
//                                 exp_avg_sq, max_exp_avg_sq, step (int64)
//   rank/<r>/rng, rank/<r>/loader, rank/<r>/compression
//                                 rank r's own bytes (uint8), written by r
// and its index's meta holds {"train": {model, in_channels, optimizer, lr,
// momentum, weight_decay, epoch, epoch_done}}.
#pragma once

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "core/log.h"
#include "train/models.h"
#include "train/sharded_checkpoint.h"

namespace hpct::train {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

std::string sharded_dtype_of(torch::ScalarType t);  // InvalidArgument for types the format lacks
torch::ScalarType torch_dtype_of(const std::string& dtype);

// The model's and the optimizer's tensors under the names above, on the
// CPU and contiguous (copies where they were not). Optimizer state exists
// only for parameters that have taken a step.
NamedTensors training_tensors(Model& model, torch::optim::Optimizer& opt);

// Rank `rank`'s pieces of every tensor under an even contiguous split (the
// first numel % world ranks hold one element more). The pieces point into
// the tensors: keep them alive until write_shard returns.
std::vector<CheckpointPiece> contiguous_pieces(const NamedTensors& tensors, int rank, int world);

// A whole tensor of the checkpoint, read from all its pieces.
torch::Tensor read_whole_tensor(CheckpointFiles& files, const ShardedIndex& index,
                                const std::string& name);

// The checkpoint `path` names: a checkpoint's folder or its index.json, or
// a checkpoint directory, where it is the newest whose shard files all pass
// verify_shards (each damaged one skipped with a warning naming the file).
// The chosen one's files are checked whole. Io or DataCorrupt naming what
// is missing or damaged, which ranks' files are needed and the fix.
ShardedIndex open_sharded_checkpoint(CheckpointFiles& files, const std::string& path,
                                     const Logger& log);

// One file torch.load reads (weights_only=True; torch::pickle_save): a
// dict {"format": "hpctrain-consolidated-1", "step", "world_size",
// "model": {name: tensor} (parameters and buffers, a state_dict),
// "optimizer": {name: {key: tensor}}, "other": {name: tensor}}.
void consolidate_for_torch(CheckpointFiles& files, const ShardedIndex& index,
                           const std::string& out);

// Today's checkpoint format (checkpoint.h): the payload at `out` and its
// manifest beside it (the same name, .json), which `hpctrain train --resume
// out` loads at the checkpoint's world size. Needs the meta above;
// InvalidArgument naming what is missing.
void consolidate_for_hpctrain(CheckpointFiles& files, const ShardedIndex& index,
                              const std::string& out);

}  // namespace hpct::train
