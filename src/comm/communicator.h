// The Communicator: collectives and point-to-point transfers between the
// ranks of a job, over a backend (comm/mpi/, comm/gloo/, comm/nccl/ for CUDA
// buffers, and comm/cuda/'s StagedCommunicator, which runs a host backend on
// CUDA buffers through pinned host copies).
//
// Buffers are host memory for the host backends and CUDA device memory for
// the device ones (host_buffers() says which); the free functions never touch
// a buffer's bytes themselves when it is device memory.
//
// One operation = an options struct + one free function (allreduce(comm,
// opts)), with the tag and timeout explicit. The free functions check the
// arguments (null buffers, counts, roots, dtype/op pairs) and resolve the
// timeout (0 = the communicator's default, HPCT_TIMEOUT_S), then call the
// backend.
//
// Blocking and threads: every operation blocks the calling thread until it is
// done on this rank. A Communicator is not thread-safe: one operation at a
// time, in the same order on every rank (the engine's background thread is
// its one user in training). Several Communicators (one per in-process rank)
// may run in parallel.
//
// Failure: no operation waits forever. When the time runs out the operation
// raises Timeout; when a peer's process dies (its connection closes) it
// raises PeerFailure naming the peer where the backend can tell. After either,
// the communicator is broken: every later operation raises the same error at
// once. Buffers are caller-owned and must stay valid until the call returns.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "comm/types.h"
#include "core/clock.h"

namespace hpct::comm {

struct AllreduceOptions {
  const void* input = nullptr;  // nullptr or == output: in place
  void* output = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::uint32_t tag = 0;
  Millis timeout{0};  // 0: the communicator's default
};

// One piece of a segmented allreduce: count elements at data.
struct BufferSegment {
  void* data = nullptr;
  size_t count = 0;
};

// In place over several buffers, as one allreduce of their concatenation
// (the engine's fused tensors), without packing them into one buffer first.
struct AllreduceSegmentsOptions {
  std::vector<BufferSegment> segments;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::uint32_t tag = 0;
  Millis timeout{0};
};

struct BroadcastOptions {
  void* buffer = nullptr;  // read on root, written elsewhere
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  int root = 0;
  std::uint32_t tag = 0;
  Millis timeout{0};
};

// Every rank contributes `count` elements; output holds count * size, rank r's
// block at r * count.
struct AllgatherOptions {
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kFloat32;
  std::uint32_t tag = 0;
  Millis timeout{0};
};

// Rank r contributes counts[r] elements; output holds sum(counts), in rank order.
struct AllgathervOptions {
  const void* input = nullptr;
  void* output = nullptr;
  std::vector<size_t> counts;  // one per rank, the same on every rank
  DataType dtype = DataType::kFloat32;
  std::uint32_t tag = 0;
  Millis timeout{0};
};

// input holds count * size elements; output receives the reduction of block
// `rank` (count elements).
//
// Per-rank counts (counts non-empty, one per rank, the same on every rank;
// count is then ignored): input holds sum(counts) elements, block p (counts[p]
// of them, possibly 0) at the sum of the counts before it; output receives
// the reduction of block `rank`. The host backends (Gloo, MPI, and those
// built on them) sum each element over the ranks in rank order,
// ((x0 + x1) + x2) + ..., the order of the shared-memory allreduce, and
// divide once for kAvg; NCCL sums in its own order. With equal counts
// instead, the order is the backend's (Gloo: a ring).
struct ReduceScatterOptions {
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;
  std::vector<size_t> counts;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  std::uint32_t tag = 0;
  Millis timeout{0};
};

// Every rank sends `count` elements to every rank, itself included: input
// holds count * size elements, block p (at p * count) going to rank p;
// output holds count * size, block p received from rank p. input and output
// must not overlap.
struct AlltoallOptions {
  const void* input = nullptr;
  void* output = nullptr;
  size_t count = 0;  // per rank, the same on every rank
  DataType dtype = DataType::kFloat32;
  std::uint32_t tag = 0;
  Millis timeout{0};
};

struct BarrierOptions {
  std::uint32_t tag = 0;
  Millis timeout{0};
};

struct SendOptions {
  const void* data = nullptr;
  size_t count = 0;
  DataType dtype = DataType::kUInt8;
  int peer = 0;
  std::uint32_t tag = 0;
  Millis timeout{0};
};

struct RecvOptions {
  void* data = nullptr;
  size_t count = 0;  // must equal the sender's count
  DataType dtype = DataType::kUInt8;
  int peer = 0;
  std::uint32_t tag = 0;
  Millis timeout{0};
};

enum class OpKind { kAllreduce, kBroadcast, kAllgather, kAllgatherv, kReduceScatter, kBarrier };

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual const char* backend_name() const = 0;  // "mpi", "gloo"
  // The algorithm the backend uses for this operation and message size, as
  // the benchmark reports it ("ring", "mpi-tuned", ...).
  virtual std::string algorithm(OpKind op, size_t bytes) const = 0;
  Millis default_timeout() const { return default_timeout_; }
  // True when buffers are host memory (mpi, gloo); false when they are CUDA
  // device memory (nccl, staged), which the free functions then never read
  // or copy themselves.
  virtual bool host_buffers() const { return true; }

