// DeviceMemory for CUDA devices (device_memory.h): pinned buffers from
// cudaHostAlloc, copies by cudaMemcpyAsync on a stream of its own
// (cudaStreamNonBlocking), waits bounded by polling an event. Built only
// where the CUDA toolkit is (hpct_comm_cuda).
//
// Ordering: the first copy after a synchronize() waits (on the device, not
// the host) for the work queued so far on the device's legacy default stream,
// where the blocking Communicator API expects a caller's producers to have
// run or been synchronized; work on other streams must be finished by the
// caller (the engine passes events instead: comm/nccl/communicator.h).
#pragma once

#include <string>

#include "comm/cuda/device_memory.h"

struct CUstream_st;
struct CUevent_st;

namespace hpct::comm {

class CudaDeviceMemory final : public DeviceMemory {
 public:
  // Creates the stream and the events on `device`; Io naming the device and
  // CUDA's reason when it cannot (no GPU, bad index).
  explicit CudaDeviceMemory(int device);
  // Waits for nothing: destroys the stream and events (CUDA finishes queued
  // copies first). Never throws.
  ~CudaDeviceMemory() override;

  void* alloc_pinned(size_t bytes) override;
  void free_pinned(void* p) noexcept override;
  void copy_to_host(void* host, const void* device, size_t bytes) override;
  void copy_to_device(void* device, const void* host, size_t bytes) override;
  void synchronize(Millis timeout, const std::string& what) override;
  std::string name() const override { return "cuda:" + std::to_string(device_); }

  int device() const { return device_; }
  CUstream_st* stream() const { return stream_; }

 private:
  void order_after_default_stream();

  int device_;
  CUstream_st* stream_ = nullptr;
  CUevent_st* ready_ = nullptr;  // recorded on the legacy default stream
  CUevent_st* done_ = nullptr;   // recorded on stream_ by synchronize()
  bool ordered_ = false;         // stream_ already waits for ready_ since the last synchronize
};

}  // namespace hpct::comm
