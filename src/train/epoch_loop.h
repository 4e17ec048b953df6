// The epoch loop of run_training (trainer.cc): steps (data, forward and
// backward, gradient sync, optimizer), the metrics line every log_every
// steps and at each epoch's end, the stop on a signal, validation and the
// checkpoints between epochs. The set-up builds one EpochLoop; the summary
// reads what the loop advanced. Internal to train/.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "core/log.h"
#include "data/loader.h"
#include "data/source/remote_fs.h"
#include "hpctrain/hpctrain.h"
#include "metrics/rank_metrics.h"
#include "train/device.h"
#include "train/models.h"
#include "train/train_setup.h"
#include "train/trainer.h"

namespace hpct::train {

struct EpochLoop {
  // Built by the set-up, unchanged by the loop.
  Context& ctx;
  const TrainOptions& o;
  const Logger& log;
  Model& model;
  torch::optim::Optimizer& optimizer;
  DistributedOptimizer& opt;
  data::Loader& loader;
  data::Loader* val;  // null without --val
  data::ShardFileSystem& shard_fs;
  MetricsFile& metrics;
  metrics::RankMetrics* prometheus;  // null without a metrics port
  std::int64_t steps_per_epoch;
  std::int64_t global_batch;
  bool lead;

  EpochLoop(Context& ctx, const TrainOptions& o, const Logger& log, Model& model,
            torch::optim::Optimizer& optimizer, DistributedOptimizer& opt, data::Loader& loader,
            data::Loader* val, data::ShardFileSystem& shard_fs, MetricsFile& metrics,
            metrics::RankMetrics* prometheus, std::int64_t steps_per_epoch, std::int64_t global_batch,
            bool lead)
      : ctx(ctx), o(o), log(log), model(model), optimizer(optimizer), opt(opt), loader(loader), val(val),
        shard_fs(shard_fs), metrics(metrics), prometheus(prometheus), steps_per_epoch(steps_per_epoch),
        global_batch(global_batch), lead(lead) {}

  // Set by the set-up after construction when training on a GPU or with
  // --amp (the defaults: CPU, float32, gradients through `opt` alone).
  torch::Device device{torch::kCPU};
  c10::ScalarType amp = c10::kFloat;  // autocast dtype of the forward pass
  LossScaler scaler{false};           // fp16: dynamic loss scaling
  std::vector<torch::Tensor> params;  // the trainable parameters (the scaler unscales their gradients)

  // Advanced by the loop.
  std::int64_t step = 0;
  std::string loader_state;  // a resumed Loader position, applied at the first epoch
  std::uint64_t resume_consumed = 0;  // --data-split global: the resumed position in the first epoch
  std::uint64_t epoch_consumed = 0;   // samples of this epoch the job consumed
  double val_loss = NAN, val_acc = NAN, last_loss = NAN;
  std::int64_t trained_samples = 0;
  double train_seconds = 0;
  bool signalled = false;  // every rank agreed to stop on a signal
  torch::Tensor last_loss_t;  // the last step's loss, on the device; last_loss reads it

  // The epochs from first_epoch to the last, or to --max-steps or a signal;
  // a run resumed after its last step only validates.
  void run(std::int64_t first_epoch);

 private:
  // The time split of the steps since the last metrics line.
  struct Interval {
    double data = 0, compute = 0, sync = 0, optim = 0;
    // The losses' sum stays a tensor on the model's device until the
    // metrics line reads it: reading it every step would make a GPU wait.
    torch::Tensor loss;
    int steps = 0;
    Clock::time_point start = Clock::now();
  };

  void run_epoch(std::int64_t epoch, bool* stop);
  // The epoch's steps; returns the samples trained (all ranks).
  std::int64_t train_steps(std::int64_t epoch, Clock::time_point epoch_start, bool* stop);
  void print_progress(std::int64_t epoch, double lr, std::int64_t epoch_samples, Clock::time_point epoch_start) const;
  // Every rank's time split, to name the slowest (a collective: every rank
  // reaches it at the same step); rank 0 writes the "step" line.
  void report_interval(std::int64_t epoch, double lr, const Interval& interval);
  void report_epoch(std::int64_t epoch, double epoch_seconds, std::int64_t epoch_samples);
  void evaluate();
  void save(std::int64_t epoch, bool epoch_done);
};

}  // namespace hpct::train
