// DistributedOptimizer: gradient hooks feed the engine while backward runs.
//
// Each parameter's grad accumulator (the autograd node that adds a new
// gradient into .grad) gets a post hook. It fires after .grad holds this
// pass's sum, so on the last pass of a step the hook submits .grad itself
// (in place) to the engine. step() submits whatever did not fire (unused
// parameters, with zeros when .grad is undefined), waits for every handle in
// submission order and runs the wrapped optimizer.
//
// Flat gradients: after the first synchronize() the float32 gradients are
// copied into one buffer in the order they were submitted and .grad becomes
// a view of it. Autograd then accumulates into the views in place, and the
// engine, which announces fused groups in that same order (the response
// cache remembers the first step's order), finds the group's tensors
// adjacent and sends them without packing.
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/torch.h>

#include <sched.h>

#include <algorithm>
#include <mutex>
#include <sstream>
#include <thread>

#include "engine/engine.h"
#include "torch/context.h"
#include "ps/job.h"
#include "torch/gradient_compressor.h"
#include "torch/ps_sync.h"
#include "torch/sharded_update.h"

namespace hpct {
namespace {

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

// HPCT_OVERLAP. auto: an allreduce needs CPU too (shared-memory copies, the
// engine and MPI threads, the TCP stack); when this host's ranks already
// keep every core busy with backward, starting allreduces during backward
// only takes cores from it and adds negotiation rounds. Measured on the
// 2-core test machine, 2 ranks of 1 thread, cnn: all in step() 3906-4018
// samples/s against 3490-3873 with overlap (3 runs each); MLP equal.
bool overlap_from_config(const Context& ctx) {
  const std::string& v = ctx.config().overlap;
  if (v == "on") return true;
  if (v == "off") return false;
  if (v != "auto") {
    throw_invalid_argument("HPCT_OVERLAP=" + v + ": expected on, off or auto");
  }
  return ctx.local_size() * at::get_num_threads() < usable_cores();
}

struct DistributedOptimizer::Impl {
  struct Param {
    std::string name;
    std::string engine_name;  // "grad/" + name, built once (a step submits it)
    std::string what;         // "gradient of " + name, for errors
    torch::Tensor tensor;
    // kept alive: the Variable holds it weakly (torch 2.15 returns an intrusive_ptr, earlier releases a shared_ptr)
    decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>())) accumulator;
    std::uintptr_t hook_key = 0;
    int passes = 0;
    bool submitted = false;
    engine::Handle handle;
  };

  Context& ctx;
  torch::optim::Optimizer& optimizer;
  DistributedOptions options;
  std::optional<engine::Compression> compression;
  std::mutex mu;  // hooks may run on autograd threads
  std::vector<Param> params;        // GUARDED_BY(mu)
  std::vector<std::size_t> order;   // submission order this step; GUARDED_BY(mu)
  bool user_synchronized = false;   // synchronize() called since the last step()
  bool laid_out = false;
  torch::Tensor flat;
  bool overlap = true;  // options.overlap, resolved
  std::string sync;     // options.sync, resolved
  std::unique_ptr<PsSync> ps;  // ps and ps-async modes (made once the parameters are known)
  std::unique_ptr<GradientCompressor> lossy;  // powersgd or int8 (gradient_compressor.h)
  std::unique_ptr<ShardedUpdate> shard;       // options.shard 1, 2 or 3 (sharded_update.h)
  ShardLayout unsharded_layout;               // shard_layout() at shard 0
  LossySpec lossy_defaults;  // start step and min rate, resolved
  bool auto_lossy_pending = false;  // auto --allow-lossy: decided at the first synchronize()
  std::string compression_reason;   // what auto decided and why
  // auto --allow-lossy measures the plain steps before it decides: time
  // waiting in synchronize() against time from one synchronize() to the next.
  static constexpr std::int64_t kAutoMinSteps = 4;
  static constexpr double kAutoLossyShare = 0.2;  // sync's share of the step that makes the wire worth it
  std::int64_t auto_steps = 0;
  double auto_sync_s = 0, auto_period_s = 0;
  SteadyClock::time_point auto_last_entry{};

