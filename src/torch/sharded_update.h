// Stages 1, 2 and 3 of sharded data parallelism (DistributedOptions::shard,
// docs/sharding.md): the part of DistributedOptimizer that updates only this
// rank's part of the parameters and all-gathers the rest (stage 3: keeps
// only this rank's part, parameter_gather.h gathers layers when used).
//
// Set-up (every rank alike; a collective):
//   1. The layout (hpctrain/shard_layout.h) over the trainable parameters;
//      the ranks compare its size by an all-gather (Mismatch when a rank
//      holds another model).
//   2. The parameters move into one flat float32 buffer in layout order
//      (each parameter's data becomes a view of it, set_data(), so the
//      module, autograd and the user's optimizer keep the same tensors).
//   3. An optimizer of the user's type and options is built over this
//      rank's pieces only (flat views into the buffer), one param group per
//      user group: its state (Adam's exp_avg, exp_avg_sq) exists for 1/n of
//      the elements. The user's optimizer is never stepped and holds none.
// Each step:
//   4. stage 1: the gradients were allreduced in full on every rank.
//      Stages 2 and 3: each gradient was reduce-scattered as backward
//      produced it (engine.h, reduce_scatter_async, in the engine's fused
//      buckets): rank p is sent only the elements of its range, so a rank
//      sends what it does not keep, half of what an allreduce sends, and
//      this rank's part arrives straight in grad_part_ (grad_split() and
//      grad_out() say where); DistributedOptimizer then frees every full
//      .grad (release_gradients()).
//   5. The pieces' .grad are views of that part (stage 1: of the full .grad);
//      the user's param-group options (a learning-rate schedule) are copied
//      over and the pieces' optimizer steps.
//   6. One all-gather of each rank's range, written straight into the flat
//      buffer: every rank then holds the updated parameters.
// An elementwise optimizer computes every element as it would on the whole
// tensor, and the gradients are the same sums as the allreduce's, so the
// parameters equal unsharded training's bit for bit. The reduce-scatter sums
// in rank order (comm/communicator.h), which is the allreduce's order on
// shared memory (any number of ranks), with 2 ranks on every path (a + b is
// b + a), and with 3 on the direct mesh (small buckets); where the
// allreduce sums in another order (Gloo's ring with 3 or more ranks, the
// direct mesh's recursive doubling with 4 or more, MPI_Allreduce, the
// hierarchical path) stage 2 differs from unsharded training by float
// rounding (docs/sharding.md).
// Stage 3: step 2 copies this rank's range out of the parameters (flat_
// holds that range only) and ParameterGather releases the parameters; step
// 6 is skipped (layers are gathered by the next forward).
//
// Threads: the training thread only (as DistributedOptimizer). Blocks in
// the constructor and step() (collectives through the engine).
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "hpctrain/hpctrain.h"
#include "torch/parameter_gather.h"

namespace hpct {

class ShardedUpdate {
 public:
  // params: (name, tensor) with requires_grad, in named_parameters() order.
  // InvalidArgument (naming the fix) for a stage other than 1, 2 or 3, a
  // parameter that is not float32 on the CPU, an optimizer that is not
  // elementwise (SGD, Adam, AdamW, RMSprop, Adagrad), or one that already
  // holds state.
  ShardedUpdate(Context& ctx, torch::optim::Optimizer& user,
                std::vector<std::pair<std::string, torch::Tensor>> params, int stage, bool prefetch = true);
  ShardedUpdate(const ShardedUpdate&) = delete;
  ShardedUpdate& operator=(const ShardedUpdate&) = delete;

  // Steps 4-6 above; every parameter's .grad holds the reduced gradient
  // (stage 1), or grad_part_ this rank's part of it (stages 2 and 3).
  void step();
  // Stages 2 and 3: parameter i's gradient split among the ranks (size + 1
  // offsets into the flattened gradient: rank p's part is [split[p],
  // split[p + 1])), and where this rank's part goes (null when it owns none).
  const std::vector<std::int64_t>& grad_split(std::size_t i) const { return splits_[i]; }
  float* grad_out(std::size_t i);
  // Stages 2 and 3, once every reduce-scatter is done: every full .grad is
  // freed (this rank keeps its part only).
  void release_gradients();
  // Stage 3's layer gathering (null at stages 1 and 2).
  ParameterGather* gather() { return gather_.get(); }

  int stage() const { return stage_; }
  const ShardLayout& layout() const { return layout_; }
  // The optimizer over this rank's pieces (the user's when this rank owns
  // no element: it then has nothing to update).
  torch::optim::Optimizer& optimizer() { return shard_opt_ ? *shard_opt_ : user_; }
  MemoryBytes memory_bytes() const;

 private:
  void flatten_parameters();
  void build_optimizer();
  void attach_gradients();
  void copy_options();
  void gather_parameters();

  Context& ctx_;
  torch::optim::Optimizer& user_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  int stage_;
  bool prefetch_;
  ShardLayout layout_;
  std::vector<ShardPiece> pieces_;
  torch::Tensor flat_;                   // every parameter, in layout order
  std::vector<torch::Tensor> piece_params_;  // views of flat_, this rank's pieces
  std::vector<std::size_t> group_of_piece_group_;  // shard group -> user group
  std::unique_ptr<torch::optim::Optimizer> shard_opt_;
  torch::Tensor grad_part_;              // stages 2 and 3: this rank's reduced gradient
  std::vector<std::vector<std::int64_t>> splits_;  // stages 2 and 3: per parameter
  std::unique_ptr<ParameterGather> gather_;  // stage 3
};

// The bytes of an optimizer's state tensors (SGD, Adam, AdamW, RMSprop,
// Adagrad; 0 for other optimizers' state).
std::int64_t optimizer_state_bytes(const torch::optim::Optimizer& opt);

}  // namespace hpct
