#include "comm/mpi/communicator.h"

#include "comm/mpi/detail.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <climits>
#include <cstdio>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "comm/reduce.h"
#include "comm/shm_allreduce.h"
#include "core/env.h"
#include "core/error.h"

namespace hpct::comm {

using namespace mpi_detail;

MpiCommunicator::MpiCommunicator(const MpiOptions& options, std::shared_ptr<Worker> worker)
    : Communicator(options.default_timeout), logger_(options.logger), worker_(std::move(worker)) {}

std::unique_ptr<MpiCommunicator> MpiCommunicator::create(const MpiOptions& options) {
  if (options.default_timeout.count() <= 0) {
    throw_invalid_argument("MPI communicator: default timeout must be positive, got " +
                           std::to_string(options.default_timeout.count()) + " ms");
  }
  auto w = std::make_shared<Worker>();
  w->thread = std::thread(worker_loop, w);
  // From here the destructor owns the thread: it joins or detaches it even
  // when start-up fails below.
  std::unique_ptr<MpiCommunicator> c(new MpiCommunicator(options, w));
  const bool yield = options.yield_when_idle;
  c->run(
      "start", options.default_timeout,
      [] { return std::string("MPI_Init_thread and MPI_Comm_dup(MPI_COMM_WORLD)"); },
      [wp = w.get(), yield] { start_mpi(*wp, yield); });
  c->rank_ = w->rank;
  c->size_ = w->size;
  c->tag_ub_ = w->tag_ub;
  c->started_mpi_ = w->started_mpi;
  c->library_version_ = w->library_version;
  c->logger_ = c->logger_.with_rank(c->rank_);
  if (options.shm) {
    std::string why;
    c->shm_ = connect_shm(*c, options.shm_slot_bytes, &why);
    if (!c->shm_ && !why.empty() && why.rfind("the ranks span hosts", 0) != 0) {
      c->logger_.warn("comm", "shared-memory allreduce is off, allreduces use MPI_Allreduce: " + why);
    }
  }
  return c;
}

MpiCommunicator::~MpiCommunicator() {
  Worker& w = *worker_;
  auto idle = [&w] {
    std::lock_guard<std::mutex> lock(w.mu);
    return w.finished == w.posted;
  };
  // A shared-memory allreduce that failed left a peer stopped or dead;
  // MPI_Finalize would wait for it (it synchronizes with every rank).
  if (idle() && !shm_failed_) {
    try {
      // handoff, not run: a broken communicator with an idle worker still
      // finalizes, so the MPI job ends cleanly.
      handoff(
          "shutdown", default_timeout(),
          [] { return std::string("MPI_Comm_free and MPI_Finalize"); },
          [wp = worker_.get()] { stop_mpi(*wp); });
    } catch (const std::exception& e) {
      logger_.warn("comm", e.what());
    }
  }
  const bool stuck = !idle();
  if (shm_failed_ && !stuck) {
    logger_.warn("comm",
                 "skipping MPI_Finalize: a shared-memory allreduce failed, so a peer rank is "
                 "stopped or dead and MPI_Finalize would wait for it");
  }
  {
    std::lock_guard<std::mutex> lock(w.mu);
    w.stop = true;
  }
  w.wake.notify_one();
  if (stuck) {
    logger_.warn("comm",
                 "MPI worker thread is stuck in a timed-out MPI call; leaving it behind "
                 "without MPI_Finalize (an MPI job usually reports this rank as exited "
                 "without finalizing)");
    w.thread.detach();
  } else {
    w.thread.join();
  }
}

bool MpiCommunicator::uses_shm(size_t /*bytes*/) const { return shm_ != nullptr; }

std::string MpiCommunicator::algorithm(OpKind op, size_t bytes) const {
  switch (op) {
    case OpKind::kAllreduce:
      return uses_shm(bytes) ? "shm:reduce-scatter+allgather" : "mpi:MPI_Allreduce";
    case OpKind::kBroadcast:
      return "mpi:MPI_Bcast";
    case OpKind::kAllgather:  // comm::allgather: an allgatherv with equal counts
      return "mpi:MPI_Allgatherv";
    case OpKind::kAllgatherv:
      return "mpi:MPI_Allgatherv";
    case OpKind::kReduceScatter:
      return "mpi:MPI_Reduce_scatter_block";
    case OpKind::kBarrier:  // comm::barrier: a one-byte allreduce
      return algorithm(OpKind::kAllreduce, 1);
  }
  return "mpi";
}

std::string MpiCommunicator::where(const char* op) const {
  return std::string(op) + " on rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
         " (mpi)";
}

int MpiCommunicator::to_int(const char* op, const char* what, size_t count) const {
  if (count > static_cast<size_t>(INT_MAX)) {
    throw_invalid_argument(where(op) + ": " + what + " " + std::to_string(count) +
                           " does not fit MPI's int counts (at most " + std::to_string(INT_MAX) +
                           "); split the operation");
  }
  return static_cast<int>(count);
}

template <typename Describe, typename Job>
void MpiCommunicator::run(const char* op, Millis timeout, Describe&& describe, Job&& job) {
  latch_.throw_if_failed();
  handoff(op, timeout, std::forward<Describe>(describe), std::forward<Job>(job));
}

template <typename Describe, typename Job>
void MpiCommunicator::handoff(const char* op, Millis timeout, Describe&& waiting_for, Job&& job) {
  const Deadline deadline(timeout);
  Worker& w = *worker_;
  std::unique_lock<std::mutex> lock(w.mu);
  w.job = std::forward<Job>(job);
  w.error = nullptr;
  const std::uint64_t ticket = ++w.posted;
  lock.unlock();  // so the worker does not wake into a held lock
  w.wake.notify_one();
  lock.lock();
  if (!w.done.wait_until(lock, deadline.end(), [&] { return w.finished >= ticket; })) {
    lock.unlock();
    latch_.fail(Error(ErrorCode::kTimeout,
                      where(op) + ": timed out after " + std::to_string(deadline.budget().count()) +
                          " ms waiting for " + waiting_for() +
                          " to complete; a peer rank is stopped, dead or in another "
                          "operation. The communicator is broken"));
  }
  std::exception_ptr error = std::exchange(w.error, nullptr);
  lock.unlock();
  if (!error) return;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    Error named(e.code(), where(op) + ": " + e.what());
    // Bad arguments and a mismatched receive leave MPI's state intact; any
    // other MPI failure leaves it unknown.
    if (e.code() == ErrorCode::kInvalidArgument || e.code() == ErrorCode::kMismatch) throw named;
    latch_.fail(named);
  }
}

