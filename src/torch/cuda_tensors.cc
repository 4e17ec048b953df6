// The CUDA side of device_tensors.h: a CudaDevice per GPU and torch's
// current CUDA stream. In hpct_torch_cuda (links torch_cuda and c10_cuda).
#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <mutex>
#include <vector>

#include "engine/cuda_device.h"
#include "torch/device_tensors.h"

namespace hpct {
namespace {

class TorchCudaSupport final : public CudaTensorSupport {
 public:
  engine::Device& device(int index) override {
    std::lock_guard<std::mutex> lk(mu_);
    if (devices_.size() <= static_cast<std::size_t>(index)) devices_.resize(static_cast<std::size_t>(index) + 1);
    auto& d = devices_[static_cast<std::size_t>(index)];
    if (!d) d = std::make_unique<engine::CudaDevice>(index);
    return *d;
  }
  engine::Stream current_stream(int index) override {
    return engine::Stream{c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(index)).stream()};
  }

 private:
  std::mutex mu_;
  std::vector<std::unique_ptr<engine::CudaDevice>> devices_;  // GUARDED_BY(mu_)
};

}  // namespace

CudaTensorSupport& torch_cuda_tensor_support() {
  // Never destroyed: devices must outlive every engine and handle, which may
  // live until exit (the CUDA runtime tears down its own state then).
  static auto* support = new TorchCudaSupport();
  return *support;
}

void enable_cuda_tensors() { set_cuda_tensor_support(&torch_cuda_tensor_support()); }

}  // namespace hpct
