#include "train/device.h"

#include <dlfcn.h>

#include <ATen/autocast_mode.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "comm/connect.h"
#include "core/error.h"
#include "torch/device_tensors.h"

namespace hpct::train {
namespace {

namespace fs = std::filesystem;

// The folder of libtorch_cpu.so in this process (dladdr of one of its
// functions): torch's CUDA library and, in a wheel's site-packages, the
// CUDA runtime it came with lie beside it.
fs::path torch_lib_dir() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&at::set_num_threads), &info) == 0 || info.dli_fname == nullptr) return {};
  return fs::path(info.dli_fname).parent_path();
}

// libcudart candidates, torch's own first: the wheel's nvidia/ folders
// (cu13/lib in CUDA 13 wheels, cuda_runtime/lib in CUDA 12 ones), then the
// dynamic linker's search path (a toolkit in ld.so.conf).
std::vector<std::string> cudart_candidates() {
  std::vector<std::string> out;
  const fs::path lib = torch_lib_dir();
  if (!lib.empty()) {
    std::error_code ec;
    const fs::path nvidia = lib.parent_path().parent_path() / "nvidia";
    for (const char* sub : {"cu13/lib", "cuda_runtime/lib"}) {
      for (const char* name : {"libcudart.so.13", "libcudart.so.12"}) {
        fs::path p = nvidia / sub / name;
        if (fs::exists(p, ec)) out.push_back(p.string());
      }
    }
  }
  out.push_back("libcudart.so.13");
  out.push_back("libcudart.so.12");
  return out;
}

// The folder of the running executable ("" when /proc cannot tell).
fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? fs::path() : exe.parent_path();
}

std::mutex plugin_mu;
GpuPlugin* plugin = nullptr;  // GUARDED_BY(plugin_mu); the loaded plugin, never unloaded

}  // namespace

std::vector<std::string> gpu_plugin_candidates() {
  std::vector<std::string> out;
  const fs::path here = executable_dir();
  if (!here.empty()) out.push_back((here / kGpuPluginFile).string());
#ifdef HPCT_GPU_PLUGIN_BUILD_DIR
  const std::string built = (fs::path(HPCT_GPU_PLUGIN_BUILD_DIR) / kGpuPluginFile).string();
  if (out.empty() || out.front() != built) out.push_back(built);
#endif
  return out;
}

GpuPlugin& load_gpu_plugin(const std::string& what, const std::vector<std::string>& candidates) {
  std::lock_guard<std::mutex> lk(plugin_mu);
  if (plugin != nullptr) return *plugin;
  std::error_code ec;
  std::string tried;
  for (const auto& file : candidates) {
    if (!fs::exists(file, ec)) {
      tried += (tried.empty() ? "" : ", ") + file;
      continue;
    }
    // RTLD_LOCAL: the plugin's copy of hpctrain's libraries stays its own;
    // never closed (its objects live until exit).
    void* h = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = ::dlerror();
      throw_invalid_argument(what + ": cannot load the CUDA plugin " + file + " (" + (why ? why : "unknown") +
                             "); rebuild hpctrain against torch's CUDA build (target hpctrain_cuda), or use "
                             "--device cpu");
    }
    auto entry = reinterpret_cast<GpuPluginEntry>(::dlsym(h, kGpuPluginEntry));
    if (entry == nullptr) {
      throw_invalid_argument(what + ": " + file + " has no " + kGpuPluginEntry +
                             " (a plugin from another version of hpctrain); rebuild target hpctrain_cuda "
                             "with this hpctrain-torch, or use --device cpu");
    }
    plugin = entry();
    return *plugin;
  }
  throw_invalid_argument(what + ": the CUDA plugin " + std::string(kGpuPluginFile) + " is missing (looked for " +
                         (tried.empty() ? std::string("nothing: no folder known") : tried) +
                         "); build it (cmake --build build --target hpctrain_cuda, in a build against torch's "
                         "CUDA build with the CUDA toolkit) and keep it beside hpctrain-torch, or use --device cpu");
}

GpuPlugin* loaded_gpu_plugin() {
  std::lock_guard<std::mutex> lk(plugin_mu);
  return plugin;
}