  // Allreduces so far by the path that carried them: "shm", "direct",
  // "ring", "hierarchical" or "mpi" (the part of algorithm() before ':'),
  // for the metrics endpoint. A thread-safe copy.
  struct PathTotals {
    std::uint64_t calls = 0;
    std::uint64_t bytes = 0;
    double seconds = 0;
  };
  std::map<std::string, PathTotals> allreduce_paths() const;

 protected:
  // rank and size: where they are known before connecting; a backend that
  // learns them later sets rank_ and size_ before it returns the communicator.
  explicit Communicator(Millis default_timeout, int rank = 0, int size = 1)
      : rank_(rank), size_(size), default_timeout_(default_timeout) {}

  // Called with checked options and a resolved, non-zero timeout.
  virtual void do_allreduce(const AllreduceOptions& o) = 0;
  // False (nothing done) when the backend has no path that avoids packing;
  // the default. Backends with a shared-memory allreduce override it.
  virtual bool do_allreduce_segments(const AllreduceSegmentsOptions& /*o*/) { return false; }
  virtual void do_broadcast(const BroadcastOptions& o) = 0;
  virtual void do_allgatherv(const AllgathervOptions& o) = 0;
  virtual void do_reduce_scatter(const ReduceScatterOptions& o) = 0;
  // Per-rank counts (o.counts set). Default: every rank sends block p to
  // rank p over do_send/do_recv (each rank sends what it does not keep, as
  // the ring does) and reduces what it received in rank order. Host buffers
  // only: device backends override it.
  virtual void do_reduce_scatter_v(const ReduceScatterOptions& o);
  virtual void do_send(const SendOptions& o) = 0;
  virtual void do_recv(const RecvOptions& o) = 0;
  // Default: the own block copied, then size-1 exchanges over do_send and
  // do_recv (pairwise schedule, ordered so blocking sends cannot deadlock;
  // communicator.cc). Host buffers only: device backends override it.
  virtual void do_alltoall(const AlltoallOptions& o);
  // Default: a one-byte allreduce of a host byte. Device backends override it.
  virtual void do_barrier(const BarrierOptions& o);
  // Step k (1..size-1) of the pairwise schedule of do_alltoall and
  // do_reduce_scatter_v: send_bytes to rank+k, recv_bytes from rank-k, in
  // the order that cannot deadlock (communicator.cc); an empty side is
  // skipped (every rank knows the sizes).
  void exchange_step(int k, const void* send, size_t send_bytes, void* recv, size_t recv_bytes,
                     std::uint32_t tag, Millis timeout);

  int rank_;
  int size_;

 private:
  Millis default_timeout_;
  void record_allreduce(size_t bytes, SteadyClock::duration took);
  mutable std::mutex paths_mu_;
  std::map<std::string, PathTotals> paths_;  // GUARDED_BY(paths_mu_)

  friend void allreduce(Communicator&, const AllreduceOptions&);
  friend bool try_allreduce_segments(Communicator&, const AllreduceSegmentsOptions&);
  friend void broadcast(Communicator&, const BroadcastOptions&);
  friend void allgather(Communicator&, const AllgatherOptions&);
  friend void allgatherv(Communicator&, const AllgathervOptions&);
  friend void reduce_scatter(Communicator&, const ReduceScatterOptions&);
  friend void alltoall(Communicator&, const AlltoallOptions&);
  friend void barrier(Communicator&, const BarrierOptions&);
  friend void send(Communicator&, const SendOptions&);
  friend void recv(Communicator&, const RecvOptions&);
};

void allreduce(Communicator& comm, const AllreduceOptions& opts);
void broadcast(Communicator& comm, const BroadcastOptions& opts);
void allgather(Communicator& comm, const AllgatherOptions& opts);
void allgatherv(Communicator& comm, const AllgathervOptions& opts);
void reduce_scatter(Communicator& comm, const ReduceScatterOptions& opts);
void alltoall(Communicator& comm, const AlltoallOptions& opts);
void barrier(Communicator& comm, const BarrierOptions& opts = {});

// Every rank's `value`, in rank order (an allgather of one int64 each: pids,
// timestamps, host identities). Host communicators only (host_buffers()).
std::vector<std::int64_t> allgather_value(Communicator& comm, std::int64_t value);

// The allreduce of the segments' concatenation, in place, when the backend
// can do it without a packed copy (returns true); false, with nothing done,
// when it cannot: the caller packs the segments and calls allreduce(). Every
// rank gets the same answer from the same communicator.
bool try_allreduce_segments(Communicator& comm, const AllreduceSegmentsOptions& opts);
void send(Communicator& comm, const SendOptions& opts);
void recv(Communicator& comm, const RecvOptions& opts);

}  // namespace hpct::comm
