// PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019): a rank-r
// approximation of each gradient matrix, found by one step of power
// iteration per training step, with error feedback and warm start.
//
// Per step, for a gradient reshaped to an n x m matrix M (its first
// dimension by the rest), this rank's residual E and the kept Q (m x r):
//   M = G + E
//   P = M Q;  allreduce P (sum);  orthogonalise P's columns (Gram-Schmidt)
//   Q = M^T P;  allreduce Q (average)
//   G = P Q^T (the same bits on every rank);  E = M - P Q^T
// The wire carries r (n + m) floats instead of n m. Q carries over to the
// next step (warm start): the gradient changes slowly, so repeated single
// power steps converge toward its top-r subspace, and the approximation's
// error toward the best rank-r error (the SVD's).
//
// Which tensors: float32 of two or more dimensions whose compression rate
// n m / (r (n + m)) reaches LossySpec::min_rate; the rest (biases, small
// layers) go plain. Q starts as standard normal values drawn from a
// generator seeded with spec.seed and the parameter's name, so every rank
// starts from the same Q without communicating.
//
// Orthogonalisation is modified Gram-Schmidt in libtorch ops on P, which is
// identical on every rank (an allreduce result): identical input, the same
// code, the same bits. (Ranks on CPUs that pick different kernels could in
// principle round differently; all ranks here run one binary on one kind of
// CPU, and the end-of-run parameter checksum would show it.)
#pragma once

#include "torch/gradient_compressor.h"

namespace hpct {

class PowerSgd final : public GradientCompressor {
 public:
  explicit PowerSgd(LossySpec spec) : GradientCompressor(std::move(spec)) {}

  bool compresses(const torch::Tensor& grad, int world_size) const override;
  // Orthonormalises p's columns in place (modified Gram-Schmidt; a zero
  // column stays zero). p: n x r float32, contiguous.
  static void orthogonalise(torch::Tensor& p);

 protected:
  void reduce_compressed(engine::Engine& engine, std::vector<GradSlot*>& slots, bool average) override;

 private:
  torch::Tensor& q_for(const GradSlot& g, std::int64_t m);
};

}  // namespace hpct
