// Built-in models: the ones the benchmarks and the peer comparison use, and
// that `hpctrain train` offers. Plain libtorch modules.
//
//   mlp       784-4096-4096-10, ReLU (20.0M parameters; gradient-heavy)
//   cnn       conv3x3(32)-pool-conv3x3(64)-pool-fc128-fc10, ReLU
//             (421.6k parameters; compute-bound), 1x28x28 input
//   resnet20  He et al.'s CIFAR ResNet-20 (0.27M parameters, 65 parameter
//             tensors, batch norm, 1x1 projection shortcuts)
//   mlp200m   784-4096-(4096 x 12)-10, ReLU (204.6M parameters in 14
//             layers; the memory figures of docs/sharding.md)
//
// Every model maps a batch [N, C, H, W] (or [N, 784] for the MLP, which also
// flattens images) to logits [N, 10]. Construction uses the global libtorch
// RNG: seed it (torch::manual_seed) for identical initial weights.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

namespace hpct::train {

// A model behind one forward(); holder of the module tree.
//
// The built-in models call each top-level layer through layer(), which runs
// it directly unless a runner is set: `--shard 3` sets
// DistributedOptimizer::run_layer, which gathers the layer's parameters
// for it (libtorch has no module hooks to do that from outside).
class Model : public torch::nn::Module {
 public:
  using LayerForward = std::function<torch::Tensor(const torch::Tensor&)>;
  using LayerRunner = std::function<torch::Tensor(const std::string& layer, const torch::Tensor& x,
                                                  const LayerForward& forward)>;

  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // Whether forward() calls every top-level layer with parameters through
  // layer() (the built-in models; not TorchScript ones).
  virtual bool runs_layers() const { return false; }
  void set_layer_runner(LayerRunner runner) { runner_ = std::move(runner); }

 protected:
  torch::Tensor layer(const std::string& name, const torch::Tensor& x, const LayerForward& forward) {
    return runner_ ? runner_(name, x, forward) : forward(x);
  }

 private:
  LayerRunner runner_;
};

// "mlp", "cnn", "resnet20"; in_channels only matters for resnet20 (3 for
// CIFAR, 1 for Fashion-MNIST). InvalidArgument for other names.
std::shared_ptr<Model> make_model(const std::string& name, int in_channels = 1);

// The names make_model accepts.
std::vector<std::string> model_names();

// Parameters in the model (for reports).
std::int64_t parameter_count(const torch::nn::Module& m);

}  // namespace hpct::train
