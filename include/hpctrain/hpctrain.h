// hpctrain's public C++ API: data-parallel training for your own libtorch
// program. Start the program with `hpctrain launch -np N` (or mpirun, or
// srun) and add about five lines:
//
//   auto ctx = hpct::init();                                  // join the job
//   hpct::broadcast_parameters(*ctx, *model);                 // same start everywhere
//   hpct::DistributedOptimizer opt(*ctx, sgd, model->named_parameters());
//   hpct::DistributedSampler sampler(dataset_size, *ctx);     // this rank's shard
//   ... loss.backward(); opt.step(); ...                      // gradients averaged
//
// Gradients are averaged over ranks by the engine's background thread while
// backward still runs (one allreduce per fused group of gradients). See
// docs/engine.md for the protocol, the tunables (HPCT_*) and measurements.
//
// Threads: a Context and the objects made from it may be used from one
// training thread; autograd may call the optimizer's hooks from its own
// threads (that is handled). Errors are hpct::Error (core/error.h codes):
// ranks that disagree on a tensor get Mismatch naming it, its ranks and
// shapes, on every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <torch/data/samplers/base.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/ordered_dict.h>

#include "hpctrain/shard_layout.h"

namespace hpct {

namespace engine {
class Engine;
}
struct Config;

// One rank's membership in the job: its rank, the job's size, and the
// engine (with its communicator) that moves its tensors. Destroying it shuts
// the engine down on every rank (pending operations fail, nothing hangs) and
// then closes the communicator.
class Context {
 public:
  struct Impl;
  explicit Context(std::unique_ptr<Impl> impl);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int rank() const;
  int size() const;
  int local_rank() const;   // index of this rank on its host
  int local_size() const;
  engine::Engine& engine();
  const Config& config() const;

