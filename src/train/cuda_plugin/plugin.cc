// libhpctrain_cuda.so: the CUDA plugin of hpctrain-torch (train/gpu_plugin.h).
// Loading it touches no CUDA: its static initializers make nothing, so the
// file opens with dlopen (and `nm -D` lists its entry point) on a host with
// the CUDA libraries but no driver. CUDA is first called by device() and
// connect().
#include <memory>
#include <utility>

#include "comm/gpu/gpu_world.h"
#include "comm/nccl/communicator.h"
#include "engine/blocking_stream_collectives.h"
#include "store/memory_store.h"
#include "torch/device_tensors.h"
#include "train/cuda_plugin/nccl_stream_collectives.h"
#include "train/gpu_plugin.h"

namespace hpct::train {
namespace {

class CudaPlugin final : public GpuPlugin {
 public:
  CudaTensorSupport& cuda_tensors() override { return torch_cuda_tensor_support(); }

  engine::Device& device(int index) override { return torch_cuda_tensor_support().device(index); }

  GpuCollectives connect(const GpuCollectivesOptions& o) override {
    comm::GpuWorldOptions w;
    w.host = o.host;
    w.store = o.store;
    // One rank has no job store (hpctrain launch starts none); NCCL on one
    // rank needs only a place for its unique id.
    if (w.store == nullptr && o.host != nullptr && o.host->size() == 1) {
      w.store = std::make_shared<store::MemoryStore>();
    }
    w.name = "gpu";
    w.device = o.device;
    w.path = o.path;
    w.timeout = o.timeout;
    w.flat_up_to_bytes = o.flat_up_to_bytes;
    w.logger = o.logger;
    w.connect_host_group = o.connect_host_group;
    comm::GpuWorld world = comm::connect_gpu_world(w);

    GpuCollectives out;
    out.path = comm::gpu_path_name(world.choice.path);
    out.reason = world.choice.reason;
    if (auto* nccl = dynamic_cast<comm::NcclCommunicator*>(world.comm.get())) {
      world.comm.release();
      out.stream_collectives =
          std::make_shared<NcclStreamCollectives>(std::unique_ptr<comm::NcclCommunicator>(nccl));
    }
    // Hierarchical: NCCL inside the host and the host communicator across
    // hosts, each operation blocking the engine's thread until done.
    if (world.choice.path == comm::GpuPath::kHierarchical && world.comm != nullptr) {
      out.stream_collectives = std::make_shared<engine::BlockingStreamCollectives>(
          std::shared_ptr<comm::Communicator>(std::move(world.comm)), device(o.device), o.timeout);
    }
    // Staged: the engine stages device tensors through pinned host memory
    // over the host communicator itself (its own copies on its stream), so
    // world.comm is not needed.
    return out;
  }
};

}  // namespace
}  // namespace hpct::train

// The one exported symbol (the link hides the static libraries' symbols).
extern "C" __attribute__((visibility("default"))) hpct::train::GpuPlugin* hpctrain_cuda_plugin_v1() {
  static auto* plugin = new hpct::train::CudaPlugin();  // lives until exit, as its devices
  return plugin;
}
