// The MPI backend of the Communicator: every operation is one standard MPI
// call (MPI_Allreduce, MPI_Bcast, ...) on a private duplicate of
// MPI_COMM_WORLD, run by one worker thread so that a caller can stop waiting
// for it when its timeout runs out. Works with any MPI-3 library (Open MPI,
// MPICH); nothing here is specific to one of them except the yield knob below.
//
// One exception: when every rank runs on this host (same boot, network
// namespace and host name: connect_shm), allreduces of every size go through a shared-memory segment
// that the ranks map at start-up (comm/shm_allreduce.h, connect_shm), on the caller's
// thread, with no MPI call and no handoff: 80 MB in 8-13 ms vs 40-43 ms for
// MPI_Allreduce on a 2-core VM. HPCT_SHM=0 turns it off; a rank that cannot
// map the segment turns it off for all, with a warning naming why.
//
// Why a worker thread: a blocking MPI call cannot time out, and polling a
// non-blocking one (MPI_Test in a loop) either spins a core, which starves
// 2-core ranks, or sleeps, which adds latency. So the waiting moves to a
// condition variable that has a deadline. Large operations stay blocking MPI
// calls (fastest once every rank is there); small ones (up to 64 KiB: the
// engine's negotiation, metrics, barriers), which often wait for a rank that
// is still computing, are the non-blocking MPI_I* calls tested in a short
// spin and then between growing naps, so the worker does not spin a core
// for the length of a peer's backward pass (communicator.cc: wait_politely).
//
// Handoff protocol (Worker in communicator.cc; all fields under Worker::mu):
//   1. The caller checks the FailureLatch (a broken communicator fails at
//      once), packs the MPI call into a job that captures its arguments by
//      value (pointers, counts, handles; never the caller's stack), stores it
//      in Worker::job, bumps Worker::posted to ticket n, and signals
//      Worker::wake.
//   2. The worker, asleep on Worker::wake (it never polls), takes the job out,
//      drops the lock and runs the blocking MPI call at MPI's own speed.
//   3. When the call returns the worker stores its error (if any), sets
//      Worker::finished = n and signals Worker::done.
//   4. The caller waits on Worker::done until finished == n or the deadline.
//      Done: it rethrows the job's error or returns. Deadline: it raises
//      Timeout naming the operation, this rank and the MPI call it waited
//      for, and latches it; the communicator is broken from then on.
// Cost: two thread switches per operation, about 5 us (min; 7 us median) on
// a 2-core VM with 2 ranks: within 5% of a raw MPI_Allreduce from 1 MiB up
// (1 MiB takes ~105 us there), lost in the noise from 16 MiB.
// The worker is the only thread that calls MPI (MPI_Init_thread, every
// operation, MPI_Finalize), so the thread level MPI must provide is at most
// MPI_THREAD_SERIALIZED. The worker's state is shared-owned by the worker
// thread, so a worker left stuck in MPI never touches freed memory.
//
// After a Timeout: the worker may still be inside the MPI call and MPI may
// still write to that call's output buffer if the peer comes back. Keep the
// buffers of a timed-out call alive, or end the process (the usual answer to
// a Timeout; the CLI exits with code 124). The destructor then detaches the
// stuck worker and skips MPI_Comm_free and MPI_Finalize (they would block
// forever); under mpirun the job ends as "exited without calling finalize".
// It skips them as well after a failed shared-memory allreduce (a peer is
// stopped or dead, and MPI_Finalize synchronizes with every rank).
//
// Dead peers: MPI does not tell the other ranks that one died (no ULFM); the
// blocked call waits on. Under Open MPI's mpirun the job ends anyway: mpirun
// sees the dead rank, names it, SIGTERMs the others and SIGKILLs them after
// odls_base_sigkill_timeout (1 s by default). Elsewhere our Timeout is the
// bound.
//
// MPI start and stop: create() starts MPI (MPI_Init_thread asking for
// MPI_THREAD_SERIALIZED) when nobody has, and the destructor finalizes it
// again only in that case. When the program started MPI itself it must have
// asked for MPI_THREAD_SERIALIZED or better (our worker is not its main
// thread), and it must not call MPI while one of our operations runs. MPI
// cannot be started twice in one process: create() after MPI_Finalize raises
// InvalidArgument. Destroy the communicator that started MPI last.
//
// Blocking and threads: as for every Communicator (comm/communicator.h):
// each operation blocks its caller until it is done on this rank or timed
// out; one operation at a time; buffers are caller-owned. Collectives ignore
// the tag (MPI orders them per communicator); send/recv use it as the MPI tag.
// MPI counts are ints: an operation whose count (or, for allgatherv, total)
// does not fit in an int raises InvalidArgument before touching MPI.
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/failure_latch.h"
#include "comm/shm_allreduce.h"
#include "core/clock.h"
#include "core/log.h"