EngineSetup gpu_engine_setup(const torch::Device& device, const Config& config) {
  return [index = static_cast<int>(device.index()), config](const comm::World& world, const Logger& log,
                                                             engine::EngineOptions* eo) {
    GpuPlugin* p = loaded_gpu_plugin();
    if (p == nullptr) {
      throw_invalid_argument("--device cuda:" + std::to_string(index) +
                             ": the CUDA plugin is not loaded (a bug in hpctrain: use_device must come before "
                             "init); use --device cpu");
    }
    GpuCollectivesOptions o;
    o.host = world.comm.get();
    o.store = world.store;
    o.device = index;
    o.path = config.gpu_path;
    o.timeout = Millis(static_cast<std::int64_t>(config.timeout_s * 1000));
    o.flat_up_to_bytes = static_cast<std::size_t>(std::max<std::int64_t>(0, config.direct_allreduce_bytes));
    o.logger = log;
    // The hierarchical path's communicator among local rank l of every
    // host: Gloo, bound as the world's own (towards the job's store).
    o.connect_host_group = [config, store_host = world.store_host, timeout = o.timeout, log](
                               int rank, int size, std::shared_ptr<store::Store> store) {
      WorldInfo across;
      across.rank = rank;
      across.size = size;
      across.cross_rank = rank;
      across.cross_size = size;
      Config c = config;
      c.shm = false;  // one rank per host: nothing to share memory with
      return comm::connect_gloo(c, across, std::move(store), store_host, timeout, log);
    };
    try {
      GpuCollectives c = p->connect(o);
      eo->stream_collectives = c.stream_collectives;
      log.info("train", "gradients on cuda:" + std::to_string(index) + " take the " + c.path + " path (" + c.reason +
                            ")" + (c.stream_collectives ? ": NCCL on the engine's stream"
                                                        : ": the engine stages them through pinned host memory"));
    } catch (const Error& e) {
      // Only a refusal of the path is the same on every rank (a failure
      // while connecting may not be): fall back on that alone.
      if (config.gpu_path != "auto" || e.code() != ErrorCode::kInvalidArgument) throw;
      log.warn("train", std::string("the GPU communicator could not be built (") + e.what() +
                            "); gradients on cuda:" + std::to_string(index) +
                            " are staged through pinned host memory by the engine (set HPCT_GPU_PATH=staged "
                            "to choose that without trying)");
    }
  };
}

torch::Device parse_device(const std::string& text) {
  if (text == "cpu") return torch::Device(torch::kCPU);
  if (text == "cuda") return torch::Device(torch::kCUDA, 0);
  if (text.rfind("cuda:", 0) == 0 && text.size() > 5 &&
      text.find_first_not_of("0123456789", 5) == std::string::npos && text.size() < 9) {
    return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(std::stoi(text.substr(5))));
  }
  throw_invalid_argument("--device " + text + ": choose cpu, cuda or cuda:N");
}

GpuProbe probe_gpus() {
  GpuProbe p;
  p.error = "libcudart not found (neither beside torch nor on the linker's path)";
  for (const auto& name : cudart_candidates()) {
    // RTLD_LOCAL: the probe's symbols stay out of the process; the runtime
    // libtorch_cuda.so loads later is the same file, found the same way.
    void* h = ::dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) continue;
    using CountFn = int (*)(int*);
    using TextFn = const char* (*)(int);
    auto count = reinterpret_cast<CountFn>(::dlsym(h, "cudaGetDeviceCount"));
    auto err_name = reinterpret_cast<TextFn>(::dlsym(h, "cudaGetErrorName"));
    auto err_text = reinterpret_cast<TextFn>(::dlsym(h, "cudaGetErrorString"));
    p.runtime = name;
    if (count == nullptr) {
      p.error = name + " has no cudaGetDeviceCount";
      return p;  // the handle stays: unloading a CUDA runtime is not worth the risk
    }
    int n = 0;
    const int rc = count(&n);
    if (rc != 0) {
      p.count = 0;
      p.error = std::string(err_name ? err_name(rc) : "error") + " (" + std::to_string(rc) +
                "): " + (err_text ? err_text(rc) : "");
    } else {
      p.count = n;
      p.error.clear();
    }
    return p;
  }
  return p;
}

std::string no_gpu_message(const std::string& flag, const torch::Device& device, const GpuProbe& probe) {
  const std::string what = flag + " " + device.str();
  const std::string fix = "; run on a host with an NVIDIA GPU and driver, or use " + flag + " cpu";
  if (!probe.error.empty()) return what + ": no GPU found (cudaGetDeviceCount: " + probe.error + ")" + fix;
  if (probe.count == 0) return what + ": no GPU found (cudaGetDeviceCount: 0 devices)" + fix;
  if (device.index() >= probe.count) {
    return what + ": this host has " + std::to_string(probe.count) + " GPU(s), numbered from 0; use " + flag +
           " cuda:0" + (probe.count > 1 ? " to cuda:" + std::to_string(probe.count - 1) : "");
  }
  return "";
}

