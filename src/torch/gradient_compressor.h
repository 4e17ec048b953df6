// Lossy gradient compression with error feedback (docs/compression.md):
// what DistributedOptimizer runs in synchronize() when the compression is
// powersgd[:RANK] (powersgd.h) or int8 (int8_compressor.h).
//
// Both run on top of the engine's named allreduces, so negotiation, fusion
// and the response cache work as for plain gradients: every rank submits the
// same names with the same shapes in the same order, and each step is a
// fixed number of engine rounds (two for either mode).
//
// Common to both (this base class):
// - a start step: before it every gradient is plain-allreduced (exactly
//   DistributedOptimizer's result without compression); from it on, the
//   tensors worth compressing are compressed and the rest go plain, batched
//   into the engine's first round;
// - a minimum compression rate: a tensor whose bytes would shrink by less
//   goes plain (and so does a 1-D tensor under powersgd);
// - error feedback: each compressed tensor keeps this rank's residual (what
//   it meant to send minus what the ranks agreed on) and adds it to the
//   next step's gradient, so nothing is lost, only delayed;
// - the state (step counter, residuals, powersgd's Q) is saved and loaded
//   with a libtorch archive, so a checkpoint resumes bit-exactly.
//
// Bit-identical ranks: every compressed result is computed only from
// allreduce results (identical on every rank) by the same code, so every
// rank gets the same bits; only the residuals differ from rank to rank.
//
// Not thread-safe: DistributedOptimizer calls it from the training thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace hpct {

struct LossySpec {
  enum class Kind { kPowerSgd, kInt8 };
  Kind kind = Kind::kPowerSgd;
  int rank = 4;                     // powersgd: the approximation's rank
  std::int64_t start_step = 50;     // steps of plain allreduce first
  double min_rate = 2.0;            // least bytes-before / bytes-after worth compressing
  std::int64_t int8_chunk = 256;    // int8: elements sharing one scale
  std::uint64_t seed = 0x5eed;      // powersgd: Q's first values (the same on every rank)
  bool error_feedback = true;       // false: residuals dropped (tests of the approximation alone)

  std::string name() const;  // "powersgd:4", "int8"
};

// nullopt for an engine mode (none, fp16, bf16, auto); the spec for
// powersgd[:RANK] or int8 (start_step and min_rate left at their defaults);
// InvalidArgument naming the text for a bad rank.
std::optional<LossySpec> parse_lossy(const std::string& text);

// One gradient to reduce: a contiguous float tensor, reduced in place.
struct GradSlot {
  std::string name;  // the parameter's (engine names derive from it)
  torch::Tensor grad;
};

class GradientCompressor {
 public:
  explicit GradientCompressor(LossySpec spec) : spec_(std::move(spec)) {}
  virtual ~GradientCompressor() = default;
  GradientCompressor(const GradientCompressor&) = delete;
  GradientCompressor& operator=(const GradientCompressor&) = delete;

  // Collective: every rank calls it once per step with the same names,
  // shapes and dtypes in the same order. Blocks until every grad holds the
  // average over ranks (the sum when !average). Errors of the engine's
  // allreduces propagate (every rank gets them).
  void reduce(engine::Engine& engine, std::vector<GradSlot>& grads, bool average);

  // Steps reduced so far (compressed from start_step on).
  std::int64_t step() const { return step_; }
  // Steps already taken plain (compression auto decides after a few).
  void set_step(std::int64_t step) { step_ = step; }
  const LossySpec& spec() const { return spec_; }
  // Whether the tensor goes compressed once the start step is reached.
  virtual bool compresses(const torch::Tensor& grad, int world_size) const = 0;

  // The step counter and every buffer (residuals, the mode's own); without
  // the residuals when !residuals (what another rank may take: the step and
  // the buffers every rank holds alike, such as powersgd's Q).
  void save(torch::serialize::OutputArchive& ar, bool residuals = true) const;
  // Replaces the state with the archive's; InvalidArgument when it was
  // written by another mode.
  void load(torch::serialize::InputArchive& ar);
  // Forgets this rank's residuals (they restart from zero): for a state
  // another rank saved.
  void drop_residuals();
  // Buffers by key ("error/<param>", "q/<param>"), for tests.
  const std::map<std::string, torch::Tensor>& buffers() const { return buffers_; }

 protected:
  // Reduces the tensors chosen for compression; the rest are already
  // submitted plain (the engine fuses them with the first round). Called
  // under torch::NoGradGuard.
  virtual void reduce_compressed(engine::Engine& engine, std::vector<GradSlot*>& slots, bool average) = 0;
  // The residual of a compressed tensor: zeros like it at first.
  torch::Tensor& residual(const GradSlot& g);

  LossySpec spec_;
  std::int64_t step_ = 0;
  std::map<std::string, torch::Tensor> buffers_;
};

// The mode name ("powersgd:4") an archive written by save() holds.
std::string saved_compression_mode(torch::serialize::InputArchive& ar);

// The compressor for a spec (powersgd.h or int8_compressor.h).
std::unique_ptr<GradientCompressor> make_gradient_compressor(const LossySpec& spec);

// Submits grad's allreduce to the engine under `name` (kAvg or kSum).
engine::Handle submit_allreduce(engine::Engine& engine, const std::string& name, const torch::Tensor& t,
                                comm::ReduceOp op, std::optional<engine::Compression> wire = std::nullopt);
// Waits for every handle, then rethrows the first error (so none is left
// writing into a tensor that the caller frees).
void wait_all(std::vector<engine::Handle>& handles);

}  // namespace hpct
