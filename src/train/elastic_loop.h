// The loop of run_elastic_training (trainer.cc) inside one world of
// hpct::elastic::run: the change's metrics line, the distributed optimizer
// and validation loader of the world, the epochs from the committed state,
// and the summary. The set-up builds one ElasticLoop for the process; each
// world calls train_world. Internal to train/.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <memory>

#include "core/log.h"
#include "data/loader.h"
#include "elastic/elastic.h"
#include "hpctrain/hpctrain.h"
#include "metrics/rank_metrics.h"
#include "train/elastic_shards.h"
#include "train/models.h"
#include "train/train_setup.h"
#include "train/trainer.h"

namespace hpct::train {

struct ElasticLoop {
  // Built by the set-up, for every world.
  const TrainOptions& o;
  const Logger& base_log;
  Logger& log;  // base_log with the rank of the current world
  Model& model;
  torch::optim::Optimizer& optimizer;
  const data::LoaderOptions& lo;  // the training loader's; the validation loader starts from it
  data::Loader& loader;
  elastic::State& state;
  metrics::RankMetrics* prometheus;  // null without a metrics port
  double epoch_samples;              // the epoch's length in samples, for the schedule
  Clock::time_point wall_start;

  ElasticLoop(const TrainOptions& o, const Logger& base_log, Logger& log, Model& model,
              torch::optim::Optimizer& optimizer, const data::LoaderOptions& lo, data::Loader& loader,
              elastic::State& state, metrics::RankMetrics* prometheus, double epoch_samples,
              Clock::time_point wall_start)
      : o(o), base_log(base_log), log(log), model(model), optimizer(optimizer), lo(lo), loader(loader),
        state(state), prometheus(prometheus), epoch_samples(epoch_samples), wall_start(wall_start) {}

  // Across worlds.
  int worlds = 0;
  nlohmann::json changes = nlohmann::json::array();
  nlohmann::json summary;
  double val_loss = NAN, val_acc = NAN, last_loss = NAN;
  double train_seconds = 0;
  std::int64_t trained_samples = 0;
  ElasticShards shards{o, base_log};  // --shard 1|2: the optimizer state's ranges and replicas

  // One world: train from the committed state to the end (or --max-steps),
  // then write the summary. Throws what the world's collectives throw.
  void train_world(Context& ctx);

 private:
  // One epoch of the world; returns whether the run stops (--max-steps).
  bool run_epoch(Context& ctx, DistributedOptimizer& opt, data::Loader* val, MetricsFile& metrics);
  // The "elastic" metrics line of the change that started this world.
  void record_change(Context& ctx, MetricsFile& metrics);
  void write_summary(Context& ctx, data::Loader* val, MetricsFile& metrics);
  // state.commit(), or with --shard the sharded commit (elastic_shards.h).
  void commit(Context& ctx, DistributedOptimizer& opt);
};

}  // namespace hpct::train
