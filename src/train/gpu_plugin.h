// The interface of hpctrain's CUDA plugin, libhpctrain_cuda.so: what
// hpctrain-torch needs from CUDA beyond torch's own CUDA library, loaded at
// run time so that hpctrain's programs link no CUDA library (cmake/Torch.cmake).
// This header includes neither torch nor CUDA.
//
// The plugin (src/train/cuda_plugin/) holds CUDA tensors for tensor_ref()
// (hpct_torch_cuda), the engine's CudaDevice (hpct_engine_cuda), the GPU
// communicators (NCCL, hierarchical, staged: comm/gpu/gpu_world.h) and
// NcclStreamCollectives, which puts the engine's device collectives on NCCL.
// use_device() (device.h) dlopens it after libtorch_cuda.so, with
// RTLD_LOCAL, and calls its one extern "C" entry point.
//
// The plugin carries its own copy of hpctrain's static libraries (core,
// comm, engine). Objects cross the boundary only through virtual calls
// (Device, StreamCollectives, Communicator, CudaTensorSupport), and the
// plugin installs nothing process-wide itself: the caller installs
// cuda_tensors() with its own set_cuda_tensor_support(). hpct::Error thrown
// inside it is caught outside as hpct::Error (type_info compares by name).
//
// Threads: the plugin object lives until the process ends; its methods are
// thread-safe. connect() is a collective over options.host.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "core/clock.h"
#include "core/log.h"
#include "engine/device.h"
#include "store/store.h"

namespace hpct {
class CudaTensorSupport;  // torch/device_tensors.h
}  // namespace hpct

namespace hpct::train {

// The plugin's file, looked for beside the running executable (hpctrain-torch).
inline constexpr const char* kGpuPluginFile = "libhpctrain_cuda.so";
// Its entry point: extern "C" GpuPlugin* hpctrain_cuda_plugin_v1(); the
// suffix changes with any change of this header's classes.
inline constexpr const char* kGpuPluginEntry = "hpctrain_cuda_plugin_v1";

struct GpuCollectivesOptions {
  // The world's host communicator (Gloo or MPI). Not owned; outlives the result.
  comm::Communicator* host = nullptr;
  // The job's store. Null under MPI (then only the staged path runs) and
  // for one rank (the plugin then gives NCCL a store of its own).
  std::shared_ptr<store::Store> store;
  int device = 0;             // this rank's CUDA device
  std::string path = "auto";  // HPCT_GPU_PATH
  Millis timeout{300000};     // HPCT_TIMEOUT_S
  std::size_t flat_up_to_bytes = 64 << 10;  // HPCT_DIRECT_ALLREDUCE_BYTES
  Logger logger;
  // The hierarchical path's host communicator among one rank per host
  // (comm/gpu/gpu_world.h); empty: that path is refused (InvalidArgument).
  std::function<std::unique_ptr<comm::Communicator>(int rank, int size, std::shared_ptr<store::Store> store)>
      connect_host_group;
};

// What connect() built for the engine.
struct GpuCollectives {
  std::string path;    // "nccl", "hierarchical" or "staged"
  std::string reason;  // one line: why that path
  // For EngineOptions::stream_collectives; owns its communicator. Null on
  // the staged path: the engine then stages device tensors through host
  // memory and the world's host communicator itself.
  std::shared_ptr<engine::StreamCollectives> stream_collectives;
};

class GpuPlugin {
 public:
  virtual ~GpuPlugin() = default;

  // CUDA tensors for tensor_ref() (torch/device_tensors.h), one CudaDevice
  // per GPU; the caller installs it with set_cuda_tensor_support(). Lives
  // until the process ends.
  virtual CudaTensorSupport& cuda_tensors() = 0;

  // The engine's Device for CUDA device `index`: the one cuda_tensors()
  // hands to tensor_ref(). Lives until the process ends.
  virtual engine::Device& device(int index) = 0;

  // Chooses the path of CUDA buffers for the job (HPCT_GPU_PATH, where the
  // ranks and their GPUs are) and connects it: a collective over
  // options.host, bounded by options.timeout. InvalidArgument when the
  // path cannot run (naming the fix); the backends' errors otherwise.
  virtual GpuCollectives connect(const GpuCollectivesOptions& options) = 0;
};

using GpuPluginEntry = GpuPlugin* (*)();

}  // namespace hpct::train
