// The CPU implementation of Device (device.h): the stream and event ordering
// of a GPU, run with threads, so the engine's device path works and is
// tested on machines without a GPU.
//
// Each stream is an in-order work queue served by a thread of its own; an
// event is a stream and a sequence number, fired once the stream completed
// that many operations; a stream that waits on an event holds its later work
// until the event fires. "Device memory" is ordinary aligned host memory, so
// a copy is a memcpy run in stream order. Tests enqueue their own work (a
// kernel standing in for the backward pass) with enqueue(), and may slow
// every operation down (Options::op_delay) to widen the races the ordering
// must prevent.
//
// Threads: every method is thread-safe. Destroying the device drains nothing:
// work still queued is dropped, a stream waiting on an event stops waiting.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/device.h"

namespace hpct::engine {

class CpuDevice final : public Device {
 public:
  struct Options {
    int index = 0;
    Millis op_delay{0};  // slept before each stream operation (tests)
  };
  CpuDevice() : CpuDevice(Options{}) {}
  explicit CpuDevice(Options options);
  ~CpuDevice() override;

  DeviceKind kind() const override { return DeviceKind::kCpu; }
  int index() const override { return options_.index; }
  void* allocate(std::size_t bytes) override;
  void free(void* p) override;
  void* allocate_host(std::size_t bytes) override { return allocate(bytes); }
  void free_host(void* p) override { free(p); }
  Stream comm_stream() override { return comm_; }
  bool can_cast() const override { return true; }
  void copy_async(void* dst, const void* src, std::size_t bytes, Stream s) override;
  void cast_to_16_async(const float* src, std::uint16_t* dst, std::size_t n, comm::DataType wire,
                        Stream s) override;
  void cast_from_16_async(const std::uint16_t* src, float* dst, std::size_t n, comm::DataType wire,
                          float scale, Stream s) override;
  std::shared_ptr<DeviceEvent> record(Stream s) override;
  void wait(Stream s, const DeviceEvent& e) override;
  bool synchronize(Stream s, Millis timeout) override;

  // A new stream of this device (valid while the device is).
  Stream new_stream();
  // Enqueues fn on s (a kernel, for tests); returns at once.
  void enqueue(Stream s, std::function<void()> fn);
  // Operations done so far by all the streams (tests).
  std::uint64_t operations() const;

  struct Queue;  // one stream (cpu_device.cc)

 private:
  Queue& queue(Stream s);

  const Options options_;
  mutable std::mutex mu_;
  std::vector<std::shared_ptr<Queue>> queues_;  // GUARDED_BY(mu_); [0] is the default stream
  Stream comm_;
};

}  // namespace hpct::engine
