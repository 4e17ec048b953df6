// Backend-independent correctness checks for a Communicator, for tests only.
//
// Each rank fills its inputs from a formula of (rank, index) chosen so that
// every result is exact in every dtype (sums of small integers, products of
// ones and twos), computes the expected result serially from the same
// formula, runs the operation and compares bit for bit. The same checks run
// on in-process Gloo ranks (threads) and on MPI ranks under mpirun, so both
// backends meet one definition of correct.
//
// Every rank of the communicator must call the same function with the same
// options at the same time (these are collectives).
#pragma once

#include <string>
#include <vector>

#include "comm/communicator.h"

namespace hpct::comm::testing {

struct CheckOptions {
  // Element counts: empty, one, odd, large.
  std::vector<size_t> counts = {0, 1, 7, 1u << 20};
  std::vector<DataType> dtypes = {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                  DataType::kBFloat16, DataType::kInt32,  DataType::kInt64,
                                  DataType::kUInt8,   DataType::kInt8,    DataType::kInt16};
  std::vector<ReduceOp> ops = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                               ReduceOp::kProduct};
};

// Each returns the mismatches found on this rank ("allreduce float16 sum
// count 7: element 3 is 12, expected 14"); empty means correct.
std::vector<std::string> check_allreduce(Communicator& comm, const CheckOptions& o);
std::vector<std::string> check_broadcast(Communicator& comm, const CheckOptions& o);
std::vector<std::string> check_allgather(Communicator& comm, const CheckOptions& o);
std::vector<std::string> check_allgatherv(Communicator& comm, const CheckOptions& o);
std::vector<std::string> check_reduce_scatter(Communicator& comm, const CheckOptions& o);
std::vector<std::string> check_send_recv(Communicator& comm, const CheckOptions& o);
// Reduce-scatter with per-rank counts on float32 values whose sums round:
// the result must have the bits of the sum in rank order (communicator.h).
std::vector<std::string> check_reduce_scatter_order(Communicator& comm);
// Not part of check_everything (the MPI and Gloo suites predate alltoall).
std::vector<std::string> check_alltoall(Communicator& comm, const CheckOptions& o);
// Ranks enter the barrier at staggered times; no rank may leave before the
// last one entered (CLOCK_MONOTONIC, so ranks must share a host).
std::vector<std::string> check_barrier(Communicator& comm);

// All of the above.
std::vector<std::string> check_everything(Communicator& comm, const CheckOptions& o);

}  // namespace hpct::comm::testing
