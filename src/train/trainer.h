// The training loop of `hpctrain train`: a built-in model (models.h) or a
// TorchScript one (scripted_model.h), behind the same Model interface, on
// WebDataset shards read by hpct::data::Loader, data-parallel through
// DistributedOptimizer, with validation, learning-rate schedule,
// checkpoints (checkpoint.h), metrics and a summary. Every rank calls
// run_training with the same options.
//
// Learning rate (Goyal et al., "Accurate, Large Minibatch SGD"):
//   scaled = lr * global_batch / lr_reference_batch   (lr_scaling "linear")
//   warmup: linear from scaled / world_size (one rank's batch alone) to
//   scaled over warmup_epochs, step by step (none on one rank)
//   then cosine from scaled to 0, or step decay (x0.1 at 1/2 and 3/4 of the
//   epochs), or constant.
//
// Batch norm: running statistics are buffers each rank updates from its own
// batches; they are averaged over ranks (float buffers; counters advance
// alike) before each validation, each checkpoint and at the end, so every
// rank evaluates and saves the same model. The same rule holds for every
// buffer of a TorchScript model. Parameters are never broadcast
// after the start: the final checksum shows they stayed identical.
//
// A checkpoint holds the model (parameters and buffers), the optimizer
// state, step, epoch, every rank's libtorch RNG state and every rank's
// Loader position; with the same seed and world size a resumed run computes
// the same parameters as an uninterrupted one.
//
// Metrics (JSON lines, rank 0, appended; every line has "time", Unix
// seconds): a "start" line per run (restart count, resumed step); one
// "step" line every log_every steps with loss, lr, samples/s and the mean
// time split per step (data wait, forward+backward, gradient sync wait,
// optimizer) of the slowest rank, who is named, and every rank's split in
// "ranks"; one "epoch" line with validation loss and accuracy; a "summary".
// `hpctrain report` draws them (docs/report.md).
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/log.h"
#include "hpctrain/hpctrain.h"

namespace hpct::train {

struct TrainOptions {
  std::string model = "cnn";
  std::vector<std::string> data;      // training shards (patterns, @list)
  std::vector<std::string> val;       // validation shards; empty: none
  int epochs = 1;
  std::int64_t batch = 64;            // per rank
  double lr = 0.1;
  std::string lr_scaling = "linear";  // linear or none
  std::int64_t lr_reference_batch = 256;
  double warmup_epochs = 0;
  std::string lr_schedule = "cosine";  // cosine, step or constant
  std::string optimizer = "sgd";       // sgd or adam
  double momentum = 0.9;
  double weight_decay = 0;
  std::string compression;            // none, fp16, bf16, auto, powersgd[:RANK], int8; empty: HPCT_COMPRESSION
  std::int64_t compression_start_step = -1;  // lossy modes: plain steps first; -1: HPCT_COMPRESSION_START_STEP
  bool allow_lossy = false;           // auto may pick a lossy mode (or HPCT_ALLOW_LOSSY)
  // Sharded data parallelism (docs/sharding.md): 0 off; 1 optimizer state,
  // 2 and gradients, 3 and parameters split over the ranks. CPU, built-in
  // models at 3, no parameter servers, lossy compression or elastic yet
  // (each refused by name). Checkpoints are sharded
  // (sharded_checkpoint_train.h) and resume at any world size.
  int shard = 0;
  // How the epoch's samples are split: "rank" (each rank a contiguous
  // slice, with a shuffle buffer; sampler.h) or "global" (global step j
  // takes the j-th global batch of the epoch's sequence, rank r its r-th
  // part, as elastic jobs do: the same samples per step at any world size
  // with the same global batch, so a sharded checkpoint resumes mid-epoch
  // at another world size).
  std::string data_split = "rank";
  bool shard_prefetch = true;  // --shard 3: gather the next layer during this one
  // cpu, cuda or cuda:N (train/device.h; docs/gpu.md). On a GPU the loader
  // hands out pinned batches copied ahead to the device, and the engine
  // averages the gradients on it (NCCL, or staged: gpu_engine_setup).
  std::string device = "cpu";
  std::string amp;                    // "" (float32), bf16 or fp16 (autocast; fp16 with loss scaling)
  int threads = 1;                    // intra-op threads
  int data_threads = 1;               // decode threads per rank
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;  // steps; 0: only at the end of each epoch
  std::string resume;                 // "", "auto" or a checkpoint path
  std::string metrics;                // JSON-lines file (rank 0)
  std::string save_model;             // final model file (rank 0; "{rank}" in it: every rank)
  std::uint64_t seed = 0;
  std::int64_t max_steps = 0;         // stop after this many steps in total (0: no limit)
  int log_every = 50;                 // steps between metrics lines
  bool progress = false;              // progress bar on rank 0's stdout
  // Set from outside (a signal handler: Slurm's warning signal before a time
  // limit or preemption, or the SIGTERM of `scontrol requeue`) to ask for a
  // checkpoint and a stop at the next step boundary. Null: never asked. While
  // non-null, every step adds one 1-number allreduce so the ranks agree on
  // the step they stop at (a signal reaches them at different times); the
  // summary then says "stopped_by_signal": true. Needs checkpoint_dir.
  const std::atomic<bool>* stop_requested = nullptr;
  std::string sync;                   // allreduce, ps, ps-async; empty: HPCT_SYNC (docs/ps.md)
  int staleness = -1;                 // ps-async bound; -1: HPCT_PS_STALENESS
  // Elastic (run_elastic_training): commit every this many steps (and at
  // each epoch's end); a failure loses at most the steps since the last.
  std::int64_t elastic_commit_every = 10;
  // Tests: the worker with HPCT_ELASTIC_ID fault_worker ends itself at
  // step fault_step of its first world, by SIGKILL ("kill") or by an
  // uncaught exception ("exit"). fault_worker -1: never.
  std::int64_t fault_worker = -1;
  std::int64_t fault_step = 0;
  std::string fault_kind = "kill";
};

// Blocks for the whole run. Returns the summary (on every rank): final
// validation loss and accuracy, samples/s, wall time, steps, the parameter
// checksum and whether it was identical on every rank.
nlohmann::json run_training(Context& ctx, const TrainOptions& o, const Logger& log);

// `hpctrain train --elastic` under `hpctrain launch --min-np/--max-np`:
// the same model, data and schedule as run_training, inside
// hpct::elastic::run (elastic/elastic.h). Hosts may leave and join: a
// failure rolls back to the last commit, the data sampler splits the
// epoch's remaining samples over the new world (data/sampler.h,
// plan_epoch_elastic), and the learning rate follows the world's size.
// No checkpoint resume or parameter servers. Rank 0 of each world writes
// an "elastic" metrics line per change (sizes, rollback, time). Returns the
// summary; "removed": true when the launcher took this worker out.
nlohmann::json run_elastic_training(const TrainOptions& o, const Config& config, const Logger& log);

// The learning rate at a step (fraction of the run in epochs), as above.
double learning_rate(const TrainOptions& o, int world_size, double epoch_progress);

}  // namespace hpct::train
