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
// Gradients of a model on a GPU move through the engine's device path:
// tensor_ref() hands it CUDA tensors (their stream and a ready event), and
// the engine runs the collectives on the GPU through NCCL
// (EngineOptions::stream_collectives) or, where NCCL cannot serve (ranks
// sharing a GPU), stages them through pinned host memory itself. The CUDA
// side of that (CudaDevice, NCCL, the GPU communicators) is in the CUDA
// plugin, libhpctrain_cuda.so (gpu_plugin.h), which use_device() loads
// after libtorch_cuda.so, and gpu_engine_setup() connects for init().
//
// Not thread-safe across calls of use_device (call it once, before the
// model moves); the rest is for the training thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "hpctrain/hpctrain.h"
#include "torch/context.h"
#include "train/gpu_plugin.h"

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
// when it cannot be), then the CUDA plugin (load_gpu_plugin) with its CUDA
// tensors installed for tensor_ref(), then the device made current.
// Calling it again is cheap (the libraries stay loaded).
void use_device(const torch::Device& device, const std::string& flag = "--device");

// Where the CUDA plugin is looked for, in order: beside the running
// executable (hpctrain-torch, installed or in the build tree), then the
// build tree's tools/hpctrain (tests that run from elsewhere).
std::vector<std::string> gpu_plugin_candidates();

// Opens the first of `candidates` that exists (dlopen, RTLD_LOCAL; it
// touches no CUDA while loading) and returns its plugin; the same object on
// later calls. InvalidArgument, one line, when none exists or it cannot be
// loaded: `what`, the file(s), dlerror, and the fix. Thread-safe.
GpuPlugin& load_gpu_plugin(const std::string& what, const std::vector<std::string>& candidates);
// The plugin use_device() loaded; null before (and for the CPU).
GpuPlugin* loaded_gpu_plugin();

// For init(config, setup) on a GPU: connects the plugin's collectives for
// the job (HPCT_GPU_PATH from config; NCCL through the world's store, or
// staged) and puts them into the engine's options. Needs use_device(device)
// first. A path named explicitly that cannot run fails (InvalidArgument
// naming the fix); with HPCT_GPU_PATH=auto, a communicator that cannot be
// built is logged and the engine stages device tensors through the host.
EngineSetup gpu_engine_setup(const torch::Device& device, const Config& config);

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

// Moves the optimizer's per-parameter state (SGD momentum, Adam moments) to
// the device of its parameters, after a checkpoint loaded it on the CPU.
void move_optimizer_state(torch::optim::Optimizer& optimizer, const torch::Device& device);

}  // namespace hpct::train
