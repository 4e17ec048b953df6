// Where `hpctrain train` computes: the CPU, or a CUDA GPU through torch's
// own CUDA library, loaded at run time.
//
// hpctrain's programs link only torch's CPU library (cmake/Torch.cmake), so
// they run where no CUDA library is installed (the Debian package). For
// --device cuda, use_device() first asks the CUDA runtime that came with
// torch how many GPUs there are (a few milliseconds; one line naming the
// fix when there is none), then loads libtorch_cuda.so beside
// libtorch_cpu.so with RTLD_GLOBAL: its static initializers register the
// CUDA kernels, allocators (pinned host memory too) and autocast's CUDA
// rules with the torch already in the process, and from then on
// tensor.to(kCUDA) works as in a program linked against it.
//
// Interim gradient path (until the engine moves device tensors itself,
// through NCCL or its host-staged path): HostStagedGradients copies every
// gradient of a step into one host buffer, averages it over the ranks
// through the engine's allreduce, and copies it back. Ranks sharing one GPU
// then end with the same parameters; the integrator replaces it with the
// engine's device path (docs/gpu.md).
//
// Not thread-safe across calls of use_device (call it once, before the
// model moves); the rest is for the training thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/hpctrain.h"

namespace hpct::train {

// "cpu", "cuda" or "cuda:N"; InvalidArgument naming the flag otherwise.
torch::Device parse_device(const std::string& text);

// What the CUDA runtime says about this host: GPU count, or why none.
struct GpuProbe {
  int count = 0;
  std::string error;    // "" when cudaGetDeviceCount succeeded
  std::string runtime;  // the libcudart that answered ("" when none loaded)
};

// Asks torch's CUDA runtime (libcudart beside torch, else the system's) for
// the GPU count. Never throws; loads nothing but libcudart.
GpuProbe probe_gpus();

// The one line `--device cuda` fails with when probe found no usable GPU
// for device (index past the count included); "" when it is usable.
std::string no_gpu_message(const std::string& flag, const torch::Device& device, const GpuProbe& probe);

// Makes `device` usable in this process: nothing for the CPU; for CUDA, the
// probe above (InvalidArgument with no_gpu_message when it fails), then
// libtorch_cuda.so loaded (InvalidArgument naming the library and dlerror
// when it cannot be), then the device made current.
void use_device(const torch::Device& device, const std::string& flag = "--device");

// Autocast for --amp: "" (off), "bf16" or "fp16"; InvalidArgument otherwise.
c10::ScalarType parse_amp(const std::string& text);  // kFloat for ""

// Forward passes inside one of these run under autocast for the device's
// type (CUDA or CPU) in dtype; kFloat: no autocast. Restores the previous
// state on exit and clears autocast's cast cache (the weights change every
// step).
class AutocastScope {
 public:
  AutocastScope(c10::DeviceType device, c10::ScalarType dtype);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  c10::DeviceType device_;
  bool active_ = false;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::kFloat;
};

// Dynamic loss scaling for fp16 (as torch.amp.GradScaler): the loss is
// multiplied by scale() before backward; after the gradients are averaged
// over ranks, unscale_and_check() divides them by it and says whether all
// are finite. A step with an inf or NaN is skipped and the scale halves;
// after growth_interval finite steps in a row it doubles. Every rank sees
// the same averaged gradients, so every rank skips the same steps.
class LossScaler {
 public:
  explicit LossScaler(bool enabled, double initial = 65536.0, std::int64_t growth_interval = 2000);
  bool enabled() const { return enabled_; }
  double scale() const { return scale_; }
  torch::Tensor scale_loss(const torch::Tensor& loss) const;
  // Divides every defined gradient by scale(); false when any is inf or NaN.
  bool unscale_and_check(const std::vector<torch::Tensor>& params);
  // After unscale_and_check: adjusts the scale for the next step.
  void update(bool finite);
  std::int64_t skipped_steps() const { return skipped_; }

 private:
  bool enabled_;
  double scale_;
  std::int64_t growth_interval_;
  std::int64_t good_steps_ = 0;
  std::int64_t skipped_ = 0;
};

// The interim gradient path for a model on a GPU (see the top of the file):
// average() copies the gradients to one host buffer (one device-to-host
// copy), allreduces it through the engine (HPCT's own backends, averaging)
// and copies the result back (one host-to-device copy). A no-op on one
// rank. Blocks until the gradients are averaged.
class HostStagedGradients {
 public:
  HostStagedGradients(Context& ctx, std::vector<torch::Tensor> params);
  void average();

 private:
  Context& ctx_;
  std::vector<torch::Tensor> params_;
};

// Moves the optimizer's per-parameter state (SGD momentum, Adam moments) to
// the device of its parameters, after a checkpoint loaded it on the CPU.
void move_optimizer_state(torch::optim::Optimizer& optimizer, const torch::Device& device);

}  // namespace hpct::train
