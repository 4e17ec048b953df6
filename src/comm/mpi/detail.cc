// The MPI backend's worker thread and its MPI calls (detail.h).
#include "comm/mpi/detail.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "comm/reduce.h"
#include "core/env.h"
#include "core/error.h"

namespace hpct::comm::mpi_detail {

constexpr const char* kYieldVariable = "OMPI_MCA_mpi_yield_when_idle";

void worker_loop(std::shared_ptr<MpiCommunicator::Worker> w) {
  std::unique_lock<std::mutex> lock(w->mu);
  for (;;) {
    w->wake.wait(lock, [&] { return static_cast<bool>(w->job) || w->stop; });
    if (!w->job) return;  // stop with nothing left to run
    std::function<void()> job = std::move(w->job);
    w->job = nullptr;
    lock.unlock();
    std::exception_ptr error;
    try {
      job();
    } catch (...) {
      error = std::current_exception();
    }
    job = nullptr;  // release the captures before reporting, outside the lock
    lock.lock();
    w->error = error;
    ++w->finished;
    // Notify after unlocking, so the caller does not wake into a held mutex
    // (one context switch less per operation). The caller may destroy the
    // communicator as soon as it sees `finished`; w lives on (shared).
    lock.unlock();
    w->done.notify_all();
    lock.lock();
  }
}

// Turns an MPI return code into an hpct::Error: "MPI_Allreduce: MPI_ERR_TRUNCATE: ...".
// The caller's run() prefixes the operation and rank.
void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  int cls = MPI_ERR_UNKNOWN;
  MPI_Error_class(rc, &cls);
  ErrorCode code = ErrorCode::kPeerFailure;  // what a failing transfer usually means
  switch (cls) {
    case MPI_ERR_TRUNCATE:
      code = ErrorCode::kMismatch;
      break;
    case MPI_ERR_ARG:
    case MPI_ERR_COUNT:
    case MPI_ERR_TYPE:
    case MPI_ERR_OP:
    case MPI_ERR_ROOT:
    case MPI_ERR_RANK:
    case MPI_ERR_TAG:
    case MPI_ERR_BUFFER:
      code = ErrorCode::kInvalidArgument;
      break;
    default:
      break;
  }
  throw Error(code, std::string(call) + " failed: " + std::string(text, len) + " (MPI error " +
                        std::to_string(rc) + ", class " + std::to_string(cls) + ")");
}

MPI_Datatype mpi_type(DataType t) {
  switch (t) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt16:
      return MPI_INT16_T;
    // MPI has no 16-bit floats: move them as 2-byte integers and reduce them
    // with our own ops (ops16), never with MPI's integer arithmetic.
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return MPI_UINT16_T;
  }
  return MPI_DATATYPE_NULL;
}

// The user-defined MPI ops for 16-bit floats. MPI passes no context to an op,
// so each (dtype, op) pair is its own instantiation instead of a lookup in
// some global table. MPI computes inout = in op inout; every op here commutes.
template <DataType D, ReduceOp Op>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_elements(inout, in, inout, static_cast<size_t>(*len), D, Op);
}

template <DataType D>
void create_ops16(MPI_Op (&ops)[5]) {
  MPI_User_function* fns[5] = {reduce16<D, ReduceOp::kSum>, reduce16<D, ReduceOp::kSum>,
                               reduce16<D, ReduceOp::kMin>, reduce16<D, ReduceOp::kMax>,
                               reduce16<D, ReduceOp::kProduct>};
  static_assert(static_cast<int>(ReduceOp::kSum) == 0 && static_cast<int>(ReduceOp::kAvg) == 1 &&
                    static_cast<int>(ReduceOp::kMin) == 2 &&
                    static_cast<int>(ReduceOp::kMax) == 3 &&
                    static_cast<int>(ReduceOp::kProduct) == 4,
                "fns is indexed by ReduceOp");
  for (int i = 0; i < 5; ++i)
    check_mpi(MPI_Op_create(fns[i], /*commute=*/1, &ops[i]), "MPI_Op_create");
}

MPI_Op mpi_op(const MpiCommunicator::Worker& w, DataType t, ReduceOp op) {
  if (t == DataType::kFloat16) return w.ops16[0][static_cast<int>(op)];
  if (t == DataType::kBFloat16) return w.ops16[1][static_cast<int>(op)];
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return MPI_SUM;  // then finish_average
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
  }
  return MPI_OP_NULL;
}