void MpiCommunicator::do_allreduce(const AllreduceOptions& o) {
  const int n = to_int("allreduce", "count", o.count);  // the same limit on both paths
  if (uses_shm(o.count * dtype_size(o.dtype))) {
    run_shm(o.timeout, [&](const Deadline& d) {
      shm_->allreduce(o.input == o.output ? nullptr : o.input, o.output, o.count, o.dtype, o.op, d);
    });
    return;
  }
  const void* in = o.input == o.output ? MPI_IN_PLACE : o.input;
  run(
      "allreduce", o.timeout,
      [&] {
        return "MPI_Allreduce of " + std::to_string(o.count) + " " + dtype_name(o.dtype) + " (" +
               reduce_op_name(o.op) + ")";
      },
      [in, out = o.output, n, dtype = o.dtype, op = o.op, t = mpi_type(o.dtype),
       mop = mpi_op(*worker_, o.dtype, o.op), comm = worker_->comm, size = size_,
       polite = o.count * dtype_size(o.dtype) <= kPoliteBytes] {
        if (polite) {
          MPI_Request request;
          check_mpi(MPI_Iallreduce(in, out, n, t, mop, comm, &request), "MPI_Iallreduce");
          wait_politely(request, "MPI_Iallreduce");
        } else {
          check_mpi(MPI_Allreduce(in, out, n, t, mop, comm), "MPI_Allreduce");
        }
        if (op == ReduceOp::kAvg) finish_average(out, static_cast<size_t>(n), dtype, size);
      });
}