void use_device(const torch::Device& device, const std::string& flag) {
  if (device.is_cpu()) return;
  if (!device.is_cuda()) throw_invalid_argument(flag + " " + device.str() + ": choose cpu or cuda");
  const std::string bad = no_gpu_message(flag, device, probe_gpus());
  if (!bad.empty()) throw_invalid_argument(bad);
  // torch caches its CUDA hooks at their first use (hasCUDA(), and
  // manual_seed asks for them too), so the library must be in before
  // anything asks: loading it again is a no-op (a reference count).
  const fs::path lib = torch_lib_dir() / "libtorch_cuda.so";
  // RTLD_GLOBAL: its kernels and hooks register with the torch in the
  // process and stay for its lifetime (never dlclosed).
  if (::dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* why = ::dlerror();
    throw_invalid_argument(flag + " " + device.str() + ": cannot load " + lib.string() + " (" +
                           (why ? why : "unknown") + "); hpctrain needs torch's CUDA build (pip install torch "
                           "from the CUDA index) for GPUs, or use " + flag + " cpu");
  }
  if (!at::globalContext().hasCUDA()) {
    throw_invalid_argument(flag + " " + device.str() + ": " + lib.string() +
                           " loaded, but torch had looked for CUDA before it was (a bug in hpctrain: use_device "
                           "must come first), or sees no driver; check nvidia-smi, or use " + flag + " cpu");
  }
  // The plugin's CUDA tensors go into this program's tensor_ref().
  GpuPlugin& gpu = load_gpu_plugin(flag + " " + device.str(), gpu_plugin_candidates());
  set_cuda_tensor_support(&gpu.cuda_tensors());
  c10::impl::VirtualGuardImpl guard(c10::DeviceType::CUDA);
  guard.setDevice(device);
}

c10::ScalarType parse_amp(const std::string& text) {
  if (text.empty() || text == "none") return c10::kFloat;
  if (text == "bf16") return c10::kBFloat16;
  if (text == "fp16") return c10::kHalf;
  throw_invalid_argument("--amp " + text + ": choose bf16 or fp16 (or none)");
}

AutocastScope::AutocastScope(c10::DeviceType device, c10::ScalarType dtype) : device_(device) {
  if (dtype == c10::kFloat) return;
  active_ = true;
  was_enabled_ = at::autocast::is_autocast_enabled(device_);
  was_dtype_ = at::autocast::get_autocast_dtype(device_);
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, dtype);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  // As torch.autocast's __exit__: the cache of casts of the weights is
  // dropped when the outermost scope ends (the optimizer changes them).
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, was_enabled_);
  at::autocast::set_autocast_dtype(device_, was_dtype_);
}

LossScaler::LossScaler(bool enabled, double initial, std::int64_t growth_interval)
    : enabled_(enabled), scale_(initial), growth_interval_(growth_interval) {}

torch::Tensor LossScaler::scale_loss(const torch::Tensor& loss) const {
  return enabled_ ? loss * scale_ : loss;
}

bool LossScaler::unscale_and_check(const std::vector<torch::Tensor>& params) {
  if (!enabled_) return true;
  torch::NoGradGuard no_grad;
  torch::Tensor bad;
  for (const auto& p : params) {
    const auto& g = p.grad();
    if (!g.defined()) continue;
    g.mul_(1.0 / scale_);
    auto b = g.isfinite().logical_not().any();
    bad = bad.defined() ? bad.logical_or(b) : b;
  }
  return !bad.defined() || !bad.item<bool>();  // one device sync per step, fp16 only
}

void LossScaler::update(bool finite) {
  if (!enabled_) return;
  if (!finite) {
    scale_ = std::max(1.0, scale_ * 0.5);
    good_steps_ = 0;
    ++skipped_;
    return;
  }
  if (++good_steps_ >= growth_interval_) {
    scale_ *= 2;
    good_steps_ = 0;
  }
}

void move_optimizer_state(torch::optim::Optimizer& optimizer, const torch::Device& device) {
  for (auto& item : optimizer.state()) {
    auto* state = item.second.get();
    if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(state)) {
      if (sgd->momentum_buffer().defined()) sgd->momentum_buffer(sgd->momentum_buffer().to(device));
    } else if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(state)) {
      if (adam->exp_avg().defined()) adam->exp_avg(adam->exp_avg().to(device));
      if (adam->exp_avg_sq().defined()) adam->exp_avg_sq(adam->exp_avg_sq().to(device));
      if (adam->max_exp_avg_sq().defined()) adam->max_exp_avg_sq(adam->max_exp_avg_sq().to(device));
    }
  }
}

}  // namespace hpct::train