  Impl(Context& c, torch::optim::Optimizer& o, DistributedOptions opts)
      : ctx(c), optimizer(o), options(std::move(opts)) {
    sync = options.sync.empty() ? ctx.config().sync : options.sync;
    if (sync != "allreduce" && sync != "ps" && sync != "ps-async") {
      throw_invalid_argument("sync mode " + sync + " (--sync or HPCT_SYNC): choose allreduce, ps or ps-async");
    }
    if (options.staleness < 0) options.staleness = static_cast<int>(ctx.config().ps_staleness);
    // The parameter servers take every gradient in step(), pipelined piece
    // by piece; the engine's hooks stay out of it.
    overlap = sync == "allreduce" && (options.overlap ? *options.overlap : overlap_from_config(ctx));
    const std::string text = options.compression.empty() ? ctx.config().compression : options.compression;
    lossy_defaults.start_step =
        options.compression_start_step >= 0 ? options.compression_start_step : ctx.config().compression_start_step;
    lossy_defaults.min_rate =
        options.compression_min_rate > 0 ? options.compression_min_rate : ctx.config().compression_min_rate;
    if (lossy_defaults.start_step < 0 || lossy_defaults.min_rate <= 0) {
      throw_invalid_argument("HPCT_COMPRESSION_START_STEP must be >= 0 and HPCT_COMPRESSION_MIN_RATE > 0");
    }
    if (auto spec = parse_lossy(text)) {
      spec->start_step = lossy_defaults.start_step;
      spec->min_rate = lossy_defaults.min_rate;
      lossy = make_gradient_compressor(*spec);
    } else if (!options.compression.empty()) {
      compression = engine::parse_compression(options.compression);
    }
    auto_lossy_pending = text == "auto" && options.allow_lossy.value_or(ctx.config().allow_lossy);
    if ((lossy || auto_lossy_pending) && sync != "allreduce") {
      throw_invalid_argument("compression " + text + " works with --sync allreduce; the parameter servers " +
                             "take plain gradients (drop --compression or --sync)");
    }
    // Compression needs every gradient at once (a step's two rounds), so
    // the hooks submit nothing; the engine still fuses the rounds.
    if (lossy || auto_lossy_pending) overlap = false;
    if (options.backward_passes_per_step < 1) {
      throw_invalid_argument("backward_passes_per_step must be at least 1");
    }
    check_shard_options(text);
  }

  // What sharding works with (docs/sharding.md).
  void check_shard_options(const std::string& compression_text) const {
    if (options.shard == 0) return;
    if (options.shard < 0 || options.shard > 3) {
      throw_invalid_argument("shard " + std::to_string(options.shard) +
                             ": choose 0 (off), 1 (optimizer state), 2 (and gradients) or 3 (and parameters)");
    }
    if (sync != "allreduce") {
      throw_invalid_argument("shard " + std::to_string(options.shard) + " works with --sync allreduce; with " +
                             sync + " the parameter servers already hold the parameters (drop --shard or --sync)");
    }
    if (lossy || auto_lossy_pending) {
      throw_invalid_argument("shard " + std::to_string(options.shard) + " with compression " + compression_text +
                             ": a lossy mode keeps per-rank residuals of the whole gradient, which sharding "
                             "does not hold; use --compression none, fp16 or bf16 (or auto without --allow-lossy)");
    }
  }

  void on_grad_ready(std::size_t i) {
    std::lock_guard<std::mutex> lk(mu);
    Param& p = params[i];
    ++p.passes;
    if (overlap && !p.submitted && p.passes >= options.backward_passes_per_step) submit(p, i);
  }

