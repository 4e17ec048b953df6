// The CUDA implementation of Device (device.h): cudaStream_t streams,
// cudaEvent_t events, cudaMalloc'd fusion buffers and cudaHostAlloc'd
// (pinned) staging memory, and the float16/bfloat16 casts as kernels
// (cuda_casts.cu). In hpct_engine_cuda, built only where torch has CUDA and
// the toolkit is found; CUDA's headers stay in the .cc files.
//
// Streams: Stream::handle is a cudaStream_t (nullptr: the legacy default
// stream); torch's current stream passes as it is. The communication
// stream is created non-blocking, so it never waits on the legacy default
// stream implicitly: only the readiness events order it.
//
// Bounded waits: synchronize() polls cudaEventQuery (cudaEventSynchronize
// cannot time out), sleeping up to 200 us between polls.
//
// Errors: a CUDA call that fails raises hpct::Error (kIo) naming the device
// and the call. Thread-safe: every call sets the device it needs and
// restores the caller's.
#pragma once

#include "engine/device.h"

namespace hpct::engine {

class CudaDevice final : public Device {
 public:
  // The visible device `index`; creates its communication stream.
  explicit CudaDevice(int index);
  ~CudaDevice() override;

  // The visible CUDA devices; 0 without a driver or device (never throws).
  static int count();

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  int index() const override { return index_; }
  void* allocate(std::size_t bytes) override;
  void free(void* p) override;
  void* allocate_host(std::size_t bytes) override;
  void free_host(void* p) override;
  Stream comm_stream() override { return comm_; }
  void copy_async(void* dst, const void* src, std::size_t bytes, Stream s) override;
  bool can_cast() const override { return true; }
  void cast_to_16_async(const float* src, std::uint16_t* dst, std::size_t n, comm::DataType wire,
                        Stream s) override;
  void cast_from_16_async(const std::uint16_t* src, float* dst, std::size_t n, comm::DataType wire,
                          float scale, Stream s) override;
  std::shared_ptr<DeviceEvent> record(Stream s) override;
  void wait(Stream s, const DeviceEvent& e) override;
  bool synchronize(Stream s, Millis timeout) override;

 private:
  const int index_;
  Stream comm_;
};

}  // namespace hpct::engine
