// The optimizer state of `hpctrain train --elastic --shard 1|2` across the
// worlds of an elastic job (docs/elastic.md, "Sharded elastic jobs"). Each
// rank keeps only its range of the optimizer state (hpctrain/shard_layout.h),
// so a lost host would take its range with it: at every commit each rank
// also keeps a replica of one other rank's range, on another host where
// there is one, and a new world rebuilds the state at its own layout from
// the ranges its survivors hold. Internal to train/.
//
// A commit (every rank together, at the same step):
//   1. every rank copies its range of the updating optimizer's state (own);
//   2. every rank's range is broadcast in turn; the rank that replicates it
//      (replica_holder below) keeps a copy, the others drop it (the
//      transient cost is one range at a time);
//   3. a barrier (an allreduce): once it returns on a rank, every rank holds
//      its own range and its replica of this commit;
//   4. elastic::State::save() with the commit's key (generation, step and
//      world size in the State's extras, "shard/...");
//   5. check_host_updates(): once it returns, every rank has saved this
//      commit, so older commits' ranges are dropped.
// Steps 3 and 5 make the choice safe whatever rank dies when: a State saved
// at commit V implies every range of V is held (by its owner and by its
// replica holder), and a rank drops an older commit only once no rank can
// be restored to it. Between commits a rank holds two ranges (2/n of the
// optimizer state); from step 2 to step 5 up to four (its ranges of this
// commit and of the previous one).
//
// A new world (after the State was synced from rank 0, whose extras name
// the commit every rank now trains from): the ranks gather which commits'
// ranges each holds, pick one holder per range of that commit (the lowest
// rank holding it), and each range is broadcast by its holder; every rank
// takes the part that falls in its range of the new layout and installs it
// in its updating optimizer, then commits at the new layout. A range no
// survivor holds (its rank and its replica holder both lost) ends the job
// on every rank with one line naming the lost ranges and the sharded
// checkpoints to resume from. Threads: the training thread only.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/log.h"
#include "data/loader.h"
#include "elastic/elastic.h"
#include "hpctrain/hpctrain.h"
#include "train/models.h"
#include "train/trainer.h"

namespace hpct::train {

// The rank that keeps a replica of rank k's range: the rank at the same
// place on the next host when hosts hold equal numbers of ranks, else the
// next rank on another host, else (one host) the next rank. first[r] is
// the first rank of rank r's host (ranks of a host are contiguous).
int replica_holder(int k, const std::vector<int>& first);

class ElasticShards {
 public:
  ElasticShards(const TrainOptions& o, const Logger& log) : o_(o), log_(log) {}

  // In a new world, after DistributedOptimizer was built over the synced
  // parameters: installs this rank's range of the committed state (none at
  // the job's start), then commits. A collective.
  void rebuild(Context& ctx, elastic::State& state, Model& model, torch::optim::Optimizer& user,
               DistributedOptimizer& opt, data::Loader& loader);
  // The commit above (may throw elastic::MembershipChanged, as
  // State::commit). With --checkpoint-dir, every 10th commit also writes a
  // sharded checkpoint.
  void commit(Context& ctx, elastic::State& state, Model& model, torch::optim::Optimizer& user,
              DistributedOptimizer& opt, data::Loader& loader);

  // A copy of one rank's range of the optimizer state at one commit.
  struct Range {
    torch::Tensor values;  // [state keys, elements of the range], float32
    torch::Tensor meta;    // [pieces of the range, 2] int64: has state, Adam's step
  };
  // One commit's ranges that this rank holds, by the rank of that world.
  struct Version {
    std::int64_t gen = 0, step = 0;
    int world = 0;
    std::map<int, Range> ranges;
  };

 private:
  Range snapshot(Context& ctx, Model& model, torch::optim::Optimizer& user, DistributedOptimizer& opt) const;
  void install(Context& ctx, const Range& mine, Model& model, torch::optim::Optimizer& user,
               DistributedOptimizer& opt) const;
  // Rank 0's extras name the commit; every rank gets its range of it.
  Range gather_committed(Context& ctx, const elastic::State& state, DistributedOptimizer& opt);
  void keep(Context& ctx, elastic::State& state, Model& model, torch::optim::Optimizer& user,
            DistributedOptimizer& opt);
  void drop_older(std::int64_t gen, std::int64_t step);

  const TrainOptions& o_;
  Logger log_;
  std::vector<std::string> keys_;  // the optimizer's state tensors ("exp_avg", ...)
  std::vector<int> first_;         // first rank of each rank's host, this world
  std::vector<Version> versions_;  // oldest first, at most 2
  std::int64_t commits_ = 0;
};

}  // namespace hpct::train
