// The NCCL backend of the Communicator: collectives and send/recv between
// GPUs, for buffers in CUDA device memory. One rank = one GPU; several ranks
// on one GPU cannot use NCCL (it refuses them): connect() says so and the
// host-staged path (comm/cuda/staged_communicator.h) serves them instead.
//
// One NCCL in the process: hpct_comm_nccl links the libnccl.so.2 of torch's
// wheel (site-packages/nvidia/nccl/lib, compiled against that wheel's
// nccl.h, not the CUDA toolkit's older copy), which is the library
// libtorch_cuda loads; both resolve to one copy by soname. connect() warns
// when the NCCL loaded at run time is not the version compiled against.
//
// Start-up (connect): the store half of the protocol in bootstrap.h (device
// identities, then rank 0's ncclGetUniqueId published under
// "nccl/<name>/unique_id"), then ncclCommInitRankConfig with blocking = 0:
// a non-blocking communicator, whose every call returns at once, so each
// wait in this file is a poll with a deadline, never a call that may hang.
//
// Streams and the two ways to run an operation:
//   - enqueue(options, ready, done): the engine's path. The communicator's
//     own stream (cudaStreamNonBlocking) waits on the `ready` event (the
//     gradients are computed), NCCL queues the operation on it, and `done`
//     is recorded after it: the caller's stream waits on `done`
//     (cudaStreamWaitEvent). The host waits for no GPU work; it only polls
//     until NCCL has queued the kernels (a non-blocking communicator may
//     return ncclInProgress, and CUDA calls on the stream must wait until it
//     has resolved: NCCL's documented rule), bounded by the timeout.
//     poll()/wait() then tell, without and with a bounded wait, whether the
//     operation is done.
//   - The blocking Communicator API (allreduce(comm, opts), ...): the same
//     enqueue, ordered after the work queued so far on the device's legacy
//     default stream (where the blocking API expects producers to have run
//     or been synchronized), then wait() with the operation's timeout.
//
// Bounded waits: wait() polls ncclCommGetAsyncError (a peer's failure, a
// network error) and cudaEventQuery on `done`, yielding then napping up to
// 1 ms between polls. When the timeout runs out it calls ncclCommAbort
// (which stops the kernels that wait for peers), marks the communicator
// broken (FailureLatch) and raises Timeout naming the operation, the bytes,
// the ranks and the device. NCCL's remote/system errors raise PeerFailure,
// its argument errors InvalidArgument; either kind of failure in an
// operation breaks the communicator, and every later call raises at once.
//
// Operations: allreduce (ncclAllReduce; avg is ncclAvg, integer averages
// truncate as the other backends'), broadcast, allgather (ncclAllGather) and
// allgatherv (one grouped ncclBroadcast per rank into its offset),
// reduce-scatter, alltoall (ncclSend/ncclRecv to every rank in one group),
// send/recv, barrier (a one-element allreduce of a device scratch value).
// int16 has no NCCL type: InvalidArgument. Tags are ignored (NCCL orders
// operations per communicator).
//
// Threads: as Communicator: one operation (enqueue, wait) at a time;
// separate communicators (one per GPU, each on its own thread) may run in
// parallel. Each call makes the communicator's device current and restores
// the caller's afterwards.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/failure_latch.h"
#include "core/clock.h"
#include "core/log.h"
#include "store/store.h"

// CUDA's and NCCL's handle types, declared so this header needs neither
// header: cudaStream_t is CUstream_st*, cudaEvent_t CUevent_st*, ncclComm_t
// ncclComm*.
struct CUstream_st;
struct CUevent_st;
struct ncclComm;

namespace hpct::comm {

struct NcclOptions {
  int rank = 0;
  int size = 1;
  std::shared_ptr<store::Store> store;  // shared by all ranks of this communicator
  int device = 0;                       // this rank's CUDA device index
  // Scopes the store keys ("nccl/<name>/..."): a new name, or a fresh store
  // namespace, for each communicator built on one store.
  std::string name = "world";
  Millis timeout{300000};  // default for operations and for start-up (HPCT_TIMEOUT_S)
  Logger logger;
  // Tests: this rank's host for the shared-GPU check (0: the real one,
  // comm/shm_allreduce.h host_identity()).
  std::int64_t host_identity = 0;
};

// An operation enqueued on the communicator's stream: `done` is recorded
// after it. The description is for errors.
struct NcclWork {
  CUevent_st* done = nullptr;
  const char* op = "";
  size_t bytes = 0;
  int peer = -1;  // send/recv: the other rank
};

class NcclCommunicator final : public Communicator {
 public:
  // Blocks (bounded by options.timeout) until NCCL's communicator is up on
  // every rank. InvalidArgument for bad options, a device index this process
  // does not see, or two ranks on one GPU (naming them); Timeout naming what
  // was awaited (a rank's store key, NCCL's init); Io for CUDA errors.
  static std::unique_ptr<NcclCommunicator> connect(const NcclOptions& options);

