// The host-staged path for CUDA buffers: a Communicator whose buffers are
// device memory, run by any host Communicator (Gloo, MPI) through pinned host
// copies. For where NCCL cannot serve: several ranks sharing one GPU (NCCL
// refuses a communicator with two ranks on one device), or a job without
// NCCL.
//
// Each operation (blocking, as every Communicator's):
//   1. copies the device input into a pinned staging buffer (cudaMemcpyAsync
//      on the DeviceMemory's own stream) and waits for the copy, bounded;
//   2. runs the same operation on the host communicator over the staging
//      buffer, with what is left of the operation's timeout;
//   3. copies the result back into the device output and waits for it.
// One staging buffer serves every operation: kept between operations and
// grown (to at least double) when one needs more, so a training loop
// allocates pinned memory a few times, not every step. Operations that need
// an input and an output region (allgather(v), reduce-scatter, alltoall) lay
// both out in it, the output at the next 64-byte boundary after the input.
// Segmented allreduces pack the segments into it at their offsets and
// unpack them after: one host allreduce for all of them.
//
// Cost: two copies over PCIe per operation, on top of the host collective;
// NCCL is the fast path where it can run.
//
// Failure: a copy that does not finish in time raises Timeout naming the
// operation, the bytes and the device; errors of the host communicator pass
// through with the operation named. Either breaks the communicator
// (FailureLatch), except InvalidArgument (nothing was sent). After a timed-out copy the staging buffer is not freed
// (the device may still write into it): it is leaked on destruction instead.
//
// Threads: as Communicator; the host communicator must not be used by anyone
// else while this one runs an operation.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/cuda/device_memory.h"
#include "comm/failure_latch.h"

namespace hpct::comm {

class StagedCommunicator final : public Communicator {
 public:
  // host: not owned, must outlive this communicator.
  StagedCommunicator(Communicator& host, std::unique_ptr<DeviceMemory> memory);
  // host: owned.
  StagedCommunicator(std::unique_ptr<Communicator> host, std::unique_ptr<DeviceMemory> memory);
  ~StagedCommunicator() override;

  // "staged-gloo", "staged-mpi".
  const char* backend_name() const override { return name_.c_str(); }
  // "staged:" + the host communicator's algorithm.
  std::string algorithm(OpKind op, size_t bytes) const override;
  bool host_buffers() const override { return false; }

  Communicator& host() { return host_; }
  // The staging buffer's size now, and how many times it was allocated.
  size_t staging_capacity() const { return capacity_; }
  int staging_allocations() const { return allocations_; }

 protected:
  void do_allreduce(const AllreduceOptions& o) override;
  bool do_allreduce_segments(const AllreduceSegmentsOptions& o) override;
  void do_broadcast(const BroadcastOptions& o) override;
  void do_allgatherv(const AllgathervOptions& o) override;
  void do_reduce_scatter(const ReduceScatterOptions& o) override;
  void do_reduce_scatter_v(const ReduceScatterOptions& o) override;  // the host backend's, staged
  void do_send(const SendOptions& o) override;
  void do_recv(const RecvOptions& o) override;
  void do_alltoall(const AlltoallOptions& o) override;
  void do_barrier(const BarrierOptions& o) override;

 private:
  class Op;  // one operation's deadline and error naming (staged_communicator.cc)

  // The staging buffer, at least `bytes` long (grown as the file comment says).
  char* staging(size_t bytes);

  std::unique_ptr<Communicator> owned_;
  Communicator& host_;
  std::unique_ptr<DeviceMemory> memory_;
  std::string name_;
  char* staging_ = nullptr;
  size_t capacity_ = 0;
  int allocations_ = 0;
  FailureLatch latch_;
};

// The offset of the output region after an input region of `bytes`.
inline size_t staged_output_offset(size_t input_bytes) { return (input_bytes + 63) / 64 * 64; }

}  // namespace hpct::comm