 private:
  std::unique_ptr<Impl> impl_;
};

// Joins the job this process belongs to (launcher, backend, store and
// tunables from HPCT_* and the launcher's variables; a single rank when no
// launcher started it). Blocks until every rank has joined or HPCT_TIMEOUT_S
// runs out.
std::unique_ptr<Context> init();
std::unique_ptr<Context> init(const Config& config);

struct DistributedOptions {
  // backward() calls per step(): gradients accumulate locally (summed, as
  // in plain libtorch) and are communicated on the last one.
  int backward_passes_per_step = 1;
  bool average = true;  // false: sum over ranks
  // The engine's wire type: none, fp16, bf16 or auto; or a lossy mode with
  // error feedback (docs/compression.md): powersgd[:RANK] (rank-RANK
  // approximation of each gradient matrix, default 4) or int8 (8-bit
  // integers, a scale per chunk). Empty: HPCT_COMPRESSION.
  std::string compression;
  // Lossy modes: steps of plain allreduce before compressing (-1:
  // HPCT_COMPRESSION_START_STEP), and the least factor a tensor's bytes must
  // shrink by to be compressed (0: HPCT_COMPRESSION_MIN_RATE).
  std::int64_t compression_start_step = -1;
  double compression_min_rate = 0;
  // compression auto may pick a lossy mode (by the link's measured rate and
  // the gradients' shapes). Unset: HPCT_ALLOW_LOSSY.
  std::optional<bool> allow_lossy;
  // true: start each gradient's allreduce from an autograd hook as soon as
  // it is ready (overlap with backward); false: all of them in step().
  // Unset: HPCT_OVERLAP (on, off, or auto: off when this host's ranks
  // times their intra-op threads fill every core the process may run on,
  // where there is no idle core for the allreduce to overlap on; on
  // otherwise).
  std::optional<bool> overlap;
  // How gradients meet (docs/ps.md): allreduce; ps (parameter servers sum
  // them, lockstep, the same result as allreduce within rounding); ps-async
  // (the servers hold the parameters and apply each worker's update; a worker
  // runs at most `staleness` steps ahead of the slowest). ps modes need
  // `hpctrain launch --servers K`. Empty: HPCT_SYNC.
  std::string sync;
  int staleness = -1;  // ps-async; -1: HPCT_PS_STALENESS
  // Sharded data parallelism (docs/sharding.md; ZeRO's stages). 0: off,
  // every rank keeps everything. 1: each rank keeps the optimizer state of
  // its part of the parameters only (ShardLayout), updates that part, and
  // the ranks all-gather the updated parameters. 2: as 1, and after the
  // gradients are reduced each rank keeps only its part of them (the full
  // gradients are freed). 3: as 2, and each rank holds only its part of the
  // parameters; a layer's are gathered for its forward and backward
  // (the next one prefetched when it fits, see below) and freed after: the model must call each
  // top-level layer through DistributedOptimizer::run_layer(). Stages 1 and
  // 2 give the parameters of unsharded training bit for bit, stage 3 within
  // float rounding (docs/sharding.md states the bound). Needs sync
  // allreduce, float32 parameters on the CPU, an elementwise optimizer (SGD,
  // Adam, AdamW, RMSprop, Adagrad) without state yet, and no lossy
  // compression (fp16/bf16 wire types work).
  int shard = 0;
  // shard 3: start gathering the next layer while this one computes, when
  // the two together take no more than the largest layer's bytes (live
  // parameters: this rank's part plus the largest layer either way); false:
  // one layer at a time, each gather waited for in full.
  bool shard_prefetch = true;
};

// Bytes one rank holds for training, by kind (DistributedOptimizer::memory_bytes()).
struct MemoryBytes {
  std::int64_t parameters = 0;       // the model's trainable parameters as this rank holds them
  std::int64_t gradients = 0;        // their gradients (full, or this rank's part at stage 2)
  std::int64_t optimizer_state = 0;  // the optimizer's state tensors (exp_avg, momentum, ...)
  // The most parameter bytes held at once so far: at shard 3 this rank's
  // part plus the layers gathered at the time; otherwise `parameters`.
  std::int64_t parameters_peak = 0;
};

// Wraps any torch::optim::Optimizer (which keeps doing the update): step()
// first waits until every parameter's gradient has been averaged over ranks.
//
// A parameter that got no gradient on this rank in a step (unused branch)
// contributes zeros, and its gradient becomes the average of the ranks that
// had one (every rank then holds the same gradient, and no rank waits for a
// tensor another rank never sends). Parameters with requires_grad false are
// ignored. After the first step the gradients of float32 parameters are
// moved into one flat buffer in the order backward produced them, so the
// engine sends fused groups in place, without copies.
class DistributedOptimizer {
 public:
  DistributedOptimizer(Context& ctx, torch::optim::Optimizer& optimizer,
                       const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
                       DistributedOptions options = {});
  ~DistributedOptimizer();  // removes the hooks
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // Waits for every gradient (submitting those not submitted yet); after it
  // returns the gradients are averaged and may be read or clipped.
  void synchronize();
  // synchronize() (unless already done since the last backward), then the
  // wrapped optimizer's step().
  void step();
  void zero_grad();
  torch::optim::Optimizer& optimizer();
  // Whether gradients are allreduced during backward (DistributedOptions::overlap resolved).
  bool overlaps() const;
  // allreduce, ps or ps-async (DistributedOptions::sync resolved).
  const std::string& sync_mode() const;
  // The lossy mode in use ("powersgd:4", "int8"), or "" when gradients go
  // through the engine's own wire types.
  std::string lossy_compression() const;
  // Why compression auto picked what it picked ("" before it decided, and
  // for any other mode).
  std::string compression_reason() const;
  // A lossy mode's state (step counter, residuals, powersgd's Q) as bytes
  // of a libtorch archive; "" without a lossy mode. Residuals are this
  // rank's own: a checkpoint keeps every rank's.
  std::string compression_state() const;
  // Restores what compression_state() returned (on the same rank of a job
  // of the same size): the next steps compute the bits an uninterrupted run
  // would. InvalidArgument when the bytes are another mode's.
  void restore_compression_state(const std::string& bytes);
  // Call when this rank has no more batches in an epoch. ps modes: waits
  // until every worker has finished the epoch (so ranks with fewer batches
  // than others finish instead of hanging); ps-async: the parameters become
  // the servers' at that moment, the same on every rank (what a checkpoint
  // saves). allreduce: does nothing (ranks must step equally often).
  void end_epoch();

