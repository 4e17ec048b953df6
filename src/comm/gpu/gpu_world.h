// Builds the communicator for CUDA buffers that the job's layout calls for
// (gpu_path.h): flat NCCL, hierarchical (NCCL inside hosts, the host
// communicator across), or staged through pinned host memory.
//
// Protocol (every rank, in the same order, collective over `host`):
//   1. allgather of each rank's host identity, GPU identity (a hash of the
//      PCI bus id of options.device) and device index over the host
//      communicator;
//   2. choose_gpu_path() on those facts: every rank decides alike;
//   3. build:
//      nccl:         NcclCommunicator over every rank, bootstrapped under
//                    "<name>/world" of the store;
//      hierarchical: NcclCommunicator over this host's ranks ("<name>/host<h>"),
//                    a host communicator among local rank l of every host
//                    (connect_host_group, "<name>/across<l>"), a
//                    StagedCommunicator over `host` for the other operations;
//      staged:       StagedCommunicator over `host`.
// Blocks until the communicator is up on every rank, bounded by the
// timeout. InvalidArgument when the setting cannot run (naming the fix),
// when this build has no CUDA, or for a missing part of the options;
// otherwise the errors of the backends' connect().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "comm/gpu/gpu_path.h"
#include "core/clock.h"
#include "core/log.h"
#include "store/store.h"

namespace hpct::comm {

struct GpuWorldOptions {
  // The world's host communicator (World::comm: Gloo or MPI). Not owned; must
  // outlive the result (the staged paths run over it).
  Communicator* host = nullptr;
  // The job's store, a namespace no one else writes under `name`; null when
  // there is none (MPI without hpctrain launch): then only staged can run.
  std::shared_ptr<store::Store> store;
  std::string name = "gpu";   // a new one for each communicator built on one store
  int device = 0;             // this rank's CUDA device index
  std::string path = "auto";  // HPCT_GPU_PATH
  Millis timeout{300000};     // HPCT_TIMEOUT_S
  // Hierarchical path: allreduces of at most this many bytes go flat
  // (HPCT_DIRECT_ALLREDUCE_BYTES, as the Gloo backend's hierarchy).
  size_t flat_up_to_bytes = 64 << 10;
  Logger logger;
  // Hierarchical path: a host communicator of `size` ranks, this one being
  // `rank`, meeting through `store` (a fresh namespace). The caller binds it
  // as its world: connect_gloo(config, {rank, size}, store, store_host, ...).
  std::function<std::unique_ptr<Communicator>(int rank, int size,
                                              std::shared_ptr<store::Store> store)>
      connect_host_group;
  // Tests: this rank's host identity (0: the real one, comm/shm_allreduce.h).
  std::int64_t host_identity = 0;
};

struct GpuWorld {
  GpuPathChoice choice;
  std::unique_ptr<Communicator> comm;  // device buffers (host_buffers() false)
};

GpuWorld connect_gpu_world(const GpuWorldOptions& options);

// Whether this build has the NCCL backend, and CUDA at all.
bool gpu_world_has_nccl();
bool gpu_world_has_cuda();

}  // namespace hpct::comm
