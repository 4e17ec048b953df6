// `hpctrain bench engine`: a real model's gradient list allreduced through
// the engine, next to one raw library allreduce (MPI_Allreduce or
// gloo::allreduce) of the same total bytes, in the same run.
//
// Gradients are laid out as DistributedOptimizer lays them out after its
// first step (one flat float32 buffer, in backward order, i.e. reverse
// parameter order) and submitted in backward order; a second layout
// ("separate") gives every gradient its own allocation, so fusion has to
// pack. Engine and raw runs alternate in blocks (the engine is shut down
// while raw calls run: one MPI caller at a time); each block's first engine
// iteration (full negotiation) is not timed. The raw call is always a sum;
// the engine runs each op in `ops`.
//
// Every rank calls run_engine_bench with the same options; rank 0 emits one
// JSON object per (model, layout). Blocks for the whole benchmark.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "bench/comm_bench.h"
#include "core/config.h"
#include "core/log.h"

namespace hpct::bench {

struct EngineBenchOptions {
  std::vector<std::string> models = {"mlp", "resnet20"};
  std::vector<std::string> layouts = {"flat", "separate"};
  // sum: the raw call's own operation; avg: what DistributedOptimizer asks
  // for (the sum, then one scaling pass over the result).
  std::vector<std::string> ops = {"sum", "avg"};
  int iters = 10;   // timed iterations per block
  int blocks = 3;   // engine/raw alternations
};

void run_engine_bench(comm::Communicator& comm, const Config& config, const Logger& logger,
                      const EngineBenchOptions& opts, RawAllreduce* raw,
                      const std::function<void(const nlohmann::json&)>& emit);

}  // namespace hpct::bench