  // DistributedOptions::shard (0: not sharded).
  int shard_stage() const;
  // Which parameter elements each rank owns (sharded; at shard 0 the layout
  // of a one-rank world: everything on this rank).
  const ShardLayout& shard_layout() const;
  // The optimizer that updates this rank's part when sharded (its parameters
  // are this rank's pieces, ShardLayout::owned_pieces(rank), as flat
  // tensors; it holds the state); optimizer() otherwise. The options of
  // optimizer()'s param groups (a learning-rate schedule) are copied to it
  // before each step.
  torch::optim::Optimizer& updating_optimizer();
  // What this rank holds now: parameters, gradients, optimizer state (the
  // sum of the state tensors' bytes; SGD, Adam, AdamW, RMSprop and Adagrad
  // state is counted, other optimizers' state reads 0).
  MemoryBytes memory_bytes() const;
  // forward(x) for the model's top-level layer `layer` (a child module's
  // name, as in named_parameters(): "fc1"). At shard 3 the layer's full
  // parameters exist only inside forward (and again in its backward):
  // every top-level layer with parameters must be called this way, or
  // synchronize() raises InvalidArgument naming it. Otherwise: forward(x).
  // A collective at shard 3 (every rank calls the same layers in order).
  torch::Tensor run_layer(const std::string& layer, const torch::Tensor& x,
                          const std::function<torch::Tensor(const torch::Tensor&)>& forward);
  // f() while the module's parameters hold their full values (at shard 3
  // every layer is gathered for it and released after: a collective, and
  // the parameters' full size in memory meanwhile); otherwise f().
  void with_full_parameters(const std::function<void()>& f);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// Copies root's parameters and buffers to every rank (same module structure
// on every rank). Blocks until done.
void broadcast_parameters(Context& ctx, torch::nn::Module& module, int root = 0);

// Copies root's optimizer state (momentum buffers, step counts, param group
// options) to every rank, through the optimizer's own serialization. Blocks.
void broadcast_optimizer_state(Context& ctx, torch::optim::Optimizer& optimizer, int root = 0);

// A metric averaged (or summed) over ranks; every rank must call it with the
// same name. Blocks.
double allreduce(Context& ctx, const std::string& name, double value, bool average = true);
torch::Tensor allreduce(Context& ctx, const std::string& name, const torch::Tensor& value,
                        bool average = true);

// PyTorch's DistributedSampler: rank r of n takes every n-th index of a
// permutation that depends only on seed + epoch (the same on every rank),
// padded by repeating its beginning so every rank gets the same count
// (drop_last false), or truncated (drop_last true). Call set_epoch() before
// each epoch to reshuffle. The permutation is libtorch's randperm with a CPU
// generator seeded with seed + epoch, as in PyTorch.
class DistributedSampler : public torch::data::samplers::Sampler<> {
 public:
  DistributedSampler(std::size_t dataset_size, int num_replicas, int rank, bool shuffle = true,
                     std::uint64_t seed = 0, bool drop_last = false);
  DistributedSampler(std::size_t dataset_size, const Context& ctx, bool shuffle = true,
                     std::uint64_t seed = 0, bool drop_last = false);

  void set_epoch(std::uint64_t epoch);
  // This rank's indices for the current epoch.
  const std::vector<std::size_t>& indices() const { return indices_; }
  std::size_t num_samples() const { return num_samples_; }

  // torch::data sampler interface.
  void reset(c10::optional<std::size_t> new_size = c10::nullopt) override;
  c10::optional<std::vector<std::size_t>> next(std::size_t batch_size) override;
  void save(torch::serialize::OutputArchive& archive) const override;
  void load(torch::serialize::InputArchive& archive) override;

 private:
  void build();

  std::size_t dataset_size_;
  int num_replicas_;
  int rank_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  std::uint64_t epoch_ = 0;
  std::size_t num_samples_ = 0;
  std::vector<std::size_t> indices_;
  std::size_t position_ = 0;
};

}  // namespace hpct
