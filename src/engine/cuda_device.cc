#include "engine/cuda_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <thread>

#include "core/error.h"
#include "engine/cuda_casts.h"

namespace hpct::engine {
namespace {

void check(cudaError_t rc, int index, const char* call) {
  if (rc == cudaSuccess) return;
  throw Error(ErrorCode::kIo, std::string(call) + " on cuda:" + std::to_string(index) +
                                  " failed: " + cudaGetErrorString(rc));
}

// Makes `index` the calling thread's device for the scope.
class DeviceScope {
 public:
  explicit DeviceScope(int index) {
    check(cudaGetDevice(&previous_), index, "cudaGetDevice");
    if (previous_ != index) check(cudaSetDevice(index), index, "cudaSetDevice");
  }
  ~DeviceScope() {
    int now = previous_;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s.handle); }

// Fired once cudaEventQuery says so; polled for the bounded host wait.
bool poll_event(cudaEvent_t e, int index, Millis timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  auto pause = std::chrono::microseconds(5);
  while (true) {
    const cudaError_t rc = cudaEventQuery(e);
    if (rc == cudaSuccess) return true;
    if (rc != cudaErrorNotReady) check(rc, index, "cudaEventQuery");
    if (SteadyClock::now() >= deadline) return false;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(200));
  }
}

class CudaEvent final : public DeviceEvent {
 public:
  explicit CudaEvent(int index) : index_(index) {
    DeviceScope scope(index);
    check(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), index, "cudaEventCreateWithFlags");
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  bool query() const override {
    const cudaError_t rc = cudaEventQuery(event_);
    if (rc == cudaErrorNotReady) return false;
    check(rc, index_, "cudaEventQuery");
    return true;
  }
  bool synchronize(Millis timeout) const override { return poll_event(event_, index_, timeout); }
  cudaEvent_t get() const { return event_; }

 private:
  int index_;
  cudaEvent_t event_ = nullptr;
};

}  // namespace

int CudaDevice::count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clears the sticky "no driver" error
    return 0;
  }
  return n;
}

CudaDevice::CudaDevice(int index) : index_(index) {
  DeviceScope scope(index);
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), index, "cudaStreamCreateWithFlags");
  comm_.handle = s;
}

CudaDevice::~CudaDevice() {
  DeviceScope scope(index_);
  cudaStreamDestroy(stream_of(comm_));
}

void* CudaDevice::allocate(std::size_t bytes) {
  DeviceScope scope(index_);
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), index_, "cudaMalloc");
  return p;
}

void CudaDevice::free(void* p) {
  DeviceScope scope(index_);
  cudaFree(p);
}

void* CudaDevice::allocate_host(std::size_t bytes) {
  DeviceScope scope(index_);
  void* p = nullptr;
  check(cudaHostAlloc(&p, bytes, cudaHostAllocPortable), index_, "cudaHostAlloc");
  return p;
}

void CudaDevice::free_host(void* p) { cudaFreeHost(p); }

void CudaDevice::copy_async(void* dst, const void* src, std::size_t bytes, Stream s) {
  if (bytes == 0) return;
  DeviceScope scope(index_);
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_of(s)), index_, "cudaMemcpyAsync");
}

void CudaDevice::cast_to_16_async(const float* src, std::uint16_t* dst, std::size_t n, comm::DataType wire,
                                  Stream s) {
  DeviceScope scope(index_);
  check(static_cast<cudaError_t>(
            cuda::launch_to_16(src, dst, n, wire == comm::DataType::kBFloat16, s.handle)),
        index_, "the float32 to 16-bit cast kernel");
}

void CudaDevice::cast_from_16_async(const std::uint16_t* src, float* dst, std::size_t n, comm::DataType wire,
                                    float scale, Stream s) {
  DeviceScope scope(index_);
  check(static_cast<cudaError_t>(
            cuda::launch_from_16(src, dst, n, wire == comm::DataType::kBFloat16, scale, s.handle)),
        index_, "the 16-bit to float32 cast kernel");
}

std::shared_ptr<DeviceEvent> CudaDevice::record(Stream s) {
  auto e = std::make_shared<CudaEvent>(index_);
  DeviceScope scope(index_);
  check(cudaEventRecord(e->get(), stream_of(s)), index_, "cudaEventRecord");
  return e;
}

void CudaDevice::wait(Stream s, const DeviceEvent& e) {
  DeviceScope scope(index_);
  check(cudaStreamWaitEvent(stream_of(s), dynamic_cast<const CudaEvent&>(e).get(), 0), index_,
        "cudaStreamWaitEvent");
}

bool CudaDevice::synchronize(Stream s, Millis timeout) {
  CudaEvent e(index_);
  DeviceScope scope(index_);
  check(cudaEventRecord(e.get(), stream_of(s)), index_, "cudaEventRecord");
  return poll_event(e.get(), index_, timeout);
}

}  // namespace hpct::engine
