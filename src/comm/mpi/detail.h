// What the MPI backend's files share (communicator.cc and detail.cc): the
// worker thread's state and loop, MPI's start and stop on it, and MPI's
// return codes, types and ops in our terms. Private to src/comm/mpi/.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "comm/mpi/communicator.h"

namespace hpct::comm {

// The handoff state between callers and the worker thread (protocol in the
// header). Shared by the communicator and the worker thread, so a worker
// detached while stuck in MPI keeps it alive.
struct MpiCommunicator::Worker {
  std::mutex mu;
  std::condition_variable wake;  // a job was posted, or stop
  std::condition_variable done;  // finished moved
  std::function<void()> job;     // guarded by mu; empty when none is waiting
  std::uint64_t posted = 0;      // guarded by mu; tickets handed out
  std::uint64_t finished = 0;    // guarded by mu; last ticket the worker completed
  std::exception_ptr error;      // guarded by mu; the error of ticket `finished`
  bool stop = false;             // guarded by mu
  std::thread thread;            // joined or detached by the communicator

  // Written by the start-up job, then only read (publication: the mutex above).
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Op ops16[2][5] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                        {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};
  int rank = 0;
  int size = 1;
  int tag_ub = 32767;
  bool started_mpi = false;
  bool set_yield = false;
  std::string library_version;
};

namespace mpi_detail {

// Collectives of at most this many bytes (the engine's negotiation, metrics,
// barriers) wait for their peers politely (wait_politely); larger ones block
// in MPI, which moves data fastest once every rank is there.
constexpr size_t kPoliteBytes = 64 << 10;

// The worker thread: runs each posted job, until stop.
void worker_loop(std::shared_ptr<MpiCommunicator::Worker> w);

// Turns an MPI return code into an hpct::Error: "MPI_Allreduce: MPI_ERR_TRUNCATE: ...".
// The caller's run() prefixes the operation and rank.
void check_mpi(int rc, const char* call);

// Our element types as MPI datatypes (16-bit floats as 16-bit integers).
MPI_Datatype mpi_type(DataType t);

// MPI's op for (dtype, op): its own, or the worker's user-defined ops for
// 16-bit floats.
MPI_Op mpi_op(const MpiCommunicator::Worker& w, DataType t, ReduceOp op);

// Waits for a nonblocking collective without holding a core (detail.cc
// says how).
void wait_politely(MPI_Request& request, const char* call);

// Runs on the worker: starts MPI if nobody has, then makes our communicator.
void start_mpi(MpiCommunicator::Worker& w, bool yield_when_idle);

// Runs on the worker: undoes start_mpi. Best effort: reports the first error.
void stop_mpi(MpiCommunicator::Worker& w);

}  // namespace mpi_detail
}  // namespace hpct::comm
