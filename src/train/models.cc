#include "train/models.h"

#include <torch/nn/functional.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>

#include "core/error.h"

namespace hpct::train {
namespace {

namespace F = torch::nn::functional;
using torch::nn::BatchNorm2d;
using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;
using torch::nn::Linear;

class Mlp final : public Model {
 public:
  Mlp() {
    fc1_ = register_module("fc1", Linear(784, 4096));
    fc2_ = register_module("fc2", Linear(4096, 4096));
    fc3_ = register_module("fc3", Linear(4096, 10));
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = x.reshape({x.size(0), -1});
    x = torch::relu(layer("fc1", x, [this](const torch::Tensor& t) { return fc1_->forward(t); }));
    x = torch::relu(layer("fc2", x, [this](const torch::Tensor& t) { return fc2_->forward(t); }));
    return layer("fc3", x, [this](const torch::Tensor& t) { return fc3_->forward(t); });
  }
  bool runs_layers() const override { return true; }

 private:
  Linear fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};

// mlp200m: 784-4096, twelve 4096-4096, 4096-10 (204.6M parameters, 14
// layers of at most 16.8M): the model of docs/sharding.md's memory figures,
// whose Adam state alone (1.6 GB) is what sharding splits. mlp50m: the same
// with three hidden 4096-4096 layers (53.6M parameters, 5 layers): a model
// that fits a memory limit at --shard 3 and not unsharded within seconds
// (tests/launch_memory_test.cc).
class DeepMlp final : public Model {
 public:
  explicit DeepMlp(int hidden_layers) {
    int in = 784;
    for (int i = 0; i <= hidden_layers; ++i) {
      names_.push_back("fc" + std::to_string(i + 1));
      layers_.push_back(register_module(names_.back(), Linear(in, 4096)));
      in = 4096;
    }
    names_.push_back("fc" + std::to_string(hidden_layers + 2));
    layers_.push_back(register_module(names_.back(), Linear(in, 10)));
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = x.reshape({x.size(0), -1});
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      x = layer(names_[i], x, [this, i](const torch::Tensor& t) { return layers_[i]->forward(t); });
      if (i + 1 < layers_.size()) x = torch::relu(x);
    }
    return x;
  }
  bool runs_layers() const override { return true; }

 private:
  std::vector<std::string> names_;
  std::vector<Linear> layers_;
};

class SmallCnn final : public Model {
 public:
  SmallCnn() {
    conv1_ = register_module("conv1", Conv2d(Conv2dOptions(1, 32, 3).padding(1)));
    conv2_ = register_module("conv2", Conv2d(Conv2dOptions(32, 64, 3).padding(1)));
    fc1_ = register_module("fc1", Linear(64 * 7 * 7, 128));
    fc2_ = register_module("fc2", Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) override {
    const F::MaxPool2dFuncOptions pool(2);
    x = F::max_pool2d(torch::relu(layer("conv1", x, [this](const torch::Tensor& t) { return conv1_->forward(t); })),
                      pool);
    x = F::max_pool2d(torch::relu(layer("conv2", x, [this](const torch::Tensor& t) { return conv2_->forward(t); })),
                      pool);
    x = torch::relu(layer("fc1", x.flatten(1), [this](const torch::Tensor& t) { return fc1_->forward(t); }));
    return layer("fc2", x, [this](const torch::Tensor& t) { return fc2_->forward(t); });
  }
  bool runs_layers() const override { return true; }

 private:
  Conv2d conv1_{nullptr}, conv2_{nullptr};
  Linear fc1_{nullptr}, fc2_{nullptr};
};

class BasicBlock final : public torch::nn::Module {
 public:
  BasicBlock(int in, int out, int stride) {
    conv1_ = register_module("conv1", Conv2d(Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)));
    bn1_ = register_module("bn1", BatchNorm2d(out));
    conv2_ = register_module("conv2", Conv2d(Conv2dOptions(out, out, 3).padding(1).bias(false)));
    bn2_ = register_module("bn2", BatchNorm2d(out));
    if (stride != 1 || in != out) {
      shortcut_ = register_module(
          "shortcut", torch::nn::Sequential(Conv2d(Conv2dOptions(in, out, 1).stride(stride).bias(false)),
                                            BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    auto y = torch::relu(bn1_->forward(conv1_->forward(x)));
    y = bn2_->forward(conv2_->forward(y));
    return torch::relu(y + (shortcut_ ? shortcut_->forward(x) : x));
  }

 private:
  Conv2d conv1_{nullptr}, conv2_{nullptr};
  BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential shortcut_{nullptr};
};

class ResNet20 final : public Model {
 public:
  explicit ResNet20(int in_channels) {
    conv_ = register_module("conv", Conv2d(Conv2dOptions(in_channels, 16, 3).padding(1).bias(false)));
    bn_ = register_module("bn", BatchNorm2d(16));
    int in = 16;
    for (int stage = 0; stage < 3; ++stage) {
      int out = 16 << stage;
      for (int b = 0; b < 3; ++b) {
        int stride = (stage > 0 && b == 0) ? 2 : 1;
        block_names_.push_back("layer" + std::to_string(stage + 1) + "_" + std::to_string(b));
        blocks_.push_back(register_module(block_names_.back(), std::make_shared<BasicBlock>(in, out, stride)));
        in = out;
      }
    }
    fc_ = register_module("fc", Linear(64, 10));
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = layer("conv", x, [this](const torch::Tensor& t) { return conv_->forward(t); });
    x = torch::relu(layer("bn", x, [this](const torch::Tensor& t) { return bn_->forward(t); }));
    for (std::size_t i = 0; i < blocks_.size(); ++i) {
      x = layer(block_names_[i], x, [this, i](const torch::Tensor& t) { return blocks_[i]->forward(t); });
    }
    x = F::adaptive_avg_pool2d(x, F::AdaptiveAvgPool2dFuncOptions(1)).flatten(1);
    return layer("fc", x, [this](const torch::Tensor& t) { return fc_->forward(t); });
  }
  bool runs_layers() const override { return true; }

 private:
  Conv2d conv_{nullptr};
  BatchNorm2d bn_{nullptr};
  std::vector<std::shared_ptr<BasicBlock>> blocks_;
  std::vector<std::string> block_names_;
  Linear fc_{nullptr};
};

}  // namespace

std::vector<std::string> model_names() { return {"mlp", "cnn", "resnet20", "mlp50m", "mlp200m"}; }

std::shared_ptr<Model> make_model(const std::string& name, int in_channels) {
  if (name == "mlp") return std::make_shared<Mlp>();
  if (name == "cnn") return std::make_shared<SmallCnn>();
  if (name == "resnet20") return std::make_shared<ResNet20>(in_channels);
  if (name == "mlp50m") return std::make_shared<DeepMlp>(3);
  if (name == "mlp200m") return std::make_shared<DeepMlp>(12);
  throw_invalid_argument("unknown model '" + name + "'; choose mlp, cnn, resnet20, mlp50m or mlp200m");
}

std::int64_t parameter_count(const torch::nn::Module& m) {
  std::int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

}  // namespace hpct::train
