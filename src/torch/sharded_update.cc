// Stages 1 and 2: the steps of sharded_update.h.
#include "torch/sharded_update.h"

#include <torch/torch.h>

#include <algorithm>
#include <unordered_map>

#include "core/error.h"
#include "engine/engine.h"
#include "torch/context.h"

namespace hpct {
namespace {

using torch::optim::OptimizerParamGroup;

// An optimizer of `user`'s type and defaults over `groups`; InvalidArgument
// for a type whose update is not elementwise.
std::unique_ptr<torch::optim::Optimizer> same_kind(const torch::optim::Optimizer& user,
                                                   const std::vector<OptimizerParamGroup>& groups) {
  namespace O = torch::optim;
  const auto& d = user.defaults();
  if (dynamic_cast<const O::Adam*>(&user)) return std::make_unique<O::Adam>(groups, dynamic_cast<const O::AdamOptions&>(d));
  if (dynamic_cast<const O::AdamW*>(&user)) {
    return std::make_unique<O::AdamW>(groups, dynamic_cast<const O::AdamWOptions&>(d));
  }
  if (dynamic_cast<const O::SGD*>(&user)) return std::make_unique<O::SGD>(groups, dynamic_cast<const O::SGDOptions&>(d));
  if (dynamic_cast<const O::RMSprop*>(&user)) {
    return std::make_unique<O::RMSprop>(groups, dynamic_cast<const O::RMSpropOptions&>(d));
  }
  if (dynamic_cast<const O::Adagrad*>(&user)) {
    return std::make_unique<O::Adagrad>(groups, dynamic_cast<const O::AdagradOptions&>(d));
  }
  throw_invalid_argument(
      "shard: the optimizer must update each element on its own (SGD, Adam, AdamW, RMSprop or Adagrad); "
      "LBFGS and other optimizers need the whole parameter vector: use shard 0");
}

std::int64_t bytes_of(const torch::Tensor& t) { return t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0; }

}  // namespace

std::int64_t optimizer_state_bytes(const torch::optim::Optimizer& opt) {
  namespace O = torch::optim;
  std::int64_t n = 0;
  for (const auto& [key, state] : opt.state()) {
    (void)key;
    const O::OptimizerParamState* s = state.get();
    if (auto* a = dynamic_cast<const O::AdamParamState*>(s)) {
      n += bytes_of(a->exp_avg()) + bytes_of(a->exp_avg_sq()) + bytes_of(a->max_exp_avg_sq());
    } else if (auto* w = dynamic_cast<const O::AdamWParamState*>(s)) {
      n += bytes_of(w->exp_avg()) + bytes_of(w->exp_avg_sq()) + bytes_of(w->max_exp_avg_sq());
    } else if (auto* g = dynamic_cast<const O::SGDParamState*>(s)) {
      n += bytes_of(g->momentum_buffer());
    } else if (auto* r = dynamic_cast<const O::RMSpropParamState*>(s)) {
      n += bytes_of(r->square_avg()) + bytes_of(r->momentum_buffer()) + bytes_of(r->grad_avg());
    } else if (auto* ag = dynamic_cast<const O::AdagradParamState*>(s)) {
      n += bytes_of(ag->sum());
    }
  }
  return n;
}

ShardedUpdate::ShardedUpdate(Context& ctx, torch::optim::Optimizer& user,
                             std::vector<std::pair<std::string, torch::Tensor>> params, int stage, bool prefetch)
    : ctx_(ctx), user_(user), params_(std::move(params)), stage_(stage), prefetch_(prefetch) {
  if (stage < 1 || stage > 3) {
    throw_invalid_argument("shard " + std::to_string(stage) + ": choose 1, 2 or 3");
  }
  std::vector<std::pair<std::string, std::int64_t>> sizes;
  for (const auto& [name, t] : params_) {
    if (t.scalar_type() != torch::kFloat || !t.device().is_cpu()) {
      throw_invalid_argument("shard: parameter " + name + " is " + std::string(c10::toString(t.scalar_type())) +
                             " on " + t.device().str() +
                             "; sharding takes float32 parameters on the CPU (use shard 0 for others)");
    }
    sizes.emplace_back(name, t.numel());
  }
  // Adagrad makes its state (step 0) in its constructor: that is no
  // history yet, and this rank's part of it is made again for its pieces.
  if (auto* adagrad = dynamic_cast<torch::optim::Adagrad*>(&user_)) {
    bool fresh = true;
    for (const auto& [key, st] : adagrad->state()) {
      (void)key;
      fresh = fresh && static_cast<const torch::optim::AdagradParamState&>(*st).step() == 0;
    }
    if (fresh) adagrad->state().clear();
  }
  if (!user_.state().empty()) {
    throw_invalid_argument("shard: the optimizer already holds state; sharding keeps each rank's part of it "
                           "from the first step on, so pass an optimizer that has not stepped yet");
  }
  layout_ = ShardLayout(std::move(sizes), ctx.size());
  // Every rank must lay out the same elements: compare the totals first.
  torch::Tensor mine = torch::tensor({layout_.total()}, torch::kLong);
  auto h = ctx.engine().allgather_async("shard/layout_total", tensor_ref(mine, "shard layout size"));
  h.wait();
  const auto* totals = reinterpret_cast<const std::int64_t*>(h.gathered().data());
  for (int r = 0; r < ctx.size(); ++r) {
    if (totals[r] != layout_.total()) {
      throw_mismatch("shard: rank " + std::to_string(r) + " has " + std::to_string(totals[r]) +
                     " trainable parameter elements and rank " + std::to_string(ctx.rank()) + " has " +
                     std::to_string(layout_.total()) + ": every rank must build the same model");
    }
  }
  pieces_ = layout_.owned_pieces(ctx.rank());
  if (stage_ >= 2) {
    grad_part_ = torch::empty({layout_.count(ctx.rank())}, torch::kFloat);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      const std::int64_t off = layout_.param_offset(i), numel = params_[i].second.numel();
      std::vector<std::int64_t> split;
      for (int p = 0; p < ctx.size(); ++p) split.push_back(std::clamp(layout_.begin(p) - off, std::int64_t{0}, numel));
      split.push_back(numel);
      splits_.push_back(std::move(split));
    }
  }
  flatten_parameters();
  build_optimizer();
  if (stage_ == 3) gather_ = std::make_unique<ParameterGather>(ctx_, layout_, params_, flat_, prefetch_);
}