  // EXCLUSIVE_LOCKS_REQUIRED(mu)
  void submit(Param& p, std::size_t i) {
    torch::Tensor& g = p.tensor.mutable_grad();
    if (!g.defined()) {
      g = torch::zeros_like(p.tensor, torch::MemoryFormat::Contiguous);
    } else if (!g.is_contiguous()) {
      g = g.contiguous();
    }
    const comm::ReduceOp op = options.average ? comm::ReduceOp::kAvg : comm::ReduceOp::kSum;
    if (shard && shard->stage() >= 2) {
      // Each rank receives only its part (sharded_update.h, step 4).
      p.handle = ctx.engine().reduce_scatter_async(p.engine_name, tensor_ref(g, p.what), shard->grad_split(i),
                                                   shard->grad_out(i), op, compression);
    } else {
      p.handle = ctx.engine().allreduce_async(p.engine_name, tensor_ref(g, p.what), op, compression);
    }
    p.submitted = true;
    order.push_back(i);
  }

  void synchronize() {
    if (ps) {
      if (ps->mode() == ps::Mode::kSync) ps->exchange_gradients(options.average);
      return;  // async: the worker's own gradient feeds its own optimizer step
    }
    if (auto_lossy_pending && auto_steps >= std::max<std::int64_t>(lossy_defaults.start_step, kAutoMinSteps)) {
      decide_auto_lossy();
    }
    if (lossy) {
      reduce_lossy();
      return;
    }
    const auto t0 = SteadyClock::now();
    ParameterGather* gather = shard ? shard->gather() : nullptr;
    if (gather) gather->check_all_ran();
    std::unique_lock<std::mutex> lk(mu);
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!params[i].submitted) submit(params[i], i);
    }
    auto by_arrival = wait_submitted(lk);
    if (gather) gather->release_all();  // the first layer, whose input needed no gradient
    // Stages 2 and 3 keep this rank's part only: the full gradients go
    // (no flat buffer to keep either).
    if (shard && shard->stage() >= 2) {
      shard->release_gradients();
    } else if (!laid_out) {
      lay_out(by_arrival);
    }
    if (auto_lossy_pending) {
      // The first step pays one-off costs (negotiation, auto's probes).
      if (auto_steps >= 1) {
        auto_sync_s += std::chrono::duration<double>(SteadyClock::now() - t0).count();
        auto_period_s += std::chrono::duration<double>(t0 - auto_last_entry).count();
      }
      auto_last_entry = t0;
      ++auto_steps;
    }
  }

  // Waits for the handles submitted so far and resets the step's state.
  std::vector<std::size_t> wait_submitted(std::unique_lock<std::mutex>& lk) {
    std::vector<engine::Handle> hs;
    for (auto i : order) hs.push_back(params[i].handle);
    lk.unlock();
    std::exception_ptr first;
    try {
      wait_all(hs);
    } catch (...) {
      first = std::current_exception();
    }
    lk.lock();
    std::vector<std::size_t> done_order = std::move(order);
    order.clear();
    for (auto& p : params) {
      p.passes = 0;
      p.submitted = false;
      p.handle = engine::Handle();
    }
    if (first) std::rethrow_exception(first);
    return done_order;
  }

  // Every gradient through the lossy compressor (no hook submitted any).
  void reduce_lossy() {
    std::lock_guard<std::mutex> lk(mu);
    std::vector<GradSlot> slots;
    slots.reserve(params.size());
    for (auto& p : params) {
      torch::Tensor& g = p.tensor.mutable_grad();
      if (!g.defined()) {
        g = torch::zeros_like(p.tensor, torch::MemoryFormat::Contiguous);
      } else if (!g.is_contiguous()) {
        g = g.contiguous();
      }
      slots.push_back(GradSlot{p.name, g});
    }
    for (auto& p : params) {
      p.passes = 0;
      p.submitted = false;
    }
    lossy->reduce(ctx.engine(), slots, options.average);
  }

  void decide_auto_lossy();

  // EXCLUSIVE_LOCKS_REQUIRED(mu)
  void lay_out(const std::vector<std::size_t>& by_arrival) {
    laid_out = true;
    std::int64_t total = 0;
    for (auto i : by_arrival) {
      if (params[i].tensor.scalar_type() == torch::kFloat) total += params[i].tensor.numel();
    }
    if (total == 0) return;
    // One flat buffer on the parameters' device; parameters spread over
    // several devices keep their own gradients.
    torch::Device device = torch::kCPU;
    bool first = true;
    for (auto i : by_arrival) {
      const auto& t = params[i].tensor;
      if (t.scalar_type() != torch::kFloat) continue;
      if (!first && t.device() != device) return;
      device = t.device();
      first = false;
    }
    const auto flat_options = torch::TensorOptions().dtype(torch::kFloat).device(device);
    torch::NoGradGuard no_grad;
    flat = torch::empty({total}, flat_options);
    std::int64_t off = 0;
    for (auto i : by_arrival) {
      auto& t = params[i].tensor;
      if (t.scalar_type() != torch::kFloat) continue;
      // Not an autograd view of flat (optimizers detach_() gradients in
      // zero_grad(), which views refuse): a tensor over flat's memory that
      // keeps flat alive.
      torch::Tensor keep = flat;
      auto view = torch::from_blob(flat.data_ptr<float>() + off, t.sizes(),
                                   [keep](void*) mutable { keep.reset(); }, flat_options);
      view.copy_(t.grad());
      t.mutable_grad() = view;
      off += t.numel();
    }
  }
};

