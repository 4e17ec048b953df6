#include "comm/nccl/communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "comm/cuda/cuda_check.h"
#include "comm/nccl/bootstrap.h"
#include "comm/shm_allreduce.h"
#include "core/error.h"

// Non-blocking communicators and ncclCommInitRankConfig came in NCCL 2.14.
// This file is compiled against the nccl.h of torch's wheel (CMakeLists.txt).
#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "hpct_comm_nccl needs NCCL 2.14 or newer (non-blocking communicators)"
#endif

namespace hpct::comm {
namespace {

ncclDataType_t nccl_type(DataType t, const std::string& where) {
  switch (t) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt16:
      break;
  }
  throw_invalid_argument(where + ": NCCL has no " + dtype_name(t) +
                         " type; convert the tensor to int32, or use the staged path "
                         "(comm/cuda/staged_communicator.h)");
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

ErrorCode code_of(ncclResult_t rc) {
  switch (rc) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return ErrorCode::kInvalidArgument;
    case ncclRemoteError:
    case ncclSystemError:
      return ErrorCode::kPeerFailure;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 24, 0)
    case ncclTimeout:
      return ErrorCode::kTimeout;
#endif
    default:
      return ErrorCode::kIo;
  }
}

// NCCL calls in one group: the group is closed even when a call in it fails.
template <typename Body>
ncclResult_t grouped(Body&& body) {
  ncclResult_t rc = ncclGroupStart();
  if (rc != ncclSuccess) return rc;
  const ncclResult_t inner = body();
  rc = ncclGroupEnd();
  return inner != ncclSuccess && inner != ncclInProgress ? inner : rc;
}

bool ok(ncclResult_t rc) { return rc == ncclSuccess || rc == ncclInProgress; }

std::string version_text(int code) {
  // NCCL_VERSION's encoding from 2.9 on: major * 10000 + minor * 100 + patch.
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

Millis at_least_1ms(SteadyClock::time_point deadline) {
  const auto rest = std::chrono::duration_cast<Millis>(deadline - SteadyClock::now());
  return std::max(rest, Millis(1));
}

}  // namespace

NcclCommunicator::NcclCommunicator(const NcclOptions& options)
    : Communicator(options.timeout, options.rank, options.size),
      options_(options),
      logger_(options.logger),
      device_(options.device) {}

std::unique_ptr<NcclCommunicator> NcclCommunicator::connect(const NcclOptions& options) {
  const std::string who = "NCCL communicator '" + options.name + "' rank " +
                          std::to_string(options.rank) + " of " + std::to_string(options.size);
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    throw_invalid_argument(who + ": rank must be in 0..size-1 and size at least 1");
  }
  if (options.size > 1 && !options.store) {
    throw_invalid_argument(who + ": needs a store shared by the ranks (NcclOptions::store)");
  }
  if (options.timeout.count() <= 0) {
    throw_invalid_argument(who + ": timeout must be positive, not " +
                           std::to_string(options.timeout.count()) + " ms");
  }
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(options));
  c->start();
  return c;
}

