// `hpctrain bench comm`: how long each collective takes through our
// Communicator, next to the raw library call on the same buffer in the same
// run, so the overhead of our layer is a ratio rather than a guess across
// noisy runs.
//
// Every rank of the communicator calls run_comm_bench with the same options;
// rank 0 emits one JSON object per (op, size).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "comm/communicator.h"

namespace hpct::bench {

// The backend library's own allreduce (float32 sum, in place), called on the
// same buffer as ours. Implemented next to each backend's bench glue.
class RawAllreduce {
 public:
  virtual ~RawAllreduce() = default;
  virtual std::string name() const = 0;  // "MPI_Allreduce", "gloo::allreduce"
  virtual void run(float* data, size_t count) = 0;
};

struct CommBenchOptions {
  std::vector<std::uint64_t> sizes;                     // bytes per rank
  std::vector<comm::OpKind> ops = {comm::OpKind::kAllreduce};
  int iters = 0;                                        // 0: about budget_s per size
  double budget_s = 0.4;
  int warmup = 2;
  // Each timed call starts from an input this rank has just written, as a
  // training step's gradients are (the write is not timed), and our
  // allreduce's result is checked. Off: each call takes the bytes the
  // previous call left, in whichever core's cache it left them.
  bool fresh_input = true;
  // The check: from check_min_bytes up, an allreduce through shared memory
  // ("shm:" algorithms) must take at most check_max_ratio times the raw
  // call's time (the median of paired ratios, same run). Those lines carry
  // "check": "ok" or "slower than <raw call>".
  std::uint64_t check_min_bytes = 1 << 20;
  double check_max_ratio = 1.0;
};

// Parses "allreduce,broadcast,allgather,reduce_scatter,barrier" (or "all").
std::vector<comm::OpKind> parse_ops(const std::string& text);
const char* op_name(comm::OpKind op);

// Blocks for the whole benchmark; raw may be null (no raw comparison).
// Returns, on rank 0, one sentence per line whose check failed (empty on
// the other ranks and when every check held).
std::vector<std::string> run_comm_bench(comm::Communicator& comm, const CommBenchOptions& opts, RawAllreduce* raw,
                    const std::function<void(const nlohmann::json&)>& emit);

}  // namespace hpct::bench