// auto --allow-lossy (docs/compression.md), at the same step on every rank
// (a collective): on one host, or when waiting for gradients took under
// kAutoLossyShare of the step on the rank that waited least, the wire is not what limits the job and no
// lossy mode is used; otherwise powersgd:4 when most gradient bytes are
// matrices it cuts by at least the minimum rate, else int8 when most bytes
// are tensors it takes, else none. The ranks' measurements are averaged by
// an allreduce, so every rank decides alike.
void DistributedOptimizer::Impl::decide_auto_lossy() {
  auto_lossy_pending = false;
  LossySpec low_rank = lossy_defaults;
  low_rank.kind = LossySpec::Kind::kPowerSgd;
  LossySpec int8 = lossy_defaults;
  int8.kind = LossySpec::Kind::kInt8;
  auto psgd = make_gradient_compressor(low_rank);
  auto i8 = make_gradient_compressor(int8);
  double total = 0, psgd_bytes = 0, int8_bytes = 0;
  for (const auto& p : params) {
    if (p.tensor.scalar_type() != torch::kFloat) continue;
    const double b = static_cast<double>(p.tensor.numel()) * 4;
    total += b;
    if (psgd->compresses(p.tensor, ctx.size())) psgd_bytes += b;
    if (i8->compresses(p.tensor, ctx.size())) int8_bytes += b;
  }
  const double steps = static_cast<double>(std::max<std::int64_t>(1, auto_steps - 1));
  // The step: averaged over ranks. The wait for gradients: its least over
  // ranks, the slowest rank's, which is the wire's share without the time
  // the others spent waiting for that rank (skew is no reason to compress).
  auto m = allreduce(ctx, "compression/auto_measure", torch::tensor({auto_period_s / steps}, torch::kDouble), true);
  torch::Tensor least = torch::tensor({auto_sync_s / steps}, torch::kDouble);
  ctx.engine()
      .allreduce_async("metric/compression/auto_sync_least", tensor_ref(least, "auto_sync_least"),
                       comm::ReduceOp::kMin)
      .wait();
  const double sync_ms = least.item<double>() * 1e3, step_ms = m[0].item<double>() * 1e3;
  const double share = step_ms > 0 ? sync_ms / step_ms : 0;
  char measured[256];
  std::snprintf(measured, sizeof measured,
                "sync waited %.1f ms of a %.1f ms step (%.0f%%) for %.1f MB of gradients (%.2f Gbit/s)", sync_ms,
                step_ms, share * 100, total / 1e6, sync_ms > 0 ? total * 8 / (sync_ms * 1e6) : 0.0);
  const auto format_rate = [](double r) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", r);
    return std::string(buf);
  };
  std::string pick = "none";
  std::string why;
  if (ctx.size() == 1 || ctx.local_size() == ctx.size()) {
    why = "every rank is on one host (no network to save)";
  } else if (share < kAutoLossyShare) {
    why = std::string(measured) + ": the wire is not what limits the step";
  } else if (psgd_bytes >= 0.5 * total) {
    pick = low_rank.name();
    why = std::string(measured) + "; " + std::to_string(static_cast<int>(100 * psgd_bytes / total)) +
          "% of the bytes are matrices of low-rank compression rate >= " + format_rate(low_rank.min_rate);
  } else if (int8_bytes >= 0.5 * total) {
    pick = "int8";
    why = std::string(measured) + "; most bytes are in tensors low rank does not fit";
  } else {
    why = std::string(measured) + "; most bytes are in tensors too small to compress";
  }
  compression_reason = "auto picked " + pick + ": " + why;
  if (pick == "none") return;
  auto spec = *parse_lossy(pick);
  spec.start_step = lossy_defaults.start_step;
  spec.min_rate = lossy_defaults.min_rate;
  lossy = make_gradient_compressor(spec);
  lossy->set_step(auto_steps);
}

