#include "torch/context.h"

#include <ATen/ATen.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>

#include "comm/tensor.h"
#include "core/env.h"
#include "torch/device_tensors.h"

namespace hpct {

Context::Context(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Context::~Context() {
  if (impl_) impl_->engine.reset();  // shut the engine down before its communicator goes
}

int Context::rank() const { return impl_->comm->rank(); }
int Context::size() const { return impl_->comm->size(); }
int Context::local_rank() const { return impl_->info.local_rank; }
int Context::local_size() const { return impl_->info.local_size; }
engine::Engine& Context::engine() { return *impl_->engine; }
const Config& Context::config() const { return impl_->config; }

std::unique_ptr<Context> init() { return init(Config::from_env(ProcessEnv())); }

namespace {

// glibc returns every freed block above its mmap threshold (128 KiB at
// first) to the kernel, and a training step allocates and frees the same
// activation and gradient tensors (MiBs each) every step, so each step
// faults them in again page by page. Raising the threshold (and the heap
// trim threshold with it) keeps them in the process for reuse. Measured on
// the cnn, batch 64, 1 thread: 34.7 -> 31.3 ms per step reading shards.
void keep_freed_memory(const Config& config, const Logger& logger) {
  const std::int64_t bytes = config.mmap_threshold;
  if (bytes <= 0) return;
  // glibc refuses thresholds above 32 MiB on 64-bit (HEAP_MAX_SIZE / 2).
  const int threshold = static_cast<int>(std::min<std::int64_t>(bytes, 32 << 20));
  if (::mallopt(M_MMAP_THRESHOLD, threshold) != 1 || ::mallopt(M_TRIM_THRESHOLD, 4 * threshold) != 1) {
    logger.warn("core", "HPCT_MMAP_THRESHOLD=" + std::to_string(bytes) +
                            ": glibc refused it (mallopt); freed memory goes back to the OS as usual");
  }
}

}  // namespace

std::unique_ptr<Context> init(const Config& config) { return init(config, EngineSetup()); }

namespace {

// The engine's options, with this rank's host as the launcher named it
// (HPCT_HOSTNAME), else the machine's name: rank 0's straggler warning
// names it.
engine::EngineOptions engine_options(const Config& config) {
  engine::EngineOptions eo = engine::EngineOptions::from_config(config);
  char name[256] = {0};
  ::gethostname(name, sizeof(name) - 1);
  eo.host = ProcessEnv().get("HPCT_HOSTNAME").value_or(name);
  return eo;
}

}  // namespace

std::unique_ptr<Context> init(const Config& config, const EngineSetup& setup) {
  auto impl = std::make_unique<Context::Impl>();
  impl->config = config;
  impl->logger = Logger::from_config(config, -1);
  keep_freed_memory(config, impl->logger);
  impl->world = comm::connect_world(config, ProcessEnv(), impl->logger);
  impl->info = impl->world.info;
  impl->comm = impl->world.comm.get();
  impl->logger = impl->logger.with_rank(impl->comm->rank());
  engine::EngineOptions eo = engine_options(config);
  if (setup) setup(impl->world, impl->logger, &eo);
  impl->engine = std::make_unique<engine::Engine>(*impl->comm, std::move(eo), impl->logger);
  return std::make_unique<Context>(std::move(impl));
}

std::unique_ptr<Context> make_context(comm::Communicator& comm, const Config& config,
                                      const Logger& logger) {
  auto impl = std::make_unique<Context::Impl>();
  impl->config = config;
  impl->logger = logger;
  impl->comm = &comm;
  impl->info.rank = comm.rank();
  impl->info.size = comm.size();
  impl->info.local_rank = comm.rank();
  impl->info.local_size = comm.size();
  impl->engine = std::make_unique<engine::Engine>(comm, engine::EngineOptions::from_config(config),
                                                  logger);
  return std::make_unique<Context>(std::move(impl));
}

std::unique_ptr<Context> make_context(comm::World world, const Config& config,
                                      const Logger& logger) {
  auto impl = std::make_unique<Context::Impl>();
  impl->config = config;
  impl->world = std::move(world);
  impl->info = impl->world.info;
  impl->comm = impl->world.comm.get();
  impl->logger = logger.with_rank(impl->comm->rank());
  impl->engine =
      std::make_unique<engine::Engine>(*impl->comm, engine_options(config), impl->logger);
  return std::make_unique<Context>(std::move(impl));
}

engine::TensorRef tensor_ref(const torch::Tensor& t, const std::string& what) {
  if (!t.defined()) throw_invalid_argument(what + " is an undefined tensor");
  if (!t.device().is_cpu() && !t.device().is_cuda()) {
    throw_invalid_argument(what + " is on " + t.device().str() + "; hpctrain moves CPU and CUDA tensors");
  }
  if (!t.is_contiguous()) throw_invalid_argument(what + " is not contiguous");
  engine::TensorRef r;
  r.data = t.data_ptr();
  r.dtype = comm::dtype_of(t);
  r.shape.assign(t.sizes().begin(), t.sizes().end());
  r.keepalive = std::make_shared<torch::Tensor>(t);
  if (t.device().is_cuda()) {
    CudaTensorSupport* cuda = cuda_tensor_support();
    if (cuda == nullptr) {
      throw_invalid_argument(what + " is on " + t.device().str() +
                             " but this program was built without hpctrain's CUDA support "
                             "(link hpct_torch_cuda and call hpct::enable_cuda_tensors(), or call .cpu())");
    }
    const int index = t.device().index();
    r.device = &cuda->device(index);
    // Ready once the work enqueued so far on the current stream (which
    // computed t) is done; the result is ordered back on the same stream.
    r.stream = cuda->current_stream(index);
    r.ready = r.device->record(r.stream);
  }
  return r;
}

}  // namespace hpct
