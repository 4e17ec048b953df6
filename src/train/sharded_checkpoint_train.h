// Sharded checkpoints of `hpctrain train --shard N` (sharded_checkpoint.h,
// names as in sharded_checkpoint_torch.h): each rank writes the parameter
// elements it owns under the shard layout (hpctrain/shard_layout.h) and the
// optimizer state it keeps for them, rank 0 also the buffers, and every rank
// its RNG and Loader bytes; a job of any world size and any --shard stage
// resumes from it. Internal to train/.
//
// Resuming at another world size: the parameters and the optimizer state
// re-split by the new layout. The data position carries over when the
// checkpoint was taken at an epoch's end, or with --data-split global
// (the same samples per step at any world size for the same global batch);
// otherwise the resume is refused by name. Each rank's RNG state is restored
// only at the same world size.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "core/log.h"
#include "data/loader.h"
#include "hpctrain/hpctrain.h"
#include "train/models.h"
#include "train/trainer.h"
#include "train/training_state.h"

namespace hpct::train {

// Where a sharded save happens in the run.
struct ShardedSavePoint {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  bool epoch_done = false;
  std::uint64_t consumed = 0;  // samples of `epoch` the whole job consumed
};

// A piece of a parameter this rank owns, with the updating optimizer's
// tensor for it (a flat view into DistributedOptimizer's parameter buffer).
struct OwnedPiece {
  hpct::ShardPiece piece;
  std::vector<std::int64_t> shape;  // the whole parameter's
  torch::Tensor param;
};

// This rank's pieces in the order DistributedOptimizer builds its optimizer
// (by the user's param group, then in layout order); Mismatch when the
// updating optimizer does not hold one tensor per piece.
std::vector<OwnedPiece> owned_pieces(Context& ctx, Model& model, torch::optim::Optimizer& user_opt,
                                     DistributedOptimizer& opt);

// A collective: every rank writes its shard, then rank 0 the index (after
// gathering every rank's file description, so the index is last).
void save_sharded_checkpoint(Context& ctx, const TrainOptions& o, const Logger& log, Model& model,
                             torch::optim::Optimizer& user_opt, DistributedOptimizer& opt,
                             data::Loader& loader, const ShardedSavePoint& at);

// --resume auto (the newest sharded checkpoint in --checkpoint-dir every
// rank can read; damaged ones skipped with a warning naming the file) or
// --resume PATH (a sharded-<step> folder or its index.json). Loads the
// parameters, buffers, this rank's optimizer state and the position; a
// collective, after DistributedOptimizer's construction. resumed_from -1:
// nothing to resume.
ResumePoint resume_sharded_checkpoint(Context& ctx, const TrainOptions& o, const Logger& log,
                                      Model& model, torch::optim::Optimizer& user_opt,
                                      DistributedOptimizer& opt);

}  // namespace hpct::train