  // Finalizes and destroys NCCL's communicator (bounded by the default
  // timeout; aborted when that runs out or after a failure), then the stream
  // and events. Never throws.
  ~NcclCommunicator() override;

  const char* backend_name() const override { return "nccl"; }
  std::string algorithm(OpKind op, size_t bytes) const override;  // "nccl"
  bool host_buffers() const override { return false; }

  int device() const { return device_; }
  CUstream_st* stream() const { return stream_; }
  // The NCCL loaded at run time, "2.30.7".
  const std::string& nccl_version() const { return version_; }

  // The engine's asynchronous path (file comment). `ready`: null, or an
  // event the communicator's stream waits for first; `done`: the caller's
  // event (created on this device), recorded after the operation. Options
  // are checked as the blocking functions check them; their timeout (0: the
  // default) bounds only the wait for NCCL to queue the operation. Returns
  // the work to poll or wait for.
  NcclWork enqueue(const AllreduceOptions& o, CUevent_st* ready, CUevent_st* done);
  NcclWork enqueue(const BroadcastOptions& o, CUevent_st* ready, CUevent_st* done);
  NcclWork enqueue(const AllgathervOptions& o, CUevent_st* ready, CUevent_st* done);
  NcclWork enqueue(const ReduceScatterOptions& o, CUevent_st* ready, CUevent_st* done);
  NcclWork enqueue(const AlltoallOptions& o, CUevent_st* ready, CUevent_st* done);
  NcclWork enqueue(const SendOptions& o, CUevent_st* ready, CUevent_st* done);
  NcclWork enqueue(const RecvOptions& o, CUevent_st* ready, CUevent_st* done);

  // True when the work is done; false while it runs. Raises (and breaks the
  // communicator) when NCCL reports an asynchronous error. Never blocks.
  bool poll(const NcclWork& work);
  // Blocks until the work is done; after `timeout` aborts NCCL's
  // communicator and raises Timeout (file comment).
  void wait(const NcclWork& work, Millis timeout);

 protected:
  void do_allreduce(const AllreduceOptions& o) override;
  void do_broadcast(const BroadcastOptions& o) override;
  void do_allgatherv(const AllgathervOptions& o) override;
  void do_reduce_scatter(const ReduceScatterOptions& o) override;
  void do_reduce_scatter_v(const ReduceScatterOptions& o) override;  // grouped ncclReduce, one per rank
  void do_send(const SendOptions& o) override;
  void do_recv(const RecvOptions& o) override;
  void do_alltoall(const AlltoallOptions& o) override;
  void do_barrier(const BarrierOptions& o) override;

 private:
  explicit NcclCommunicator(const NcclOptions& options);
  void start();  // connect()'s work, on the new object

  // Issues an operation (file comment): the latch check, the device, the
  // wait on `ready`, issue() (the NCCL calls), the bounded wait for NCCL to
  // queue them, `done` recorded.
  template <typename Issue>
  NcclWork launch(NcclWork work, Millis timeout, CUevent_st* ready, CUevent_st* done,
                  Issue&& issue);
  // The blocking form: ordered after the legacy default stream, then wait.
  template <typename Opts>
  void run_blocking(const Opts& o);
  // Polls until NCCL's state is no longer ncclInProgress or the deadline.
  void settle(const NcclWork& work, SteadyClock::time_point deadline, Millis timeout);
  // Raises NCCL's asynchronous error, if any, for `work`.
  void check_async(const NcclWork& work);
  // ncclCommAbort, latch, Timeout naming the work.
  [[noreturn]] void abort_timeout(const NcclWork& work, Millis timeout, const char* waiting_for);
  // Latches and raises an NCCL error (result code rc) for `work`.
  [[noreturn]] void fail_nccl(const NcclWork& work, int rc, const char* call);
  void abort_comm() noexcept;
  // "nccl allreduce of 4096 bytes on rank 1 of 2 (cuda:0, ranks 0..1)".
  std::string describe(const NcclWork& work) const;

  NcclOptions options_;
  Logger logger_;
  int device_;
  ncclComm* comm_ = nullptr;  // null after an abort
  CUstream_st* stream_ = nullptr;
  CUevent_st* ready_ = nullptr;  // the blocking API's: recorded on the legacy default stream
  CUevent_st* done_ = nullptr;   // the blocking API's completion
  void* scratch_ = nullptr;      // device memory for barrier()
  std::string version_;
  FailureLatch latch_;
};

}  // namespace hpct::comm
