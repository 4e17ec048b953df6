#include "runtime.h"

#include <algorithm>

#include "c10d_store.h"
#include "comm/connect.h"
#include "comm/tensor.h"
#include "core/env.h"
#include "core/error.h"
#include "engine/message.h"
#include "torch/context.h"

namespace hpct::py {

torch::Tensor Operation::wait() const {
  handle_.wait();
  if (mismatch_ && !mismatch_->empty()) throw_invalid_argument(*mismatch_);
  if (gathered_) return *gathered_;
  return output_;
}

Runtime::Runtime() {
  ProcessEnv env;
  if (env.get("HPCT_ELASTIC_ID")) {
    const Config config = Config::from_env(env);
    worker_ = std::make_unique<elastic::Worker>(config, Logger::from_config(config, -1));
    if (!worker_->join()) {
      throw_invalid_argument("elastic worker " + std::to_string(worker_->id()) +
                             " was not taken into the job (" + worker_->reason() + ")");
    }
    return;
  }
  ctx_ = init();
}

namespace {

int env_int(const Env& env, const std::string& name, int fallback) {
  const auto v = env.get(name);
  if (!v || v->empty()) return fallback;
  try {
    return std::stoi(*v);
  } catch (const std::exception&) {
    throw_invalid_argument(name + "=" + *v + " is not a number (torchrun sets it to one)");
  }
}

}  // namespace

std::shared_ptr<Runtime> Runtime::from_torch_store(c10::intrusive_ptr<c10d::Store> store, int rank,
                                                   int size) {
  ProcessEnv env;
  const Config config = Config::from_env(env);
  const Logger logger = Logger::from_config(config, rank);
  WorldInfo info;
  info.rank = rank;
  info.size = size;
  info.local_rank = env_int(env, "LOCAL_RANK", rank);
  info.local_size = env_int(env, "LOCAL_WORLD_SIZE", size);
  if (info.local_size <= 0 || size % info.local_size != 0 || info.local_rank >= info.local_size) {
    throw_invalid_argument("LOCAL_RANK=" + std::to_string(info.local_rank) + " LOCAL_WORLD_SIZE=" +
                           std::to_string(info.local_size) + " do not fit " + std::to_string(size) +
                           " ranks; torchrun sets both");
  }
  info.cross_size = size / info.local_size;
  info.cross_rank = env_int(env, "GROUP_RANK", rank / info.local_size);
  const std::string host = env.get("MASTER_ADDR").value_or("127.0.0.1");
  const std::string port = env.get("MASTER_PORT").value_or("?");
  comm::World world;
  world.info = info;
  world.store = std::make_shared<store::PrefixStore>(
      "hpctrain", std::make_shared<C10dStore>(std::move(store), "torch.distributed's store at " + host +
                                                                    ":" + port));
  world.comm = comm::connect_gloo(config, info, world.store, host, seconds_to_millis(config.timeout_s),
                                  logger);
  return std::shared_ptr<Runtime>(new Runtime(make_context(std::move(world), config, logger)));
}

Runtime::~Runtime() { shutdown(); }

const Context* Runtime::current() const {
  if (worker_) return worker_->joined() ? &worker_->context() : nullptr;
  return ctx_.get();
}

Context& Runtime::live() {
  if (worker_) return worker_->context();  // InvalidArgument between worlds
  if (!ctx_) throw_invalid_argument("hpctrain.torch was shut down; call hvd.init() again first");
  return *ctx_;
}

int Runtime::rank() const { return current() ? current()->rank() : 0; }
int Runtime::size() const { return current() ? current()->size() : 1; }
int Runtime::local_rank() const { return current() ? current()->local_rank() : 0; }
int Runtime::local_size() const { return current() ? current()->local_size() : 1; }
Context& Runtime::context() { return live(); }

bool Runtime::overlap_default() const {
  const Context* c = current();
  return c != nullptr && overlap_from_config(*c);
}

Operation Runtime::allreduce(const torch::Tensor& t, const std::string& name,
                             const std::string& op, const std::string& compression,
                             const std::string& stack) {
  std::optional<engine::Compression> c;
  if (!compression.empty()) c = engine::parse_compression(compression);
  auto h = live().engine().allreduce_async(name, tensor_ref(t, "tensor " + name),
                                           comm::parse_reduce_op(op), c, engine::CallSite{nullptr, 0, stack});
  return Operation(std::move(h), t);
}

Operation Runtime::allgather(const torch::Tensor& t, const std::string& name, const std::string& stack) {
  auto out = std::make_shared<torch::Tensor>();
  const auto options = t.options();
  auto h = live().engine().allgather_async(
      name, tensor_ref(t, "tensor " + name),
      [out, options](const std::vector<std::int64_t>& shape) {
        *out = torch::empty(shape, options);
        return out->data_ptr();
      },
      engine::CallSite{nullptr, 0, stack});
  return Operation(std::move(h), torch::Tensor(), out);
}

Operation Runtime::allgather_into(const torch::Tensor& t, const std::string& name,
                                  const torch::Tensor& out) {
  if (!out.is_contiguous() || out.device() != t.device() || out.scalar_type() != t.scalar_type()) {
    throw_invalid_argument("allgather of " + name + " into a tensor: the output must be contiguous, "
                           "on the input's device and of its dtype");
  }
  auto scratch = std::make_shared<torch::Tensor>();
  auto mismatch = std::make_shared<std::string>();
  const auto options = t.options();
  const std::int64_t room = out.numel();
  void* into = out.data_ptr();
  auto h = live().engine().allgather_async(
      name, tensor_ref(t, "tensor " + name),
      [scratch, mismatch, options, room, into, name](const std::vector<std::int64_t>& shape) {
        std::int64_t n = 1;
        for (auto d : shape) n *= d;
        if (n == room) return into;
        // Called on the engine's thread: no throw here; wait() reports it.
        *mismatch = "allgather of " + name + ": the ranks' parts add up to " + std::to_string(n) +
                    " elements, the output holds " + std::to_string(room);
        *scratch = torch::empty(shape, options);
        return scratch->data_ptr();
      });
  return Operation(std::move(h), out, nullptr, mismatch);
}

Operation Runtime::broadcast(const torch::Tensor& t, const std::string& name, int root,
                             const std::string& stack) {
  if (root < 0 || root >= size()) {
    throw_invalid_argument("broadcast of " + name + ": root rank " + std::to_string(root) +
                           " is not in 0.." + std::to_string(size() - 1));
  }
  auto h = live().engine().broadcast_async(name, tensor_ref(t, "tensor " + name), root,
                                           engine::CallSite{nullptr, 0, stack});
  return Operation(std::move(h), t);
}

void Runtime::set_phase(const std::string& phase, std::int64_t step) {
  live().engine().flight_record().set_phase(engine::parse_phase(phase), step);
}

void Runtime::shutdown() {
  ctx_.reset();
  worker_.reset();
}

}  // namespace hpct::py
