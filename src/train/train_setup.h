// The set-up that run_training and run_elastic_training (trainer.cc) share:
// the model checked against one sample of the data before any rank trains,
// its optimizer, the forward pass and loss every phase uses, and the
// metrics file rank 0 appends to. Internal to train/.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <exception>
#include <fstream>
#include <memory>
#include <string>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "data/source/file.h"
#include "train/models.h"
#include "train/trainer.h"

namespace hpct::train {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t);

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainOptions& o, Model& model);

void set_lr(torch::optim::Optimizer& opt, double lr);

// One sample of the training data, [1, C, H, W]: its channels shape
// resnet20, and a forward pass on it checks the model fits the data before
// any rank starts training.
torch::Tensor probe_sample(const TrainOptions& o, const Logger& log, std::shared_ptr<data::FileSystem> fs,
                           const Config& config);

// --model opened for the sample's channels, after a forward pass on the
// sample in eval mode; left in training mode.
std::shared_ptr<Model> open_probed_model(const TrainOptions& o, const torch::Tensor& sample);

std::string shape_of(const torch::Tensor& t);

// The message of a libtorch error without its C++ stack; for an error raised
// inside a TorchScript module, the operator's own message after the script's
// traceback.
std::string error_summary(const std::exception& e);

// The model's logits [N, classes] for x. Errors name the model and the
// shapes, never only a libtorch stack.
torch::Tensor logits(Model& model, const std::string& name, const torch::Tensor& x);

// Cross entropy of the logits, refusing labels the model has no class for.
// max_label: the batch's largest label when the caller knows it (the
// loader finds it on the host, data::Batch::max_label), so that a batch on
// a GPU is checked without a device sync; -1: read it from labels.
torch::Tensor classification_loss(const std::string& name, const torch::Tensor& out, const torch::Tensor& labels,
                                  torch::nn::functional::CrossEntropyFuncOptions opts = {},
                                  std::int64_t max_label = -1);

// rank 0's JSON-lines metrics file (TrainOptions::metrics); a no-op when
// the path is empty.
class MetricsFile {
 public:
  explicit MetricsFile(const std::string& path) {
    if (path.empty()) return;
    out_.open(path, std::ios::app);
    if (!out_) throw_io("open " + path, errno ? errno : EACCES);
  }
  // Adds "time" (Unix seconds) so `hpctrain report` can place the line
  // among the launcher's restart lines and the other runs appended here.
  void write(nlohmann::json j) {
    if (!out_.is_open()) return;
    if (!j.contains("time")) {
      j["time"] = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    }
    out_ << j.dump() << '\n' << std::flush;
  }

 private:
  std::ofstream out_;
};

}  // namespace hpct::train
