// The memory operations the host-staged path (staged_communicator.h) needs
// from a device: pinned host buffers and copies between them and device
// buffers, queued in order and waited for with a bound.
//
// Two implementations: CudaDeviceMemory (cuda_memory.h: cudaHostAlloc,
// cudaMemcpyAsync on a stream of its own; built with CUDA only) and
// HostDeviceMemory below, where "device" buffers are plain host memory and
// every copy is a memcpy, so the staged path's bookkeeping (buffer reuse and
// growth, offsets, in-place and out-of-place) runs in CPU tests.
//
// Ownership: alloc_pinned's buffers belong to the caller until it passes them
// to free_pinned. Threads: one user at a time (the communicator that owns it).
#pragma once

#include <cstddef>
#include <string>

#include "core/clock.h"

namespace hpct::comm {

class DeviceMemory {
 public:
  DeviceMemory() = default;
  virtual ~DeviceMemory() = default;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  // Page-locked host memory of at least `bytes` (> 0); Io naming the size
  // when the device refuses. Blocks.
  virtual void* alloc_pinned(size_t bytes) = 0;
  // Frees what alloc_pinned returned; nullptr is ignored. Never throws.
  virtual void free_pinned(void* p) noexcept = 0;

  // Queue a copy (ordered after every copy queued before it and after work
  // already queued on the device's default stream); may return before it is
  // done. `host` is pinned memory from alloc_pinned.
  virtual void copy_to_host(void* host, const void* device, size_t bytes) = 0;
  virtual void copy_to_device(void* device, const void* host, size_t bytes) = 0;

  // Blocks until every queued copy is done, or raises Timeout after
  // `timeout` naming `what` ("staged allreduce of 4096 bytes: copies to the
  // host") and the device.
  virtual void synchronize(Millis timeout, const std::string& what) = 0;

  // "cuda:0", "host": for messages and algorithm names.
  virtual std::string name() const = 0;
};

// Device buffers are host memory; copies are memcpy and done when they
// return. For tests of the staged path on machines without a GPU.
class HostDeviceMemory : public DeviceMemory {
 public:
  void* alloc_pinned(size_t bytes) override;
  void free_pinned(void* p) noexcept override;
  void copy_to_host(void* host, const void* device, size_t bytes) override;
  void copy_to_device(void* device, const void* host, size_t bytes) override;
  void synchronize(Millis /*timeout*/, const std::string& /*what*/) override {}
  std::string name() const override { return "host"; }
};

}  // namespace hpct::comm
