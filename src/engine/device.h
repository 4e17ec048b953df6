// Where a tensor's memory lives, and how the engine orders its work there
// without blocking the threads that produce and consume it.
//
// A Device owns memory (the fusion buffer on the device, pinned host staging
// memory), a communication stream of its own, and events. The protocol for a
// device tensor (as Horovod's GPU operations and torch's DDP do it):
//   1. The producer (the autograd hook) records a readiness event on the
//      stream that computed the gradient and submits it with the tensor
//      (TensorRef::ready, TensorRef::stream).
//   2. The engine's thread makes the communication stream wait for every
//      member's readiness event (wait: the host does not block), then
//      enqueues the copies into the fusion buffer on it, so the collective
//      never reads a buffer before its producers are done.
//   3. The collective runs on the communication stream: enqueued there by a
//      StreamCollectives (an NCCL communicator), or, with a host
//      communicator, staged: the buffer copied to pinned host memory, the
//      stream synchronised on the engine's thread (bounded by the
//      communicator's timeout), the host collective, the copy back.
//   4. The copies out of the fusion buffer are enqueued, a completion event
//      is recorded on the communication stream and the handle is done.
//   5. Handle::wait() makes the consumer's stream wait on the completion
//      event; the host goes on. Handle::wait(timeout) instead blocks the host
//      until the event fires or the timeout passes.
//
// Two implementations: CpuDevice (cpu_device.h: streams are in-order work
// queues on threads, events are sequence numbers; it runs the same ordering
// logic on any machine, for tests) and CudaDevice (cuda_device.h: cudaStream_t
// and cudaEvent_t; in hpct_engine_cuda, so CUDA stays out of this header and
// out of CPU programs).
//
// Threads: every method is thread-safe. Streams and events are opaque handles;
// a Stream is valid while its device is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/types.h"
#include "core/clock.h"

namespace hpct::engine {

enum class DeviceKind { kCpu, kCuda };

// A stream of a device: cudaStream_t for CUDA, a CpuDevice's queue for the
// CPU device. nullptr is the device's default stream.
struct Stream {
  void* handle = nullptr;
};

// A point in a stream's work. Recorded by Device::record; fires when the
// work enqueued before it is done.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  // True once fired. Never blocks.
  virtual bool query() const = 0;
  // Blocks the calling thread until fired or `timeout` passed; returns
  // whether it fired.
  virtual bool synchronize(Millis timeout) const = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  virtual int index() const = 0;
  std::string str() const;  // "cuda:0", "cpu-device:0"

  // Device memory (the fusion buffer) and pinned host memory (staging for a
  // host communicator). Never null (bad_alloc or Error otherwise); freed with
  // the matching free.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void free(void* p) = 0;
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void free_host(void* p) = 0;

  // The engine's stream: the collectives and their copies are ordered on it.
  virtual Stream comm_stream() = 0;
  // Enqueues a copy of `bytes` on `s` (either side device or host memory);
  // returns at once.
  virtual void copy_async(void* dst, const void* src, std::size_t bytes, Stream s) = 0;
  // Whether the casts below run on the device (when not, the engine casts in
  // host staging memory, or refuses: see engine.h).
  virtual bool can_cast() const { return false; }
  // Enqueue on `s` the cast of n float32 values to 16-bit (wire: float16 or
  // bfloat16, round to nearest even), or back (times scale). The defaults
  // raise InvalidArgument (a device that cannot cast).
  virtual void cast_to_16_async(const float* src, std::uint16_t* dst, std::size_t n,
                                comm::DataType wire, Stream s);
  virtual void cast_from_16_async(const std::uint16_t* src, float* dst, std::size_t n,
                                  comm::DataType wire, float scale, Stream s);
  // An event recorded on `s`: fires when the work enqueued on s so far is done.
  virtual std::shared_ptr<DeviceEvent> record(Stream s) = 0;
  // Makes `s` wait for `e` (work enqueued on s later starts after e fires);
  // returns at once.
  virtual void wait(Stream s, const DeviceEvent& e) = 0;
  // Blocks until the work enqueued on s so far is done, at most `timeout`;
  // returns whether it is.
  virtual bool synchronize(Stream s, Millis timeout) = 0;
};

// Collectives enqueued on a stream, returning at once: the seam where a
// communicator that runs on the device (NCCL, comm/nccl/) plugs into the
// engine (EngineOptions::stream_collectives). Its methods are called only by
// the engine's background thread, in the same order on every rank, on
// device memory of a device it serves. Errors found while enqueueing are
// thrown (an hpct::Error); errors of the enqueued work surface when the
// engine synchronises (Timeout) or through the communicator's own checks.
class StreamCollectives {
 public:
  virtual ~StreamCollectives() = default;
  // Whether it runs collectives on memory of this device.
  virtual bool serves(const Device& d) const = 0;
  virtual void allreduce(void* buffer, std::size_t count, comm::DataType dtype, comm::ReduceOp op,
                         Stream s) = 0;
  virtual void broadcast(void* buffer, std::size_t count, comm::DataType dtype, int root, Stream s) = 0;
  // Rank r contributes counts[r] bytes; output holds them in rank order.
  virtual void allgatherv(const void* input, void* output, const std::vector<std::size_t>& counts,
                          Stream s) = 0;
};

// Memory of a Device (device or pinned host) that grows, never shrinks: the
// device-side FusionBuffer. Used by the engine's thread only.
class DeviceBuffer {
 public:
  DeviceBuffer(Device& d, bool host) : device_(d), host_(host) {}
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  // At least `bytes`; earlier pointers are invalid once it grows. Callers
  // make sure no enqueued work still uses the old memory (the engine grows
  // it only with its stream synchronised or on that stream's order).
  void* reserve(std::size_t bytes);
  std::size_t capacity() const { return capacity_; }

 private:
  Device& device_;
  const bool host_;
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace hpct::engine