void NcclCommunicator::start() {
  const std::string who = "NCCL communicator '" + options_.name + "' rank " +
                          std::to_string(rank_) + " of " + std::to_string(size_);
  int count = 0;
  const cudaError_t found = cudaGetDeviceCount(&count);
  if (found != cudaSuccess) {
    throw_invalid_argument(who + ": no usable GPU (" + cudaGetErrorString(found) +
                           "); on a machine without one, use the gloo or mpi backend");
  }
  if (device_ < 0 || device_ >= count) {
    throw_invalid_argument(
        who + ": device " + std::to_string(device_) + " is not one of this process's " +
        std::to_string(count) +
        " GPUs (check CUDA_VISIBLE_DEVICES and the device = local rank mapping)");
  }
  const std::string where_dev = who + " on cuda:" + std::to_string(device_);
  cuda::DeviceGuard guard(device_, where_dev);
  cuda::check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), where_dev + ": stream");
  cuda::check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), where_dev + ": event");
  cuda::check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), where_dev + ": event");
  cuda::check(cudaMalloc(&scratch_, 16), where_dev + ": cudaMalloc of the barrier's scratch");

  int loaded = 0;
  if (ncclGetVersion(&loaded) == ncclSuccess) {
    version_ = version_text(loaded);
    if (loaded != NCCL_VERSION_CODE) {
      logger_.warn("comm", who + ": NCCL " + version_ +
                               " is loaded, hpctrain was compiled against " +
                               version_text(NCCL_VERSION_CODE) +
                               " (torch's wheel): a second NCCL in the process? check "
                               "LD_LIBRARY_PATH and `ldd` of the program");
    }
  }

  const auto deadline = SteadyClock::now() + options_.timeout;
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  if (size_ > 1) {
    // Step 1 (bootstrap.h): two ranks on one GPU fail here, named.
    char bus[64] = {};
    cuda::check(cudaDeviceGetPCIBusId(bus, sizeof bus, device_), where_dev + ": PCI bus id");
    const std::int64_t host =
        options_.host_identity != 0 ? options_.host_identity : host_identity();
    const auto ids =
        nccl::exchange_device_identities(*options_.store, options_.name, rank_, size_,
                                         std::to_string(host) + "/" + bus, at_least_1ms(deadline));
    const std::string shared = nccl::describe_shared_devices(ids);
    if (!shared.empty()) {
      throw_invalid_argument(who + ": " + shared +
                             "; NCCL cannot run two ranks on one GPU. Give each rank its own GPU "
                             "(device = local rank), or use the host-staged path "
                             "(comm/cuda/staged_communicator.h)");
    }
  }
  // Step 2.
  if (rank_ == 0) {
    const ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) {
      throw Error(code_of(rc), who + ": ncclGetUniqueId failed: " + ncclGetErrorString(rc) +
                                   " (NCCL_DEBUG=INFO says why; NCCL_SOCKET_IFNAME picks the "
                                   "interface it listens on)");
    }
    if (size_ > 1) {
      nccl::publish_unique_id(*options_.store, options_.name, std::string(id.internal, sizeof id));
    }
  } else {
    const std::string bytes = nccl::wait_unique_id(*options_.store, options_.name, rank_, sizeof id,
                                                   at_least_1ms(deadline));
    std::memcpy(id.internal, bytes.data(), sizeof id);
  }
  // Step 3: non-blocking init, then poll its state until it is up.
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  config.commName = options_.name.c_str();
  const ncclResult_t rc = ncclCommInitRankConfig(&comm_, size_, id, rank_, &config);
  NcclWork init;
  init.op = "init";
  if (!ok(rc)) fail_nccl(init, rc, "ncclCommInitRankConfig");
  settle(init, deadline, options_.timeout);
}

NcclCommunicator::~NcclCommunicator() {
  int previous = device_;
  const bool had_device = cudaGetDevice(&previous) == cudaSuccess;
  cudaSetDevice(device_);
  if (comm_ != nullptr) {
    bool finalized = false;
    if (!latch_.failed() && ok(ncclCommFinalize(comm_))) {
      // Finalize flushes queued work; a non-blocking communicator reports
      // its progress through the async state.
      const auto deadline = SteadyClock::now() + default_timeout();
      cuda::PollNap nap;
      ncclResult_t state = ncclInProgress;
      while (ncclCommGetAsyncError(comm_, &state) == ncclSuccess && state == ncclInProgress &&
             SteadyClock::now() < deadline) {
        nap();
      }
      finalized = state == ncclSuccess;
    }
    if (finalized) {
      ncclCommDestroy(comm_);
    } else {
      ncclCommAbort(comm_);
    }
    comm_ = nullptr;
  }
  // cudaFree waits for the device; after a failure the GPU may be stuck:
  // leak the 16 bytes instead.
  if (scratch_ != nullptr && !latch_.failed()) cudaFree(scratch_);
  if (done_ != nullptr) cudaEventDestroy(done_);
  if (ready_ != nullptr) cudaEventDestroy(ready_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
  if (had_device) cudaSetDevice(previous);
}

std::string NcclCommunicator::algorithm(OpKind /*op*/, size_t /*bytes*/) const {
  // NCCL picks ring, tree, NVLS or CollNet per call and size and does not
  // say which (NCCL_ALGO forces one).
  return "nccl";
}

std::string NcclCommunicator::describe(const NcclWork& work) const {
  std::string s = "nccl " + std::string(work.op) + " of " + std::to_string(work.bytes) +
                  " bytes on rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                  " (cuda:" + std::to_string(device_) + ", communicator '" + options_.name + "'";
  if (work.peer >= 0) {
    s += ", with rank " + std::to_string(work.peer) + ")";
  } else {
    s += ", ranks 0.." + std::to_string(size_ - 1) + ")";
  }
  return s;
}

void NcclCommunicator::abort_comm() noexcept {
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
}

void NcclCommunicator::fail_nccl(const NcclWork& work, int rc_int, const char* call) {
  const auto rc = static_cast<ncclResult_t>(rc_int);
  const char* last = ncclGetLastError(comm_);
  std::string m = describe(work) + ": " + call + " failed: " + ncclGetErrorString(rc);
  if (last != nullptr && *last != '\0') m += " (" + std::string(last) + ")";
  const ErrorCode code = code_of(rc);
  if (code == ErrorCode::kPeerFailure) {
    m += "; a peer rank died or lost its connection (NCCL_DEBUG=WARN on every rank names it)";
  }
  abort_comm();
  latch_.fail(Error(code, m));
}

void NcclCommunicator::abort_timeout(const NcclWork& work, Millis timeout,
                                     const char* waiting_for) {
  abort_comm();
  std::string m = describe(work) + ": timed out after " + std::to_string(timeout.count()) +
                  " ms waiting for " + waiting_for +
                  "; aborted the NCCL communicator. A rank that never joined, a dead or stopped "
                  "rank, or a network NCCL cannot use (NCCL_SOCKET_IFNAME, NCCL_DEBUG=INFO) "
                  "makes the others wait";
  latch_.fail(Error(ErrorCode::kTimeout, m));
}

void NcclCommunicator::check_async(const NcclWork& work) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
  if (rc != ncclSuccess) fail_nccl(work, rc, "ncclCommGetAsyncError");
  if (!ok(state)) fail_nccl(work, state, "the NCCL operation");
}

void NcclCommunicator::settle(const NcclWork& work, SteadyClock::time_point deadline,
                              Millis timeout) {
  cuda::PollNap nap;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
    if (rc != ncclSuccess) fail_nccl(work, rc, "ncclCommGetAsyncError");
    if (state == ncclSuccess) return;
    if (state != ncclInProgress) fail_nccl(work, state, "the NCCL call");
    if (SteadyClock::now() >= deadline) {
      abort_timeout(work, timeout,
                    work.op == std::string("init") ? "NCCL's init on every rank"
                                                   : "NCCL to queue the operation");
    }
    nap();
  }
}