bool MpiCommunicator::do_allreduce_segments(const AllreduceSegmentsOptions& o) {
  if (!shm_) return false;
  run_shm(o.timeout, [&](const Deadline& d) { shm_->allreduce(o.segments, o.dtype, o.op, d); });
  return true;
}

// The shared-memory path's one error rule: bad arguments are the caller's;
// any other failure (Timeout, PeerFailure) breaks the communicator, and a
// stopped or dead peer means MPI_Finalize must be skipped.
template <typename Fn>
void MpiCommunicator::run_shm(Millis timeout, Fn&& fn) {
  latch_.throw_if_failed();
  try {
    fn(Deadline(timeout));
  } catch (const Error& e) {
    Error named(e.code(), where("allreduce") + ": " + e.what());
    if (e.code() == ErrorCode::kInvalidArgument) throw named;
    shm_failed_ = true;
    latch_.fail(named);
  }
}

void MpiCommunicator::do_broadcast(const BroadcastOptions& o) {
  const int n = to_int("broadcast", "count", o.count);
  run(
      "broadcast", o.timeout,
      [&] {
        return "MPI_Bcast of " + std::to_string(o.count) + " " + dtype_name(o.dtype) +
               " from rank " + std::to_string(o.root);
      },
      [buf = o.buffer, n, t = mpi_type(o.dtype), root = o.root, comm = worker_->comm,
       polite = o.count * dtype_size(o.dtype) <= kPoliteBytes] {
        if (polite) {
          MPI_Request request;
          check_mpi(MPI_Ibcast(buf, n, t, root, comm, &request), "MPI_Ibcast");
          wait_politely(request, "MPI_Ibcast");
          return;
        }
        check_mpi(MPI_Bcast(buf, n, t, root, comm), "MPI_Bcast");
      });
}

void MpiCommunicator::do_allgatherv(const AllgathervOptions& o) {
  std::vector<int> counts(o.counts.size()), displs(o.counts.size());
  size_t total = 0;
  for (size_t q = 0; q < o.counts.size(); ++q) {
    const std::string what = "counts[" + std::to_string(q) + "]";
    counts[q] = to_int("allgatherv", what.c_str(), o.counts[q]);
    displs[q] = static_cast<int>(total);  // total <= INT_MAX, checked below
    total += o.counts[q];
    to_int("allgatherv", "the total count (the output's last displacement)", total);
  }
  const int mine = counts[static_cast<size_t>(rank_)];
  run(
      "allgatherv", o.timeout,
      [&] {
        return "MPI_Allgatherv of " + std::to_string(total) + " " + dtype_name(o.dtype) +
               " in all (" + std::to_string(mine) + " from this rank)";
      },
      [in = o.input, out = o.output, mine, counts = std::move(counts), displs = std::move(displs),
       t = mpi_type(o.dtype), comm = worker_->comm, polite = total * dtype_size(o.dtype) <= kPoliteBytes] {
        if (polite) {
          MPI_Request request;
          check_mpi(MPI_Iallgatherv(in, mine, t, out, counts.data(), displs.data(), t, comm, &request),
                    "MPI_Iallgatherv");
          wait_politely(request, "MPI_Iallgatherv");
          return;
        }
        check_mpi(MPI_Allgatherv(in, mine, t, out, counts.data(), displs.data(), t, comm),
                  "MPI_Allgatherv");
      });
}

void MpiCommunicator::do_reduce_scatter(const ReduceScatterOptions& o) {
  const int n = to_int("reduce_scatter", "count", o.count);
  // Libraries compute count * size internally, in int.
  to_int("reduce_scatter", "count * size (the input)", o.count * static_cast<size_t>(size_));
  run(
      "reduce_scatter", o.timeout,
      [&] {
        return "MPI_Reduce_scatter_block of " + std::to_string(o.count) + " " +
               dtype_name(o.dtype) + " per rank (" + reduce_op_name(o.op) + ")";
      },
      [in = o.input, out = o.output, n, dtype = o.dtype, op = o.op, t = mpi_type(o.dtype),
       mop = mpi_op(*worker_, o.dtype, o.op), comm = worker_->comm, size = size_] {
        check_mpi(MPI_Reduce_scatter_block(in, out, n, t, mop, comm), "MPI_Reduce_scatter_block");
        if (op == ReduceOp::kAvg) finish_average(out, static_cast<size_t>(n), dtype, size);
      });
}

