// Which path CUDA buffers take between ranks, decided from where the ranks
// and their GPUs are: a pure function of facts every rank has allgathered,
// so every rank decides alike, and tested on the CPU.
//
// The paths (docs/comm.md, "CUDA buffers: which path"):
//   nccl          one NCCL communicator over every rank (NCCL's own transport
//                 inside and across hosts). Needs one GPU per rank.
//   hierarchical  NCCL inside each host, hpctrain's host communicator (Gloo
//                 TCP) across hosts through pinned host memory
//                 (hierarchical_communicator.h). Needs one GPU per rank and
//                 the same number of ranks on each of several hosts.
//   staged        every operation through pinned host memory over the host
//                 communicator (comm/cuda/staged_communicator.h). Runs
//                 anywhere: ranks sharing a GPU, builds without NCCL.
//
// HPCT_GPU_PATH=auto picks, in this order: staged when two ranks share a GPU
// (NCCL refuses them), when the build has no NCCL, or when there is no
// rendezvous store for NCCL's start-up; hierarchical on the same layouts as
// the Gloo backend's hierarchical allreduce (several hosts, the same number
// L >= 2 of ranks on each); nccl otherwise (one host, one rank per host, or
// hosts with different numbers of ranks). A path named explicitly that cannot
// run is an InvalidArgument naming the problem and the setting that works.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hpct::comm {

enum class GpuPath { kAuto, kNccl, kHierarchical, kStaged };

// "auto" | "nccl" | "hierarchical" | "staged"; InvalidArgument naming
// HPCT_GPU_PATH otherwise.
GpuPath parse_gpu_path(const std::string& setting);
const char* gpu_path_name(GpuPath path);

// Where one rank runs.
struct RankPlacement {
  std::int64_t host = 0;  // host identity: equal exactly when two ranks share a host
  std::int64_t gpu = 0;   // the GPU's identity on its host (a hash of its PCI bus id)
  int device = 0;         // the CUDA device index the rank uses, for messages
};

// The hosts of a job as the hierarchy sees them: hosts numbered in order of
// their first rank, local ranks in world-rank order within each host.
struct HostLayout {
  int host_count = 0;
  std::vector<int> ranks_per_host;  // by host index
  bool uniform = false;             // every host has the same number of ranks
  // For the rank asked about:
  int host_index = 0;
  int local_rank = 0;
  std::vector<int> local_world_ranks;   // this host's ranks, by local rank
  std::vector<int> across_world_ranks;  // local rank `local_rank` of each host, by host
                                        // (empty unless uniform)
};

// hosts: every rank's host identity, by rank. rank: the rank asked about.
HostLayout host_layout(const std::vector<std::int64_t>& hosts, int rank);

struct GpuPathInputs {
  std::vector<RankPlacement> ranks;  // by rank, the same on every rank
  GpuPath requested = GpuPath::kAuto;
  bool nccl_built = false;  // this build has the NCCL backend (comm/nccl/)
  bool have_store = false;  // a rendezvous store for NCCL's start-up and the hierarchy's groups
};

struct GpuPathChoice {
  GpuPath path = GpuPath::kStaged;  // never kAuto
  std::string reason;               // one line, for the log: why this path
};

// The path (file comment). InvalidArgument when the requested path cannot
// run, naming the problem and the fix ("NCCL refuses two ranks on one GPU
// (ranks 0 and 1 on GPU 0); use HPCT_GPU_PATH=staged or auto").
GpuPathChoice choose_gpu_path(const GpuPathInputs& in);

}  // namespace hpct::comm