void ShardedUpdate::flatten_parameters() {
  torch::NoGradGuard no_grad;
  if (stage_ == 3) {  // this rank's range only
    const std::int64_t begin = layout_.begin(ctx_.rank());
    flat_ = torch::empty({layout_.count(ctx_.rank())}, torch::kFloat);
    for (const auto& piece : pieces_) {
      flat_.narrow(0, piece.flat_offset - begin, piece.numel)
          .copy_(params_[piece.param_index].second.detach().reshape({-1}).narrow(0, piece.offset, piece.numel));
    }
    return;
  }
  flat_ = torch::empty({layout_.total()}, torch::kFloat);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i].second;
    auto view = flat_.narrow(0, layout_.param_offset(i), p.numel()).view(p.sizes());
    view.copy_(p);
    // The module's, autograd's and the user optimizer's tensor stays the
    // same object; only its memory is now part of flat_.
    p.set_data(view);
  }
}

void ShardedUpdate::build_optimizer() {
  if (pieces_.empty()) return;
  std::unordered_map<const void*, std::size_t> group_of;
  auto& user_groups = user_.param_groups();
  for (std::size_t g = 0; g < user_groups.size(); ++g) {
    for (const auto& t : user_groups[g].params()) group_of[t.unsafeGetTensorImpl()] = g;
  }
  std::vector<std::vector<torch::Tensor>> per_group(user_groups.size());
  for (const auto& piece : pieces_) {
    const auto& p = params_[piece.param_index];
    auto it = group_of.find(p.second.unsafeGetTensorImpl());
    if (it == group_of.end()) {
      throw_invalid_argument("shard: parameter " + p.first + " is not in the optimizer; build the optimizer " +
                             "over every trainable parameter");
    }
    const std::int64_t at = stage_ == 3 ? piece.flat_offset - layout_.begin(ctx_.rank()) : piece.flat_offset;
    auto t = flat_.narrow(0, at, piece.numel).detach().requires_grad_(true);
    piece_params_.push_back(t);
    per_group[it->second].push_back(t);
  }
  std::vector<OptimizerParamGroup> groups;
  for (std::size_t g = 0; g < per_group.size(); ++g) {
    if (per_group[g].empty()) continue;
    groups.emplace_back(per_group[g], user_groups[g].options().clone());
    group_of_piece_group_.push_back(g);
  }
  shard_opt_ = same_kind(user_, groups);
}