// Waits for a nonblocking collective without holding a core. A blocking MPI
// call polls for as long as a peer is late (OpenMPI's shared-memory
// transport spins, at best yielding), and a rank that waits in one for a
// slower rank's backward pass takes CPU from the compute threads of a host
// with as many ranks as cores. Here: MPI_Test in a short spin (the peers are
// usually there already), then between naps that grow to kPoliteNapMax (a
// rank napping finds the collective done at most that late, and the next
// collective starts that much skewed). The caller's deadline bounds the wait
// (handoff).
constexpr std::chrono::microseconds kPoliteSpin{50};
constexpr std::chrono::microseconds kPoliteNapMax{100};
void wait_politely(MPI_Request& request, const char* call) {
  using Clock = std::chrono::steady_clock;
  const auto spin_until = Clock::now() + kPoliteSpin;
  auto nap = std::chrono::microseconds(10);
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call);
    if (done) return;
    if (Clock::now() < spin_until) continue;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, kPoliteNapMax);
  }
}

const char* thread_level_name(int level) {
  if (level == MPI_THREAD_SINGLE) return "MPI_THREAD_SINGLE";
  if (level == MPI_THREAD_FUNNELED) return "MPI_THREAD_FUNNELED";
  if (level == MPI_THREAD_SERIALIZED) return "MPI_THREAD_SERIALIZED";
  if (level == MPI_THREAD_MULTIPLE) return "MPI_THREAD_MULTIPLE";
  return "an unknown thread level";
}

// Runs on the worker: starts MPI if nobody has, then makes our communicator.
void start_mpi(MpiCommunicator::Worker& w, bool yield_when_idle) {
  int initialized = 0, finalized = 0;
  check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
  check_mpi(MPI_Finalized(&finalized), "MPI_Finalized");
  if (finalized) {
    throw_invalid_argument("MPI was already finalized in this process and cannot be started again");
  }
  if (!initialized) {
    if (yield_when_idle && !ProcessEnv().get(kYieldVariable)) {
      // The one environment write in hpctrain (see MpiOptions::yield_when_idle).
      ::setenv(kYieldVariable, "1", /*overwrite=*/0);
      w.set_yield = true;
    }
    int provided = MPI_THREAD_SINGLE;
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided),
              "MPI_Init_thread");
    w.started_mpi = true;
    // Only this thread, the one that started MPI, ever calls it: FUNNELED is enough.
    if (provided < MPI_THREAD_FUNNELED) {
      throw_invalid_argument(std::string("MPI provides only ") + thread_level_name(provided) +
                             "; the MPI backend calls MPI from its worker thread and needs "
                             "MPI_THREAD_FUNNELED or better");
    }
  } else {
    int provided = MPI_THREAD_SINGLE;
    check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
    if (provided < MPI_THREAD_SERIALIZED) {
      throw_invalid_argument(
          std::string("MPI was started by the program with ") + thread_level_name(provided) +
          "; the MPI backend calls MPI from its own worker thread and needs MPI_THREAD_SERIALIZED "
          "or MPI_THREAD_MULTIPLE: start MPI with MPI_Init_thread(..., MPI_THREAD_SERIALIZED, "
          "&provided), or let hpctrain start it");
    }
  }
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &w.comm), "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(w.comm, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(w.comm, &w.rank), "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(w.comm, &w.size), "MPI_Comm_size");
  void* tag_ub = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found), "MPI_Comm_get_attr");
  if (found && tag_ub != nullptr) w.tag_ub = *static_cast<int*>(tag_ub);
  char version[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  check_mpi(MPI_Get_library_version(version, &len), "MPI_Get_library_version");
  w.library_version.assign(version, len);
  // First line only, without the trailing blanks some libraries pad it with.
  w.library_version.resize(
      std::min(w.library_version.find_first_of("\r\n"), w.library_version.size()));
  while (!w.library_version.empty() &&
         std::isspace(static_cast<unsigned char>(w.library_version.back()))) {
    w.library_version.pop_back();
  }
  create_ops16<DataType::kFloat16>(w.ops16[0]);
  create_ops16<DataType::kBFloat16>(w.ops16[1]);
}

// Runs on the worker: undoes start_mpi. Best effort: reports the first error.
void stop_mpi(MpiCommunicator::Worker& w) {
  int first_error = MPI_SUCCESS;
  const char* first_call = "";
  auto note = [&](int rc, const char* call) {
    if (rc != MPI_SUCCESS && first_error == MPI_SUCCESS) {
      first_error = rc;
      first_call = call;
    }
  };
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) {
    for (auto& row : w.ops16) {
      for (MPI_Op& op : row) {
        if (op != MPI_OP_NULL) note(MPI_Op_free(&op), "MPI_Op_free");
      }
    }
    if (w.comm != MPI_COMM_NULL) note(MPI_Comm_free(&w.comm), "MPI_Comm_free");
    if (w.started_mpi) note(MPI_Finalize(), "MPI_Finalize");
  }
  check_mpi(first_error, first_call);
}

}  // namespace hpct::comm::mpi_detail
