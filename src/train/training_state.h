// The checkpointing phase of the training loop (trainer.cc): what a
// checkpoint's payload holds (model, optimizer, step, epoch, and every
// rank's RNG, Loader and compression state), writing it through
// checkpoint.h's files, choosing and loading one on resume, and the final
// model file. Internal to train/.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/log.h"
#include "data/loader.h"
#include "hpctrain/hpctrain.h"
#include "train/models.h"
#include "train/trainer.h"

namespace hpct::train {

torch::Tensor bytes_tensor(const std::string& s);
std::string tensor_bytes(const torch::Tensor& t);

// Every rank's bytes on every rank, through the engine's allgather (byte
// rows; each rank sends its length first, so an empty string is one row).
std::vector<std::string> gather_bytes(Context& ctx, const std::string& name, const std::string& mine);

// libtorch's default CPU generator, as bytes.
std::string rng_state();
void set_rng_state(const std::string& bytes);

// The final model, written by rank 0, or by every rank when the path holds
// "{rank}" (replaced by the rank): TorchScript for a scripted model, a
// libtorch archive of parameters and buffers for a built-in one.
void save_final_model(Context& ctx, Model& model, std::string path, const Logger& log);

// One rank's part of a checkpoint, as restored.
struct Payload {
  std::int64_t step = 0;
  std::int64_t epoch = 0;
  bool epoch_done = false;
  std::string rng;     // this rank's
  std::string loader;  // this rank's
  std::string compression;  // this rank's lossy compression state (residuals, Q); "" without one
};

// The payload of a checkpoint of a job of world_size ranks (one entry per
// rank in rngs, loaders and compressions).
std::string make_payload(int world_size, Model& model, torch::optim::Optimizer& opt, std::int64_t step,
                         std::int64_t epoch, bool epoch_done, const std::vector<std::string>& rngs,
                         const std::vector<std::string>& loaders, const std::vector<std::string>& compressions);

// Loads the payload into the model and the optimizer; returns this rank's
// part. `where` names the file in errors.
Payload restore_payload(Context& ctx, const std::string& bytes, const std::string& where, Model& model,
                        torch::optim::Optimizer& opt);

// Where a run starts: from scratch (resumed_from -1), or from a checkpoint.
struct ResumePoint {
  std::int64_t step = 0;
  std::int64_t first_epoch = 0;
  std::int64_t resumed_from = -1;
  std::string loader_state;       // the Loader's position in first_epoch; "" at its start
  std::string compression_state;  // this rank's; "" without one
  std::uint64_t consumed = 0;     // --data-split global: samples of first_epoch the job consumed
};

// --resume: rank 0 chooses the checkpoint (auto: the newest whole one in
// --checkpoint-dir), every rank loads it into the model, the optimizer and
// libtorch's RNG (a collective).
ResumePoint resume_point(Context& ctx, const TrainOptions& o, const Logger& log, Model& model,
                         torch::optim::Optimizer& optimizer);

// A checkpoint at `step` into --checkpoint-dir (nothing without one): buffers
// averaged, every rank's states gathered, rank 0 writes (a collective).
// Sharded (--shard): every rank writes its shard (sharded_checkpoint_train.h);
// consumed: the samples of `epoch` the job consumed.
void save_checkpoint(Context& ctx, const TrainOptions& o, const Logger& log, Model& model,
                     torch::optim::Optimizer& optimizer, data::Loader& loader, DistributedOptimizer& opt,
                     std::int64_t step, std::int64_t epoch, bool epoch_done, std::uint64_t consumed = 0);

}  // namespace hpct::train