namespace {

class GradReadyHook final : public torch::autograd::FunctionPostHook {
 public:
  GradReadyHook(DistributedOptimizer::Impl* impl, std::size_t index) : impl_(impl), index_(index) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    impl_->on_grad_ready(index_);
    return outputs;
  }

 private:
  DistributedOptimizer::Impl* impl_;
  std::size_t index_;
};

}  // namespace

DistributedOptimizer::DistributedOptimizer(
    Context& ctx, torch::optim::Optimizer& optimizer,
    const torch::OrderedDict<std::string, torch::Tensor>& named_parameters,
    DistributedOptions options)
    : impl_(std::make_unique<Impl>(ctx, optimizer, std::move(options))) {
  for (const auto& item : named_parameters) {
    if (!item.value().requires_grad()) continue;
    Impl::Param p;
    p.name = item.key();
    p.engine_name = "grad/" + p.name;
    p.what = "gradient of " + p.name;
    p.tensor = item.value();
    impl_->params.push_back(std::move(p));
  }
  std::vector<std::pair<std::string, std::int64_t>> sizes;
  for (const auto& p : impl_->params) sizes.emplace_back(p.name, p.tensor.numel());
  impl_->unsharded_layout = ShardLayout(std::move(sizes), 1);
  if (impl_->options.shard > 0) {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& p : impl_->params) named.emplace_back(p.name, p.tensor);
    impl_->shard = std::make_unique<ShardedUpdate>(ctx, optimizer, std::move(named), impl_->options.shard,
                                                   impl_->options.shard_prefetch);
  }
  if (impl_->sync != "allreduce") {
    std::vector<std::string> names;
    std::vector<torch::Tensor> tensors;
    for (const auto& p : impl_->params) {
      names.push_back(p.name);
      tensors.push_back(p.tensor);
    }
    impl_->ps = std::make_unique<PsSync>(ctx, ps::parse_sync_mode(impl_->sync), impl_->options.staleness,
                                         names, tensors);
  }
  for (std::size_t i = 0; i < impl_->params.size(); ++i) {
    auto& p = impl_->params[i];
    p.accumulator = torch::autograd::impl::grad_accumulator(p.tensor);
    p.hook_key = p.accumulator->add_post_hook(std::make_unique<GradReadyHook>(impl_.get(), i));
  }
}

DistributedOptimizer::~DistributedOptimizer() {
  try {
    // No allreduce may still write into gradients once we are gone; nothing
    // new is submitted (other ranks would have to match it).
    std::unique_lock<std::mutex> lk(impl_->mu);
    impl_->wait_submitted(lk);
  } catch (...) {
  }
  for (auto& p : impl_->params) p.accumulator->del_post_hook(p.hook_key);
}

void DistributedOptimizer::synchronize() {
  impl_->synchronize();
  impl_->user_synchronized = true;
}

