// TorchScript models for `hpctrain train --model FILE.pt`: a module exported
// from Python (torch.jit.script, or trace; see scripts/export_torchscript.py)
// trained from C++ through the same Model interface as the built-in ones, so
// the trainer, DistributedOptimizer, broadcast_parameters and checkpoints do
// not know the difference.
//
// How: the jit::Module's parameters and buffers are registered, under their
// Python names ("features.1.running_mean"), in a mirror tree of plain
// torch::nn::Modules. A registered tensor is the same TensorImpl the script
// module holds, so gradients, optimizer updates, batch-norm updates made by
// the script and checkpoint loads (which set_() the tensor in place) are
// seen on both sides. train()/eval() switch the script's own modules too
// (dropout, batch norm). A script that rebinds a buffer attribute to a new
// tensor instead of updating it in place is rebound to the registered one
// after each forward, so the two never drift apart.
//
// torch.jit.trace bakes the mode it was traced in into the graph (a traced
// dropout stays on in eval()); export with torch.jit.script to get mode
// switching.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <torch/script.h>

#include "train/models.h"

namespace hpct::train {

class ScriptedModel final : public Model {
 public:
  // Loads path: Io when it cannot be read, InvalidArgument when it is not a
  // TorchScript archive, has no forward, or has no trainable parameter.
  explicit ScriptedModel(const std::string& path);

  // The script's forward(x); InvalidArgument when it does not return one
  // tensor. libtorch errors raised inside the script propagate as they are
  // (the trainer names the input shape).
  torch::Tensor forward(torch::Tensor x) override;
  void train(bool on = true) override;

  // The script module with its current weights and buffers, in eval mode,
  // as a TorchScript file Python's torch.jit.load reads. Io on failure.
  void save_script(const std::string& path);

  const std::string& path() const { return path_; }

 private:
  struct BufferSlot {
    torch::jit::Module owner;  // the script submodule holding the attribute
    std::string attr;
    torch::Tensor registered;  // the tensor in this module's buffers()
  };

  void rebind_buffers();

  std::string path_;
  torch::jit::Module script_;
  std::vector<BufferSlot> buffers_;
};

// A built-in model name (make_model) or, for anything else, a TorchScript
// file to load; the error for a missing file names both choices.
std::shared_ptr<Model> open_model(const std::string& spec, int in_channels = 1);

}  // namespace hpct::train
