// How a libtorch tensor off the host becomes the engine's TensorRef (its
// Device, the current stream and a readiness event recorded on it).
//
// hpct_torch links only torch's CPU library; the CUDA side (CudaDevice and
// c10::cuda's current stream) is in hpct_torch_cuda (cuda_tensors.cc),
// which a program that moves CUDA tensors links and switches on with
// enable_cuda_tensors() (the Python module does, where torch has CUDA).
// Until then a CUDA tensor is refused with InvalidArgument saying so.
#pragma once

#include "engine/device.h"

namespace hpct {

class CudaTensorSupport {
 public:
  virtual ~CudaTensorSupport() = default;
  // The engine's device for CUDA device `index` (one per process and GPU,
  // alive until the process ends).
  virtual engine::Device& device(int index) = 0;
  // torch's current stream on that device (c10::cuda::getCurrentCUDAStream).
  virtual engine::Stream current_stream(int index) = 0;
};

// The installed support, or null. Thread-safe.
CudaTensorSupport* cuda_tensor_support();
// Installs it (hpct_torch_cuda's enable_cuda_tensors()); the object lives
// until the process ends. Thread-safe.
void set_cuda_tensor_support(CudaTensorSupport* support);

// In hpct_torch_cuda: installs the CUDA support (idempotent).
void enable_cuda_tensors();
// In hpct_torch_cuda: the CUDA support object itself (one per process,
// never destroyed), not installed. The CUDA plugin (train/gpu_plugin.h)
// hands it to its caller, which installs it in its own copy of hpct_torch.
CudaTensorSupport& torch_cuda_tensor_support();

}  // namespace hpct