void ShardedUpdate::step() {
  torch::NoGradGuard no_grad;
  attach_gradients();
  if (shard_opt_) {
    copy_options();
    shard_opt_->step();
  }
  if (stage_ < 3) gather_parameters();
}

float* ShardedUpdate::grad_out(std::size_t i) {
  const int r = ctx_.rank();
  const auto& split = splits_[i];
  if (split[r + 1] == split[r]) return nullptr;
  // This rank's part of parameter i starts at flat element param_offset + split[r].
  return grad_part_.data_ptr<float>() + (layout_.param_offset(i) + split[r] - layout_.begin(r));
}

void ShardedUpdate::release_gradients() {
  for (auto& [name, p] : params_) p.mutable_grad() = torch::Tensor();
}

void ShardedUpdate::attach_gradients() {
  const std::int64_t begin = layout_.begin(ctx_.rank());
  // Stages 2 and 3: grad_part_ was written by the reduce-scatters.
  if (stage_ >= 2) release_gradients();
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    const auto& piece = pieces_[i];
    piece_params_[i].mutable_grad() =
        stage_ >= 2 ? grad_part_.narrow(0, piece.flat_offset - begin, piece.numel)
                    : params_[piece.param_index].second.grad().detach().reshape({-1}).narrow(0, piece.offset,
                                                                                          piece.numel);
  }
}

// The user's optimizer is where a schedule sets the learning rate (and any
// other option): its groups' options are copied before each step.
void ShardedUpdate::copy_options() {
  auto& mine = shard_opt_->param_groups();
  const auto& user_groups = user_.param_groups();
  for (std::size_t i = 0; i < mine.size(); ++i) {
    mine[i].set_options(user_groups[group_of_piece_group_[i]].options().clone());
  }
}

void ShardedUpdate::gather_parameters() {
  const int rank = ctx_.rank();
  // A copy: the all-gather writes every range of flat_, this one included.
  torch::Tensor part = flat_.narrow(0, layout_.begin(rank), layout_.count(rank)).clone();
  float* out = flat_.data_ptr<float>();
  const std::int64_t total = layout_.total();
  auto h = ctx_.engine().allgather_async(
      "shard/parameters", tensor_ref(part, "this rank's updated parameters"),
      [out, total](const std::vector<std::int64_t>& shape) -> void* {
        // The layouts' totals were compared at set-up, so every rank's
        // ranges add up to flat_.
        return shape.size() == 1 && shape[0] == total ? out : nullptr;
      });
  h.wait();
}

MemoryBytes ShardedUpdate::memory_bytes() const {
  MemoryBytes m;
  for (const auto& [name, p] : params_) {
    if (!gather_) m.parameters += bytes_of(p);
    m.gradients += p.grad().defined() ? p.grad().numel() * 4 : 0;
  }
  m.parameters_peak = m.parameters;
  if (gather_) {
    m.parameters = gather_->live_bytes();
    m.parameters_peak = gather_->peak_bytes();
  }
  m.gradients += bytes_of(grad_part_);
  m.optimizer_state = shard_opt_ ? optimizer_state_bytes(*shard_opt_) : 0;
  return m;
}

}  // namespace hpct
