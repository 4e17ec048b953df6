// The engine's device collectives (StreamCollectives) over a Communicator
// whose operations block the calling thread until done: the hierarchical
// path for CUDA buffers (comm/gpu/hierarchical_communicator.h: NCCL inside
// the host, the host communicator across hosts through pinned memory), whose
// every operation already runs its own streams and returns when its result
// is in the buffer.
//
// Each call first synchronises the engine's stream (bounded by the timeout),
// so the fused buffer holds what the stream copied into it, then runs the
// operation on the engine's thread. Work enqueued on the stream afterwards
// (the copies out of the fusion buffer, the completion event) starts after
// the operation. Unlike NCCL on the stream, the engine's thread waits here:
// the price of a path that crosses hosts through host memory anyway.
//
// Threads: called only by the engine's background thread (device.h).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "core/clock.h"
#include "engine/device.h"

namespace hpct::engine {

class BlockingStreamCollectives final : public StreamCollectives {
 public:
  // comm: device buffers of `device` (host_buffers() false, or a CPU
  // device's memory in tests); shared so a test may keep using it.
  BlockingStreamCollectives(std::shared_ptr<comm::Communicator> comm, Device& device, Millis timeout);

  bool serves(const Device& d) const override { return &d == &device_; }
  void allreduce(void* buffer, std::size_t count, comm::DataType dtype, comm::ReduceOp op, Stream s) override;
  void broadcast(void* buffer, std::size_t count, comm::DataType dtype, int root, Stream s) override;
  void allgatherv(const void* input, void* output, const std::vector<std::size_t>& counts, Stream s) override;

 private:
  // Timeout naming `op` when the stream's work is not done in time.
  void drain(Stream s, const char* op);

  std::shared_ptr<comm::Communicator> comm_;
  Device& device_;
  const Millis timeout_;
};

}  // namespace hpct::engine
