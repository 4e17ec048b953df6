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
#include <thread>

#include "engine/engine.h"
#include "torch/context.h"
#include "ps/job.h"
#include "torch/ps_sync.h"

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
    std::shared_ptr<torch::autograd::Node> accumulator;  // kept alive: the Variable holds it weakly
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
    if (!options.compression.empty()) compression = engine::parse_compression(options.compression);
    if (options.backward_passes_per_step < 1) {
      throw_invalid_argument("backward_passes_per_step must be at least 1");
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
    p.handle = ctx.engine().allreduce_async(
        p.engine_name, tensor_ref(g, p.what),
        options.average ? comm::ReduceOp::kAvg : comm::ReduceOp::kSum, compression);
    p.submitted = true;
    order.push_back(i);
  }

  void synchronize() {
    if (ps) {
      if (ps->mode() == ps::Mode::kSync) ps->exchange_gradients(options.average);
      return;  // async: the worker's own gradient feeds its own optimizer step
    }
    std::unique_lock<std::mutex> lk(mu);
    for (std::size_t i = 0; i < params.size(); ++i) {
      if (!params[i].submitted) submit(params[i], i);
    }
    auto by_arrival = wait_submitted(lk);
    if (!laid_out) lay_out(by_arrival);
  }

  // Waits for the handles submitted so far and resets the step's state.
  std::vector<std::size_t> wait_submitted(std::unique_lock<std::mutex>& lk) {
    std::vector<engine::Handle> hs;
    for (auto i : order) hs.push_back(params[i].handle);
    lk.unlock();
    std::exception_ptr first;
    for (auto& h : hs) {
      try {
        h.wait();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
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

  // EXCLUSIVE_LOCKS_REQUIRED(mu)
  void lay_out(const std::vector<std::size_t>& by_arrival) {
    laid_out = true;
    std::int64_t total = 0;
    for (auto i : by_arrival) {
      if (params[i].tensor.scalar_type() == torch::kFloat) total += params[i].tensor.numel();
    }
    if (total == 0) return;
    torch::NoGradGuard no_grad;
    flat = torch::empty({total}, torch::kFloat);
    std::int64_t off = 0;
    for (auto i : by_arrival) {
      auto& t = params[i].tensor;
      if (t.scalar_type() != torch::kFloat) continue;
      // Not an autograd view of flat (optimizers detach_() gradients in
      // zero_grad(), which views refuse): a tensor over flat's memory that
      // keeps flat alive.
      torch::Tensor keep = flat;
      auto view = torch::from_blob(flat.data_ptr<float>() + off, t.sizes(),
                                   [keep](void*) mutable { keep.reset(); }, torch::kFloat);
      view.copy_(t.grad());
      t.mutable_grad() = view;
      off += t.numel();
    }
  }
};

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
  impl_->optimizer.step();
  if (async) impl_->ps->after_step();
}

void DistributedOptimizer::end_epoch() {
  if (impl_->ps) impl_->ps->end_epoch();
}

const std::string& DistributedOptimizer::sync_mode() const { return impl_->sync; }

void DistributedOptimizer::zero_grad() { impl_->optimizer.zero_grad(); }

torch::optim::Optimizer& DistributedOptimizer::optimizer() { return impl_->optimizer; }
bool DistributedOptimizer::overlaps() const { return impl_->overlap; }

}  // namespace hpct