template <typename Issue>
NcclWork NcclCommunicator::launch(NcclWork work, Millis timeout, CUevent_st* ready,
                                  CUevent_st* done, Issue&& issue) {
  latch_.throw_if_failed();
  if (timeout.count() < 0) throw_invalid_argument(describe(work) + ": negative timeout");
  if (timeout.count() == 0) timeout = default_timeout();
  if (done == nullptr) throw_invalid_argument(describe(work) + ": no completion event");
  work.done = done;
  const auto deadline = SteadyClock::now() + timeout;
  cuda::DeviceGuard guard(device_, describe(work));
  if (ready != nullptr) {
    const cudaError_t rc = cudaStreamWaitEvent(stream_, ready, 0);
    if (rc != cudaSuccess) {
      latch_.fail(Error(ErrorCode::kIo, describe(work) +
                                            ": cudaStreamWaitEvent on the ready "
                                            "event: " +
                                            cudaGetErrorString(rc)));
    }
  }
  const ncclResult_t rc = issue();
  if (!ok(rc)) fail_nccl(work, rc, "issuing the operation");
  settle(work, deadline, timeout);
  const cudaError_t recorded = cudaEventRecord(done, stream_);
  if (recorded != cudaSuccess) {
    latch_.fail(Error(ErrorCode::kIo, describe(work) +
                                          ": cudaEventRecord of the completion "
                                          "event: " +
                                          cudaGetErrorString(recorded)));
  }
  return work;
}

bool NcclCommunicator::poll(const NcclWork& work) {
  latch_.throw_if_failed();
  check_async(work);
  const cudaError_t rc = cudaEventQuery(work.done);
  if (rc == cudaSuccess) return true;
  if (rc != cudaErrorNotReady) {
    abort_comm();
    latch_.fail(Error(ErrorCode::kIo, describe(work) + ": " + cudaGetErrorString(rc)));
  }
  return false;
}

void NcclCommunicator::wait(const NcclWork& work, Millis timeout) {
  if (timeout.count() <= 0) timeout = default_timeout();
  const auto deadline = SteadyClock::now() + timeout;
  cuda::PollNap nap;
  while (!poll(work)) {
    if (SteadyClock::now() >= deadline) {
      abort_timeout(work, timeout, "the operation to finish on the GPU");
    }
    nap();
  }
}

// --- the operations ------------------------------------------------------

NcclWork NcclCommunicator::enqueue(const AllreduceOptions& o, CUevent_st* ready, CUevent_st* done) {
  NcclWork w;
  w.op = "allreduce";
  w.bytes = o.count * dtype_size(o.dtype);
  if (o.output == nullptr && o.count > 0) throw_invalid_argument(describe(w) + ": output is null");
  const ncclDataType_t t = nccl_type(o.dtype, describe(w));
  const void* in = o.input != nullptr ? o.input : o.output;
  return launch(w, o.timeout, ready, done, [&] {
    if (o.count == 0) return ncclSuccess;
    return ncclAllReduce(in, o.output, o.count, t, nccl_op(o.op), comm_, stream_);
  });
}

