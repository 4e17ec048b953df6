// The hierarchical path for CUDA buffers: NCCL inside each host, the host
// communicator (Gloo's TCP mesh) across hosts through pinned host memory.
// The same design as the Gloo backend's hierarchical allreduce
// (comm/gloo/communicator.h): every local rank carries 1/L of the buffer
// across hosts, so L connections per host pair move 1/L of the bytes each.
//
// Allreduce of `count` elements (sum, avg, min, max, product) on L ranks per
// host and H hosts; b = count / L, t = count - L*b (0 <= t < L):
//   1. inside the host (`local`, NCCL in production): reduce-scatter of the
//      first L*b elements, in place, so local rank l holds slice l
//      ([l*b, (l+1)*b)) reduced over the host; the t tail elements are
//      allreduced inside the host (a small second operation);
//   2. across hosts (`across`, a host communicator among local rank l of
//      every host): local rank l copies its slice (the last local rank: its
//      slice and the tail, [(L-1)*b, count), contiguous) into pinned host
//      memory, allreduces it with the same slice of every other host, and
//      copies it back; avg is summed in steps 1-2 and divided once here, on
//      the host, by the world size (integer averages truncate, as every
//      backend's);
//   3. inside the host: allgatherv of the slices, in place (counts b, ..., b,
//      b + t), so every rank ends with every slice from its owner: the same
//      bits on every rank.
// Small messages (at most flat_up_to_bytes, the Gloo backend's
// HPCT_DIRECT_ALLREDUCE_BYTES rule) and int16 (NCCL has no int16) take
// `flat`; so does every other operation (broadcast, allgather(v),
// reduce-scatter, alltoall, send/recv, barrier): in production a
// StagedCommunicator over the world's host communicator.
//
// The parts are injected Communicators, so the algorithm (who sends what,
// offsets, sizes, the uneven tail) runs in CPU tests with Gloo thread ranks
// as `local` and HostDeviceMemory as the device.
//
// Failure: one deadline per operation; each step gets what is left of it.
// An error from a part passes through, with the operation and the step
// named, and breaks this communicator (FailureLatch), except InvalidArgument
// (nothing was sent). After a timed-out copy the pinned buffer is leaked
// rather than freed (the device may still write into it).
//
// Threads: as Communicator. The parts must not be used by anyone else while
// this one runs an operation.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/cuda/device_memory.h"
#include "comm/failure_latch.h"

namespace hpct::comm {

struct HierarchicalParts {
  // This host's ranks, rank = local rank, device buffers (NcclCommunicator).
  std::unique_ptr<Communicator> local;
  // Local rank `local->rank()` of every host, rank = host index, host
  // buffers (Gloo). Size 1 when there is one host.
  std::unique_ptr<Communicator> across;
  // Every rank, device buffers (StagedCommunicator over the world's host
  // communicator): its rank and size are this communicator's.
  std::unique_ptr<Communicator> flat;
  // Copies of the slices between the device and pinned host memory.
  std::unique_ptr<DeviceMemory> memory;
  // Allreduces of at most this many bytes go flat (HPCT_DIRECT_ALLREDUCE_BYTES).
  size_t flat_up_to_bytes = 64 << 10;
  // This host's world ranks by local rank, for messages (may be empty).
  std::vector<int> local_world_ranks;
};

class HierarchicalDeviceCommunicator final : public Communicator {
 public:
  // InvalidArgument when a part is missing, across carries device buffers,
  // or the sizes do not match (flat size != local size x across size).
  explicit HierarchicalDeviceCommunicator(HierarchicalParts parts);
  ~HierarchicalDeviceCommunicator() override;

  // "hierarchical-nccl-gloo".
  const char* backend_name() const override { return name_.c_str(); }
  // Allreduces that take the hierarchy: "hier:nccl+gloo+nccl"; the rest:
  // the flat part's algorithm.
  std::string algorithm(OpKind op, size_t bytes) const override;
  bool host_buffers() const override { return false; }

  int local_rank() const { return local_->rank(); }
  int local_size() const { return local_->size(); }
  int host_index() const { return across_->rank(); }
  int host_count() const { return across_->size(); }
  // Whether an allreduce of `bytes` of `dtype` with `op` takes the hierarchy.
  bool takes_hierarchy(size_t bytes, DataType dtype) const;
  // The pinned buffer's size now, and how many times it was allocated.
  size_t staging_capacity() const { return capacity_; }
  int staging_allocations() const { return allocations_; }

 protected:
  void do_allreduce(const AllreduceOptions& o) override;
  void do_broadcast(const BroadcastOptions& o) override;
  void do_allgatherv(const AllgathervOptions& o) override;
  void do_reduce_scatter(const ReduceScatterOptions& o) override;
  void do_reduce_scatter_v(const ReduceScatterOptions& o) override;  // the flat communicator's
  void do_send(const SendOptions& o) override;
  void do_recv(const RecvOptions& o) override;
  void do_alltoall(const AlltoallOptions& o) override;
  void do_barrier(const BarrierOptions& o) override;

 private:
  class Op;  // one operation's deadline, steps and error naming (.cc)

  void hierarchical_allreduce(const AllreduceOptions& o);
  template <typename Fn>
  void flat_op(Fn&& fn);        // the latch around an operation of the flat part
  char* staging(size_t bytes);  // grown to at least double when short

  std::unique_ptr<Communicator> local_;
  std::unique_ptr<Communicator> across_;
  std::unique_ptr<Communicator> flat_;
  std::unique_ptr<DeviceMemory> memory_;
  size_t flat_up_to_bytes_;
  std::vector<int> local_world_ranks_;
  std::string name_;
  char* staging_ = nullptr;
  size_t capacity_ = 0;
  int allocations_ = 0;
  FailureLatch latch_;
};

}  // namespace hpct::comm
