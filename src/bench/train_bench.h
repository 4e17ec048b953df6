// `hpctrain bench train`: data-parallel training speed of a built-in model
// (train/models.h) with DistributedOptimizer, as samples per second over all
// ranks. One rank's part; the CLI starts the ranks.
//
// Data: Fashion-MNIST's training set read from Debian's idx files into
// memory (normalized to mean 0.2860, std 0.3530, like the peer script), split
// by DistributedSampler; or, with shards, streamed from WebDataset/TFRecord
// shards through hpct::data::Loader (decode threads, prefetch, the same
// normalization; `hpctrain data pack --from fashion-mnist` makes them); or,
// with synthetic, a fixed random pool of 1024 images (no disk); max_samples
// keeps the first N of Fashion-MNIST's. SGD lr 0.01 momentum 0.9 (or Adam lr
// 1e-3: optimizer), cross-entropy. The first
// `warmup` steps are not timed (they include the first, fully negotiated
// step and the flat-gradient layout). The time is the slowest rank's; the
// step log (below) gives each step's parts, from which `bench train` works
// out its time split.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "hpctrain/hpctrain.h"

namespace hpct::bench {

struct TrainBenchOptions {
  std::string model = "mlp";
  int steps = 300;
  int batch = 64;      // per rank
  int threads = 1;     // intra-op threads per rank
  bool synthetic = false;
  int warmup = 10;
  std::optional<bool> overlap;  // unset: HPCT_OVERLAP (DistributedOptions::overlap)
  std::string data_dir;  // empty: Debian's fashion-mnist directory
  std::vector<std::string> shards;  // non-empty: read these through the Loader
  int data_threads = 1;             // the Loader's decode threads per rank
  // false: every rank trains alone (its own optimizer, no gradient
  // allreduce), everything else the same: how fast N ranks can be on this
  // host at all, with the cores, caches and memory bandwidth they share.
  bool sync = true;
  // With sync false: the ranks still meet once a step, where the gradient
  // allreduce would be, through a one-number allreduce. Everything a
  // synchronous job pays except moving gradients: the ranks run in lockstep
  // and each step waits for the slowest.
  bool lockstep = false;
  // Non-empty: a PaceParent's page (bench/pacer.h); every timed step waits
  // its turn there, and pace_bound is the longest one wait may take.
  std::string pace_file;
  double pace_bound_s = 3600;
  // Non-empty: each rank writes one line per timed step to step_log + "." +
  // rank: step, start and end (steady clock, ns; the start is after any
  // pacing wait), then the data, compute, sync and optimizer parts (ns).
  std::string step_log;
  // Non-empty: DistributedOptions::compression (the engine parses it); empty:
  // HPCT_COMPRESSION.
  std::string compression;
  // > 0: train on the first max_samples Fashion-MNIST images only.
  int max_samples = 0;
  // After the last step: Fashion-MNIST's test set (10,000 images, split over
  // the ranks) through the trained model; the result gains test_accuracy and
  // test_loss.
  bool evaluate = false;
  // "sgd" (lr 0.01, momentum 0.9) or "adam" (lr 1e-3): Adam's two moments
  // are what sharding splits.
  std::string optimizer = "sgd";
  // DistributedOptions::shard and shard_prefetch (docs/sharding.md): at 3
  // the model's layers gather their parameters through the optimizer.
  int shard = 0;
  bool shard_prefetch = true;
};

// Blocks for the run; every rank calls it. Returns the result (the same on
// every rank).
nlohmann::json run_train_bench(Context& ctx, const TrainBenchOptions& o);

}  // namespace hpct::bench
