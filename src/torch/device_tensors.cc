#include "torch/device_tensors.h"

#include <atomic>

namespace hpct {
namespace {
// A hook, not state: which CUDA glue this process was linked with, set once.
std::atomic<CudaTensorSupport*> g_cuda_support{nullptr};
}  // namespace

CudaTensorSupport* cuda_tensor_support() { return g_cuda_support.load(std::memory_order_acquire); }

void set_cuda_tensor_support(CudaTensorSupport* support) {
  g_cuda_support.store(support, std::memory_order_release);
}

}  // namespace hpct