NcclWork NcclCommunicator::enqueue(const BroadcastOptions& o, CUevent_st* ready, CUevent_st* done) {
  NcclWork w;
  w.op = "broadcast";
  w.bytes = o.count * dtype_size(o.dtype);
  if (o.buffer == nullptr && o.count > 0) throw_invalid_argument(describe(w) + ": buffer is null");
  if (o.root < 0 || o.root >= size_) {
    throw_invalid_argument(describe(w) + ": root " + std::to_string(o.root) + " is not a rank");
  }
  const ncclDataType_t t = nccl_type(o.dtype, describe(w));
  return launch(w, o.timeout, ready, done, [&] {
    if (o.count == 0) return ncclSuccess;
    return ncclBroadcast(o.buffer, o.buffer, o.count, t, o.root, comm_, stream_);
  });
}

NcclWork NcclCommunicator::enqueue(const AllgathervOptions& o, CUevent_st* ready,
                                   CUevent_st* done) {
  NcclWork w;
  w.op = "allgather";
  if (o.counts.size() != static_cast<size_t>(size_)) {
    throw_invalid_argument(describe(w) + ": counts has " + std::to_string(o.counts.size()) +
                           " entries, need one per rank");
  }
  size_t total = 0;
  bool equal = true;
  for (size_t c : o.counts) {
    total += c;
    equal = equal && c == o.counts[0];
  }
  const size_t esize = dtype_size(o.dtype);
  w.bytes = total * esize;
  if (total > 0 && (o.output == nullptr || (o.input == nullptr && o.counts[rank_] > 0))) {
    throw_invalid_argument(describe(w) + ": input or output is null");
  }
  const ncclDataType_t t = nccl_type(o.dtype, describe(w));
  return launch(w, o.timeout, ready, done, [&] {
    if (total == 0) return ncclSuccess;
    if (equal) return ncclAllGather(o.input, o.output, o.counts[0], t, comm_, stream_);
    // Uneven counts: rank p's block is a broadcast from p into its offset.
    return grouped([&] {
      size_t at = 0;
      for (int p = 0; p < size_; ++p) {
        char* block = static_cast<char*>(o.output) + at * esize;
        at += o.counts[p];
        if (o.counts[p] == 0) continue;
        const void* send = p == rank_ ? o.input : block;
        const ncclResult_t rc = ncclBroadcast(send, block, o.counts[p], t, p, comm_, stream_);
        if (!ok(rc)) return rc;
      }
      return ncclSuccess;
    });
  });
}

NcclWork NcclCommunicator::enqueue(const ReduceScatterOptions& o, CUevent_st* ready,
                                   CUevent_st* done) {
  NcclWork w;
  w.op = "reduce_scatter";
  w.bytes = o.count * dtype_size(o.dtype) * static_cast<size_t>(size_);
  if (!o.counts.empty()) {
    // Per-rank counts: one ncclReduce per rank, rooted there, in one group
    // (NCCL's reduce-scatter takes equal counts only). NCCL picks its own
    // summation order, not the host backends' rank order.
    size_t total = 0;
    for (size_t c : o.counts) total += c;
    w.bytes = total * dtype_size(o.dtype);
    const ncclDataType_t t = nccl_type(o.dtype, describe(w));
    return launch(w, o.timeout, ready, done, [&] {
      return grouped([&] {
        size_t at = 0;
        const size_t es = dtype_size(o.dtype);
        for (int p = 0; p < size_; ++p) {
          const size_t n = o.counts[static_cast<size_t>(p)];
          if (n > 0) {
            const ncclResult_t rc = ncclReduce(static_cast<const char*>(o.input) + at * es,
                                               p == rank_ ? o.output : nullptr, n, t, nccl_op(o.op), p, comm_, stream_);
            if (!ok(rc)) return rc;
          }
          at += n;
        }
        return ncclSuccess;
      });
    });
  }
  if ((o.input == nullptr || o.output == nullptr) && o.count > 0) {
    throw_invalid_argument(describe(w) + ": input or output is null");
  }
  const ncclDataType_t t = nccl_type(o.dtype, describe(w));
  return launch(w, o.timeout, ready, done, [&] {
    if (o.count == 0) return ncclSuccess;
    return ncclReduceScatter(o.input, o.output, o.count, t, nccl_op(o.op), comm_, stream_);
  });
}

