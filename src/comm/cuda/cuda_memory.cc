#include "comm/cuda/cuda_memory.h"

#include <cuda_runtime_api.h>

#include "comm/cuda/cuda_check.h"
#include "core/error.h"

namespace hpct::comm {

CudaDeviceMemory::CudaDeviceMemory(int device) : device_(device) {
  const std::string what = "CUDA staging on " + name();
  cuda::DeviceGuard guard(device_, what);
  cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), what + ": stream");
  try {
    cuda::check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), what + ": event");
    cuda::check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), what + ": event");
  } catch (...) {
    if (ready_ != nullptr) cudaEventDestroy(ready_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

CudaDeviceMemory::~CudaDeviceMemory() {
  int previous = device_;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  cudaEventDestroy(done_);
  cudaEventDestroy(ready_);
  cudaStreamDestroy(stream_);
  cudaSetDevice(previous);
}

void* CudaDeviceMemory::alloc_pinned(size_t bytes) {
  cuda::DeviceGuard guard(device_, "pinned staging buffer");
  void* p = nullptr;
  cuda::check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable),
              "cudaHostAlloc of a " + std::to_string(bytes) + "-byte staging buffer for " + name() +
                  " (page-locked memory is limited by `ulimit -l` and the host's RAM)");
  return p;
}

void CudaDeviceMemory::free_pinned(void* p) noexcept {
  if (p != nullptr) cudaFreeHost(p);
}

void CudaDeviceMemory::order_after_default_stream() {
  if (ordered_) return;
  cuda::check(cudaEventRecord(ready_, cudaStreamLegacy), name() + ": cudaEventRecord");
  cuda::check(cudaStreamWaitEvent(stream_, ready_, 0), name() + ": cudaStreamWaitEvent");
  ordered_ = true;
}

void CudaDeviceMemory::copy_to_host(void* host, const void* device, size_t bytes) {
  if (bytes == 0) return;
  cuda::DeviceGuard guard(device_, "staging copy");
  order_after_default_stream();
  cuda::check(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream_),
              name() + ": cudaMemcpyAsync of " + std::to_string(bytes) +
                  " bytes to the host (is the buffer device memory of this GPU?)");
}

void CudaDeviceMemory::copy_to_device(void* device, const void* host, size_t bytes) {
  if (bytes == 0) return;
  cuda::DeviceGuard guard(device_, "staging copy");
  order_after_default_stream();
  cuda::check(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_),
              name() + ": cudaMemcpyAsync of " + std::to_string(bytes) +
                  " bytes to the device (is the buffer device memory of this GPU?)");
}

void CudaDeviceMemory::synchronize(Millis timeout, const std::string& what) {
  cuda::DeviceGuard guard(device_, what);
  cuda::check(cudaEventRecord(done_, stream_), what + ": cudaEventRecord");
  ordered_ = false;
  const auto deadline = SteadyClock::now() + timeout;
  cuda::PollNap nap;
  for (;;) {
    const cudaError_t rc = cudaEventQuery(done_);
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) cuda::check(rc, what + " on " + name());
    if (SteadyClock::now() >= deadline) {
      throw Error(ErrorCode::kTimeout,
                  what + ": the copies on " + name() + " did not finish within " +
                      std::to_string(timeout.count()) +
                      " ms (the GPU is busy or hung: check nvidia-smi; raise HPCT_TIMEOUT_S if "
                      "it is only slow)");
    }
    nap();
  }
}

}  // namespace hpct::comm
