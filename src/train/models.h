// Built-in models: the ones the benchmarks and the peer comparison use, and
// that `hpctrain train` offers. Plain libtorch modules.
//
//   mlp       784-4096-4096-10, ReLU (20.0M parameters; gradient-heavy)
//   cnn       conv3x3(32)-pool-conv3x3(64)-pool-fc128-fc10, ReLU
//             (421.6k parameters; compute-bound), 1x28x28 input
//   resnet20  He et al.'s CIFAR ResNet-20 (0.27M parameters, 65 parameter
//             tensors, batch norm, 1x1 projection shortcuts)
//
// Every model maps a batch [N, C, H, W] (or [N, 784] for the MLP, which also
// flattens images) to logits [N, 10]. Construction uses the global libtorch
// RNG: seed it (torch::manual_seed) for identical initial weights.
#pragma once

#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/types.h>

namespace hpct::train {

// A model behind one forward(); holder of the module tree.
class Model : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;
};

// "mlp", "cnn", "resnet20"; in_channels only matters for resnet20 (3 for
// CIFAR, 1 for Fashion-MNIST). InvalidArgument for other names.
std::shared_ptr<Model> make_model(const std::string& name, int in_channels = 1);

// The names make_model accepts.
std::vector<std::string> model_names();

// Parameters in the model (for reports).
std::int64_t parameter_count(const torch::nn::Module& m);

}  // namespace hpct::train