void DistributedOptimizer::step() {
  // Every rank synchronizes in every step, even one whose backward produced
  // nothing: its zeros are what the other ranks wait for.
  if (!impl_->user_synchronized) impl_->synchronize();
  impl_->user_synchronized = false;
  const bool async = impl_->ps && impl_->ps->mode() == ps::Mode::kAsync;
  if (async) impl_->ps->before_step();
  if (impl_->shard) {
    impl_->shard->step();
  } else {
    impl_->optimizer.step();
  }
  if (async) impl_->ps->after_step();
}

void DistributedOptimizer::end_epoch() {
  if (impl_->ps) impl_->ps->end_epoch();
}

const std::string& DistributedOptimizer::sync_mode() const { return impl_->sync; }

std::string DistributedOptimizer::lossy_compression() const {
  return impl_->lossy ? impl_->lossy->spec().name() : std::string();
}

std::string DistributedOptimizer::compression_reason() const { return impl_->compression_reason; }

std::string DistributedOptimizer::compression_state() const {
  if (!impl_->lossy) return {};
  torch::serialize::OutputArchive ar;
  impl_->lossy->save(ar);
  std::ostringstream ss;
  ar.save_to(ss);
  return ss.str();
}

void DistributedOptimizer::restore_compression_state(const std::string& bytes) {
  if (bytes.empty()) return;
  torch::serialize::InputArchive ar;
  std::istringstream ss(bytes);
  ar.load_from(ss);
  if (!impl_->lossy && impl_->auto_lossy_pending) {
    // auto decided this mode in the run that saved it: keep it.
    auto spec = parse_lossy(saved_compression_mode(ar));
    if (spec) {
      spec->start_step = impl_->lossy_defaults.start_step;
      spec->min_rate = impl_->lossy_defaults.min_rate;
      impl_->lossy = make_gradient_compressor(*spec);
      impl_->auto_lossy_pending = false;
      impl_->compression_reason = "auto picked " + spec->name() + " in the run this one resumes";
    }
  }
  if (!impl_->lossy) {
    throw_invalid_argument("the checkpoint holds a lossy compression state (" + saved_compression_mode(ar) +
                           ") and this run compresses without one: resume with the same --compression");
  }
  impl_->lossy->load(ar);
}

void DistributedOptimizer::zero_grad() { impl_->optimizer.zero_grad(); }

torch::optim::Optimizer& DistributedOptimizer::optimizer() { return impl_->optimizer; }
bool DistributedOptimizer::overlaps() const { return impl_->overlap; }

int DistributedOptimizer::shard_stage() const { return impl_->options.shard; }

const ShardLayout& DistributedOptimizer::shard_layout() const {
  return impl_->shard ? impl_->shard->layout() : impl_->unsharded_layout;
}

torch::optim::Optimizer& DistributedOptimizer::updating_optimizer() {
  return impl_->shard ? impl_->shard->optimizer() : impl_->optimizer;
}

torch::Tensor DistributedOptimizer::run_layer(const std::string& layer, const torch::Tensor& x,
                                             const std::function<torch::Tensor(const torch::Tensor&)>& forward) {
  ParameterGather* gather = impl_->shard ? impl_->shard->gather() : nullptr;
  return gather ? gather->run(layer, x, forward) : forward(x);
}

void DistributedOptimizer::with_full_parameters(const std::function<void()>& f) {
  ParameterGather* gather = impl_->shard ? impl_->shard->gather() : nullptr;
  if (gather) {
    gather->with_all(f);
  } else {
    f();
  }
}

MemoryBytes DistributedOptimizer::memory_bytes() const {
  if (impl_->shard) return impl_->shard->memory_bytes();
  MemoryBytes m;
  for (const auto& p : impl_->params) {
    m.parameters += static_cast<std::int64_t>(p.tensor.nbytes());
    if (p.tensor.grad().defined()) m.gradients += static_cast<std::int64_t>(p.tensor.grad().nbytes());
  }
  m.optimizer_state = optimizer_state_bytes(impl_->optimizer);
  m.parameters_peak = m.parameters;
  return m;
}

}  // namespace hpct
