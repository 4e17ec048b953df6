#include "comm/gpu/gpu_world.h"

#include <utility>

#include "comm/cuda/staged_communicator.h"
#include "comm/gpu/hierarchical_communicator.h"
#include "comm/shm_allreduce.h"
#include "core/error.h"

#ifdef HPCT_GPU_WORLD_CUDA
#include <cuda_runtime_api.h>

#include "comm/cuda/cuda_memory.h"
#endif
#ifdef HPCT_GPU_WORLD_NCCL
#include "comm/nccl/communicator.h"
#endif

namespace hpct::comm {
namespace {

// FNV-1a: a stable 64-bit identity of a PCI bus id, equal on every rank.
std::int64_t identity_hash(const std::string& s) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return static_cast<std::int64_t>(h);
}

#ifdef HPCT_GPU_WORLD_CUDA
std::string pci_bus_id(int device) {
  char bus[64] = {};
  const cudaError_t rc = cudaDeviceGetPCIBusId(bus, sizeof bus, device);
  if (rc != cudaSuccess) {
    throw Error(ErrorCode::kInvalidArgument,
                "CUDA device " + std::to_string(device) + " of this process: " +
                    cudaGetErrorString(rc) + " (check CUDA_VISIBLE_DEVICES and the local rank)");
  }
  return bus;
}

std::unique_ptr<DeviceMemory> device_memory(int device) {
  return std::make_unique<CudaDeviceMemory>(device);
}
#endif

#ifdef HPCT_GPU_WORLD_NCCL
std::unique_ptr<Communicator> connect_nccl(const GpuWorldOptions& o, int rank, int size,
                                           const std::string& scope, std::int64_t host) {
  NcclOptions n;
  n.rank = rank;
  n.size = size;
  n.store = std::make_shared<store::PrefixStore>(o.name + "/" + scope, o.store);
  n.device = o.device;
  n.name = scope;
  n.timeout = o.timeout;
  n.logger = o.logger;
  n.host_identity = host;
  return NcclCommunicator::connect(n);
}
#endif

}  // namespace

bool gpu_world_has_nccl() {
#ifdef HPCT_GPU_WORLD_NCCL
  return true;
#else
  return false;
#endif
}

bool gpu_world_has_cuda() {
#ifdef HPCT_GPU_WORLD_CUDA
  return true;
#else
  return false;
#endif
}

GpuWorld connect_gpu_world(const GpuWorldOptions& o) {
  if (o.host == nullptr || !o.host->host_buffers()) {
    throw_invalid_argument("connect_gpu_world: needs the world's host communicator (Gloo or MPI)");
  }
  const GpuPath requested = parse_gpu_path(o.path);
#ifndef HPCT_GPU_WORLD_CUDA
  (void)requested;
  throw_invalid_argument(
      "CUDA buffers need a build of hpctrain with CUDA (torch's CUDA build and "
      "the CUDA toolkit found at configure time, HPCT_WITH_CUDA_COMM=ON); this "
      "one has none: run on the CPU");
#else
  Communicator& host = *o.host;
  // 1. Where every rank is.
  const std::int64_t my_host = o.host_identity != 0 ? o.host_identity : host_identity();
  const std::vector<std::int64_t> hosts = allgather_value(host, my_host);
  const std::vector<std::int64_t> gpus = allgather_value(host, identity_hash(pci_bus_id(o.device)));
  const std::vector<std::int64_t> devices = allgather_value(host, o.device);
  GpuPathInputs in;
  for (size_t r = 0; r < hosts.size(); ++r) {
    in.ranks.push_back({hosts[r], gpus[r], static_cast<int>(devices[r])});
  }
  in.requested = requested;
  in.nccl_built = gpu_world_has_nccl();
  in.have_store = o.store != nullptr;

  // 2. The path: the same on every rank.
  GpuWorld w;
  w.choice = choose_gpu_path(in);
  o.logger.info("comm", std::string("CUDA buffers take the ") + gpu_path_name(w.choice.path) +
                            " path: " + w.choice.reason);

  // 3. Its communicator.
  switch (w.choice.path) {
    case GpuPath::kStaged:
    case GpuPath::kAuto:
      w.comm = std::make_unique<StagedCommunicator>(host, device_memory(o.device));
      return w;
    case GpuPath::kNccl:
#ifdef HPCT_GPU_WORLD_NCCL
      w.comm = connect_nccl(o, host.rank(), host.size(), "world", my_host);
#endif
      return w;
    case GpuPath::kHierarchical: {
#ifdef HPCT_GPU_WORLD_NCCL
      if (!o.connect_host_group) {
        throw_invalid_argument(
            "connect_gpu_world: the hierarchical path needs connect_host_group "
            "(how to connect a host communicator among one rank per host)");
      }
      const HostLayout l = host_layout(hosts, host.rank());
      HierarchicalParts p;
      p.local = connect_nccl(o, l.local_rank, l.ranks_per_host[0],
                             "host" + std::to_string(l.host_index), my_host);
      p.across =
          o.connect_host_group(l.host_index, l.host_count,
                               std::make_shared<store::PrefixStore>(
                                   o.name + "/across" + std::to_string(l.local_rank), o.store));
      p.flat = std::make_unique<StagedCommunicator>(host, device_memory(o.device));
      p.memory = device_memory(o.device);
      p.flat_up_to_bytes = o.flat_up_to_bytes;
      p.local_world_ranks = l.local_world_ranks;
      w.comm = std::make_unique<HierarchicalDeviceCommunicator>(std::move(p));
#endif
      return w;
    }
  }
  return w;
#endif
}

}  // namespace hpct::comm
