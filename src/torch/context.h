// What a Context holds (include/hpctrain/hpctrain.h), and how tests and
// benchmarks make one on a communicator they already have (several ranks as
// threads of one process, or a rank started by a benchmark).
#pragma once

#include <functional>
#include <memory>

#include "comm/connect.h"
#include "core/config.h"
#include "core/log.h"
#include "engine/engine.h"
#include "hpctrain/hpctrain.h"

namespace hpct {

struct Context::Impl {
  Config config;
  Logger logger;
  WorldInfo info;
  comm::World world;              // owns the communicator when init() made it
  comm::Communicator* comm = nullptr;
  std::unique_ptr<engine::Engine> engine;  // destroyed before the communicator
};

// A Context on a caller-owned communicator (which must outlive it), with the
// engine configured from config. local rank = rank, local size = size.
std::unique_ptr<Context> make_context(comm::Communicator& comm, const Config& config,
                                      const Logger& logger);

// A Context that owns `world` (a world the caller connected itself: elastic/
// makes one per membership generation), with the engine configured from
// config. Rank, size and local ranks come from world.info.
std::unique_ptr<Context> make_context(comm::World world, const Config& config,
                                      const Logger& logger);

// Fills in the engine's options from the connected world before the engine
// starts (train/device.h: the GPU collectives). Runs on every rank; may be a
// collective over world.comm.
using EngineSetup = std::function<void(const comm::World& world, const Logger& logger,
                                       engine::EngineOptions* options)>;

// init(config) with `setup` run between connecting the world and starting
// the engine.
std::unique_ptr<Context> init(const Config& config, const EngineSetup& setup);

// The engine's view of a libtorch tensor (CPU, contiguous; InvalidArgument
// naming `what` otherwise). The TensorRef keeps the tensor alive.
engine::TensorRef tensor_ref(const torch::Tensor& t, const std::string& what);

// HPCT_OVERLAP resolved for this rank (on, off, or auto: overlap only when
// this host's ranks times their intra-op threads leave a core idle). The one
// rule for DistributedOptimizer and the Python frontend; InvalidArgument on
// any other value.
bool overlap_from_config(const Context& ctx);

}  // namespace hpct