namespace hpct::comm {

struct MpiOptions {
  // Timeout of operations whose options leave it at 0, and of MPI start-up
  // and shutdown (HPCT_TIMEOUT_S).
  Millis default_timeout{300000};
  Logger logger;
  // Before starting MPI, set OMPI_MCA_mpi_yield_when_idle=1 unless the
  // variable is already set (HPCT_MPI_YIELD). Open MPI busy-polls while it
  // waits otherwise, which takes the core a 2-core rank computes on (+29% for
  // Horovod, shared/notes). Other MPI libraries ignore the variable. This is
  // the one place hpctrain writes the process environment: Open MPI reads its
  // parameters from there at MPI_Init and offers no API to set them.
  bool yield_when_idle = true;
  // When every rank is on this host, allreduces (every size) go through
  // shared memory (comm/shm_allreduce.h) instead of MPI_Allreduce: 3-5x
  // faster here (HPCT_SHM). Slot per rank, in bytes (HPCT_SHM_SLOT_BYTES).
  bool shm = true;
  std::size_t shm_slot_bytes = 4 << 20;
};

class MpiCommunicator final : public Communicator {
 public:
  // Starts the worker thread and, through it, MPI if needed; duplicates
  // MPI_COMM_WORLD with MPI_ERRORS_RETURN. Blocks until MPI is up (bounded by
  // default_timeout: Timeout if MPI_Init hangs). InvalidArgument when MPI was
  // already started below MPI_THREAD_SERIALIZED or was finalized; MPI errors
  // become hpct::Error with MPI's text. Not thread-safe against other threads
  // starting or using MPI.
  static std::unique_ptr<MpiCommunicator> create(const MpiOptions& options);

  // Frees the communicator and, if create() started MPI, finalizes it
  // (bounded by default_timeout). A worker stuck in a timed-out call is
  // detached instead (see the file comment). Never throws.
  ~MpiCommunicator() override;

  const char* backend_name() const override { return "mpi"; }
  // "mpi:MPI_Allreduce", ...: the MPI library picks the actual algorithm per
  // message size and cannot be asked which one it chose. Allreduces that go
  // through shared memory: "shm:reduce-scatter+allgather".
  std::string algorithm(OpKind op, size_t bytes) const override;

  // MPI_Get_library_version, e.g. "Open MPI v4.1.4, ...", first line only.
  const std::string& library_version() const { return library_version_; }
  // True when an allreduce of this many bytes goes through shared memory.
  bool uses_shm(size_t bytes) const;
  // True when create() started MPI (and the destructor will finalize it).
  bool started_mpi() const { return started_mpi_; }

  struct Worker;  // the handoff state, defined in communicator.cc

 protected:
  void do_allreduce(const AllreduceOptions& o) override;
  bool do_allreduce_segments(const AllreduceSegmentsOptions& o) override;
  void do_broadcast(const BroadcastOptions& o) override;
  void do_allgatherv(const AllgathervOptions& o) override;
  void do_reduce_scatter(const ReduceScatterOptions& o) override;
  // Per-rank counts: through shared memory when the allreduces take it (the
  // allreduce of a copy, this rank's block kept), else Communicator's
  // default over MPI_Send/MPI_Recv, not MPI_Reduce_scatter: the library
  // picks its own summation order, and every backend here sums in rank
  // order (communicator.h).
  void do_reduce_scatter_v(const ReduceScatterOptions& o) override;
  void do_send(const SendOptions& o) override;
  void do_recv(const RecvOptions& o) override;

 private:
  MpiCommunicator(const MpiOptions& options, std::shared_ptr<Worker> worker);

  // Runs job on the worker and waits for it until timeout (steps 1-4 above).
  // op and describe() (called only on a timeout) name the operation and the
  // MPI call in errors. run() fails at once on a broken communicator;
  // handoff() does not (for shutdown).
  template <typename Describe, typename Job>
  void run(const char* op, Millis timeout, Describe&& describe, Job&& job);
  template <typename Fn>
  void run_shm(Millis timeout, Fn&& fn);
  template <typename Describe, typename Job>
  void handoff(const char* op, Millis timeout, Describe&& describe, Job&& job);

  // "allreduce on rank 1 of 4 (mpi)", the prefix of every error message.
  std::string where(const char* op) const;
  // count as an MPI int; InvalidArgument naming op and what when it is larger.
  int to_int(const char* op, const char* what, size_t count) const;

  Logger logger_;
  std::shared_ptr<Worker> worker_;
  FailureLatch latch_;
  int tag_ub_ = 32767;  // MPI_TAG_UB of this MPI; the standard guarantees 32767
  bool started_mpi_ = false;
  bool shm_failed_ = false;  // a shared-memory allreduce timed out or lost a peer
  // Set by create() (connect_shm) when every rank is on this host; used on
  // the callers' threads, no MPI inside.
  std::unique_ptr<ShmAllreduce> shm_;
  std::string library_version_;
};

}  // namespace hpct::comm