NcclWork NcclCommunicator::enqueue(const AlltoallOptions& o, CUevent_st* ready, CUevent_st* done) {
  NcclWork w;
  w.op = "alltoall";
  const size_t block = o.count * dtype_size(o.dtype);
  w.bytes = block * static_cast<size_t>(size_);
  if ((o.input == nullptr || o.output == nullptr) && o.count > 0) {
    throw_invalid_argument(describe(w) + ": input or output is null");
  }
  const ncclDataType_t t = nccl_type(o.dtype, describe(w));
  return launch(w, o.timeout, ready, done, [&] {
    if (o.count == 0) return ncclSuccess;
    // Every send and receive in one group: NCCL runs them concurrently, so
    // no order between ranks can deadlock.
    return grouped([&] {
      for (int p = 0; p < size_; ++p) {
        const char* in = static_cast<const char*>(o.input) + p * block;
        char* out = static_cast<char*>(o.output) + p * block;
        ncclResult_t rc = ncclSend(in, o.count, t, p, comm_, stream_);
        if (!ok(rc)) return rc;
        rc = ncclRecv(out, o.count, t, p, comm_, stream_);
        if (!ok(rc)) return rc;
      }
      return ncclSuccess;
    });
  });
}

NcclWork NcclCommunicator::enqueue(const SendOptions& o, CUevent_st* ready, CUevent_st* done) {
  NcclWork w;
  w.op = "send";
  w.bytes = o.count * dtype_size(o.dtype);
  w.peer = o.peer;
  if (o.peer < 0 || o.peer >= size_ || o.peer == rank_) {
    throw_invalid_argument(describe(w) + ": peer must be another rank of this communicator");
  }
  if (o.data == nullptr && o.count > 0) throw_invalid_argument(describe(w) + ": data is null");
  const ncclDataType_t t = nccl_type(o.dtype, describe(w));
  return launch(w, o.timeout, ready, done, [&] {
    if (o.count == 0) return ncclSuccess;
    return ncclSend(o.data, o.count, t, o.peer, comm_, stream_);
  });
}

NcclWork NcclCommunicator::enqueue(const RecvOptions& o, CUevent_st* ready, CUevent_st* done) {
  NcclWork w;
  w.op = "recv";
  w.bytes = o.count * dtype_size(o.dtype);
  w.peer = o.peer;
  if (o.peer < 0 || o.peer >= size_ || o.peer == rank_) {
    throw_invalid_argument(describe(w) + ": peer must be another rank of this communicator");
  }
  if (o.data == nullptr && o.count > 0) throw_invalid_argument(describe(w) + ": data is null");
  const ncclDataType_t t = nccl_type(o.dtype, describe(w));
  return launch(w, o.timeout, ready, done, [&] {
    if (o.count == 0) return ncclSuccess;
    return ncclRecv(o.data, o.count, t, o.peer, comm_, stream_);
  });
}

template <typename Opts>
void NcclCommunicator::run_blocking(const Opts& o) {
  latch_.throw_if_failed();
  const auto start = SteadyClock::now();
  {
    cuda::DeviceGuard guard(device_, "nccl");
    // The blocking API's buffers were produced on (or synchronized with) the
    // legacy default stream: our stream waits for it on the device.
    cuda::check(cudaEventRecord(ready_, cudaStreamLegacy), "nccl: cudaEventRecord");
  }
  const NcclWork w = enqueue(o, ready_, done_);
  const auto spent = std::chrono::duration_cast<Millis>(SteadyClock::now() - start);
  wait(w, std::max(o.timeout - spent, Millis(1)));
}

void NcclCommunicator::do_allreduce(const AllreduceOptions& o) { run_blocking(o); }
void NcclCommunicator::do_broadcast(const BroadcastOptions& o) { run_blocking(o); }
void NcclCommunicator::do_allgatherv(const AllgathervOptions& o) { run_blocking(o); }
void NcclCommunicator::do_reduce_scatter(const ReduceScatterOptions& o) { run_blocking(o); }
void NcclCommunicator::do_reduce_scatter_v(const ReduceScatterOptions& o) { run_blocking(o); }
void NcclCommunicator::do_send(const SendOptions& o) { run_blocking(o); }
void NcclCommunicator::do_recv(const RecvOptions& o) { run_blocking(o); }
void NcclCommunicator::do_alltoall(const AlltoallOptions& o) { run_blocking(o); }

void NcclCommunicator::do_barrier(const BarrierOptions& o) {
  AllreduceOptions a;
  a.output = scratch_;
  a.count = 1;
  a.dtype = DataType::kFloat32;
  a.tag = o.tag;
  a.timeout = o.timeout;
  run_blocking(a);
}

}  // namespace hpct::comm
