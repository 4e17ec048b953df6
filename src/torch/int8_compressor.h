// int8: each gradient cut into chunks of LossySpec::int8_chunk elements,
// each chunk quantised to 8-bit integers against its own scale, with error
// feedback (docs/compression.md).
//
// Why the scale is shared and the levels are 127 / world size: a sum of
// int8 values over ranks overflows int8, and widening before the sum
// (int16, int32) would spend the bytes int8 was meant to save. So per step:
//   X = G + E (this rank's residual)
//   s = per-chunk max |X|, allreduced with max (one float per chunk)
//   L = floor(127 / ranks);  q = round(X L / s), in [-L, L]
//   allreduce q as int8 with sum: |sum| <= ranks L <= 127, never overflows,
//   and an integer sum is exact, so every rank gets the same bits
//   G = sum q * s / L (/ ranks to average);  E = X - q s / L
// Fewer levels as ranks grow: 63 at 2 ranks, 31 at 4, 15 at 8; the error
// feedback carries what the coarser grid drops into the next step. An
// allgather of int8 would keep 127 levels but move ranks - 1 times the
// bytes to every rank; this keeps ring allreduce's constant bytes per rank.
// At more than 127 ranks there is no level left: InvalidArgument.
//
// Which tensors: float32 of at least one chunk (smaller ones go plain).
// Vectorised: libtorch's element-wise kernels.
#pragma once

#include "torch/gradient_compressor.h"

namespace hpct {

class Int8Compressor final : public GradientCompressor {
 public:
  static constexpr int kMaxRanks = 127;
  explicit Int8Compressor(LossySpec spec) : GradientCompressor(std::move(spec)) {}

  bool compresses(const torch::Tensor& grad, int world_size) const override;
  // Quantisation levels on each side of zero at this world size.
  static int levels(int world_size) { return kMaxRanks / world_size; }

 protected:
  void reduce_compressed(engine::Engine& engine, std::vector<GradSlot*>& slots, bool average) override;
};

}  // namespace hpct