void MpiCommunicator::do_reduce_scatter_v(const ReduceScatterOptions& o) {
  if (!uses_shm(0)) {
    Communicator::do_reduce_scatter_v(o);
    return;
  }
  size_t total = 0, before = 0;
  for (int p = 0; p < size_; ++p) {
    if (p < rank_) before += o.counts[static_cast<size_t>(p)];
    total += o.counts[static_cast<size_t>(p)];
  }
  to_int("reduce_scatter", "the sum of counts", total);
  const size_t es = dtype_size(o.dtype);
  std::vector<unsigned char> all(total * es);
  run_shm(o.timeout, [&](const Deadline& d) { shm_->allreduce(o.input, all.data(), total, o.dtype, o.op, d); });
  const size_t mine = o.counts[static_cast<size_t>(rank_)];
  if (mine > 0) std::memcpy(o.output, all.data() + before * es, mine * es);
}

void MpiCommunicator::do_send(const SendOptions& o) {
  const int n = to_int("send", "count", o.count);
  if (o.tag > static_cast<std::uint32_t>(tag_ub_)) {
    throw_invalid_argument(where("send") + ": tag " + std::to_string(o.tag) +
                           " is above this MPI's largest tag (MPI_TAG_UB " +
                           std::to_string(tag_ub_) + ")");
  }
  run(
      "send", o.timeout,
      [&] {
        return "MPI_Send of " + std::to_string(o.count) + " " + dtype_name(o.dtype) + " to rank " +
               std::to_string(o.peer) + " tag " + std::to_string(o.tag) + " (rank " +
               std::to_string(o.peer) + " to receive it)";
      },
      [data = o.data, n, t = mpi_type(o.dtype), peer = o.peer, tag = static_cast<int>(o.tag),
       comm = worker_->comm] { check_mpi(MPI_Send(data, n, t, peer, tag, comm), "MPI_Send"); });
}

void MpiCommunicator::do_recv(const RecvOptions& o) {
  const int n = to_int("recv", "count", o.count);
  if (o.tag > static_cast<std::uint32_t>(tag_ub_)) {
    throw_invalid_argument(where("recv") + ": tag " + std::to_string(o.tag) +
                           " is above this MPI's largest tag (MPI_TAG_UB " +
                           std::to_string(tag_ub_) + ")");
  }
  run(
      "recv", o.timeout,
      [&] {
        return "MPI_Recv of " + std::to_string(o.count) + " " + dtype_name(o.dtype) +
               " from rank " + std::to_string(o.peer) + " tag " + std::to_string(o.tag);
      },
      [data = o.data, n, dtype = o.dtype, t = mpi_type(o.dtype), peer = o.peer,
       tag = static_cast<int>(o.tag), comm = worker_->comm] {
        auto what = [&] {
          return " from rank " + std::to_string(peer) + " tag " + std::to_string(tag) +
                 ", expected " + std::to_string(n) + " " + dtype_name(dtype);
        };
        MPI_Status status;
        const int rc = MPI_Recv(data, n, t, peer, tag, comm, &status);
        int cls = MPI_SUCCESS;
        if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
        if (cls == MPI_ERR_TRUNCATE) {
          throw_mismatch("MPI_Recv: the message" + what() + " is longer (the sender sent more)");
        }
        check_mpi(rc, "MPI_Recv");
        int got = 0;
        check_mpi(MPI_Get_count(&status, t, &got), "MPI_Get_count");
        if (got != n) {
          const std::string got_text =
              got == MPI_UNDEFINED ? std::string("a partial element") : std::to_string(got);
          throw_mismatch("MPI_Recv: received " + got_text + what() + " (the sender sent fewer)");
        }
      });
}

}  // namespace hpct::comm
