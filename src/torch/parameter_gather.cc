// Stage 3's gathering of layers: parameter_gather.h.
#include "torch/parameter_gather.h"

#include <torch/torch.h>

#include "core/error.h"
#include "torch/context.h"

namespace hpct {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

ParameterGather* gather_of(AutogradContext* c) {
  return reinterpret_cast<ParameterGather*>(c->saved_data["gather"].toInt());
}

// On a layer's output: its backward runs just before the layer's backward.
struct GatherBeforeBackward : torch::autograd::Function<GatherBeforeBackward> {
  static torch::Tensor forward(AutogradContext* c, const torch::Tensor& y, ParameterGather* g, std::int64_t layer) {
    c->saved_data["gather"] = reinterpret_cast<std::int64_t>(g);
    c->saved_data["layer"] = layer;
    return y.view_as(y);
  }
  static variable_list backward(AutogradContext* c, variable_list grads) {
    gather_of(c)->before_backward(static_cast<std::size_t>(c->saved_data["layer"].toInt()));
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

// On a layer's input: its backward runs once the layer's backward is done.
struct ReleaseAfterBackward : torch::autograd::Function<ReleaseAfterBackward> {
  static torch::Tensor forward(AutogradContext* c, const torch::Tensor& x, ParameterGather* g, std::int64_t layer) {
    c->saved_data["gather"] = reinterpret_cast<std::int64_t>(g);
    c->saved_data["layer"] = layer;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* c, variable_list grads) {
    gather_of(c)->after_backward(static_cast<std::size_t>(c->saved_data["layer"].toInt()));
    return {grads[0], torch::Tensor(), torch::Tensor()};
  }
};

std::string layer_of(const std::string& param) {
  const auto dot = param.find('.');
  return dot == std::string::npos ? param : param.substr(0, dot);
}

}  // namespace

ParameterGather::ParameterGather(Context& ctx, const ShardLayout& layout,
                                 std::vector<std::pair<std::string, torch::Tensor>> params, torch::Tensor shard,
                                 bool prefetch)
    : ctx_(ctx), layout_(layout), params_(std::move(params)), shard_(std::move(shard)), prefetch_(prefetch) {
  released_storage_ = torch::zeros({1}, torch::kFloat);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const std::string name = layer_of(params_[i].first);
    if (layers_.empty() || layers_.back().name != name) {
      for (const auto& l : layers_) {
        if (l.name == name) {
          throw_invalid_argument("shard 3: the parameters of layer " + name +
                                 " are not adjacent in named_parameters(); register each layer's parameters "
                                 "in one child module");
        }
      }
      Layer l;
      l.name = name;
      l.begin = layout_.param_offset(i);
      layers_.push_back(std::move(l));
    }
    layers_.back().params.push_back(i);
    layers_.back().end = layout_.param_offset(i) + params_[i].second.numel();
  }
  for (const auto& l : layers_) {
    prefetch_budget_ = std::max<std::int64_t>(prefetch_budget_, (l.end - l.begin) * static_cast<std::int64_t>(sizeof(float)));
  }
  std::lock_guard<std::mutex> lk(mu_);
  account(static_cast<std::int64_t>(shard_.nbytes()));
  torch::NoGradGuard no_grad;
  for (auto& [name, p] : params_) p.set_data(released_storage_.expand(p.sizes()));
}

ParameterGather::~ParameterGather() {
  try {
    release_all();  // no gather may still write into a buffer once we are gone
  } catch (...) {
  }
}

void ParameterGather::account(std::int64_t delta) {
  live_ += delta;
  peak_ = std::max(peak_, live_);
}

void ParameterGather::start_gather(std::size_t k) {
  Layer& l = layers_[k];
  if (l.full.defined() || l.pending.valid()) return;
  const int rank = ctx_.rank();
  const std::int64_t b = layout_.begin(rank);
  const std::int64_t s = std::max(b, l.begin), t = std::min(layout_.end(rank), l.end);
  l.contribution = shard_.narrow(0, s < t ? s - b : 0, s < t ? t - s : 0);
  l.full = torch::empty({l.end - l.begin}, torch::kFloat);
  account(static_cast<std::int64_t>(l.full.nbytes()));
  float* out = l.full.data_ptr<float>();
  l.pending = ctx_.engine().allgather_async("shard/layer/" + l.name,
                                            tensor_ref(l.contribution, "this rank's part of layer " + l.name),
                                            [out](const std::vector<std::int64_t>&) -> void* { return out; });
}

void ParameterGather::prefetch(std::size_t k) {
  if (!prefetch_ || k >= layers_.size()) return;
  const Layer& l = layers_[k];
  if (l.full.defined() || l.pending.valid()) return;
  const std::int64_t gathered = live_ - static_cast<std::int64_t>(shard_.nbytes());
  if (gathered + (l.end - l.begin) * static_cast<std::int64_t>(sizeof(float)) > prefetch_budget_) return;
  start_gather(k);
}

void ParameterGather::materialize(std::unique_lock<std::mutex>& lk, std::size_t k) {
  start_gather(k);
  if (layers_[k].pending.valid()) {
    engine::Handle h = layers_[k].pending;
    lk.unlock();
    h.wait();
    lk.lock();
    layers_[k].pending = engine::Handle();
    layers_[k].contribution = torch::Tensor();
  }
  Layer& l = layers_[k];
  torch::NoGradGuard no_grad;
  for (auto i : l.params) {
    auto& p = params_[i].second;
    p.set_data(l.full.narrow(0, layout_.param_offset(i) - l.begin, p.numel()).view(p.sizes()));
  }
}

void ParameterGather::release(std::size_t k) {
  Layer& l = layers_[k];
  if (l.pending.valid()) {
    // The engine writes into l.full until the gather is done.
    l.pending.wait();
    l.pending = engine::Handle();
    l.contribution = torch::Tensor();
  }
  if (!l.full.defined()) return;
  torch::NoGradGuard no_grad;
  for (auto i : l.params) {
    auto& p = params_[i].second;
    p.set_data(released_storage_.expand(p.sizes()));
  }
  account(-static_cast<std::int64_t>(l.full.nbytes()));
  l.full = torch::Tensor();
}

torch::Tensor ParameterGather::run(const std::string& layer, const torch::Tensor& x, const LayerForward& f) {
  std::size_t k = 0;
  {
    std::unique_lock<std::mutex> lk(mu_);
    while (k < layers_.size() && layers_[k].name != layer) ++k;
    if (k == layers_.size()) {
      throw_invalid_argument("shard 3: no layer " + layer + " (layers are the model's top-level children " +
                             "with parameters, e.g. " + layers_.front().name + ")");
    }
    materialize(lk, k);
    prefetch(k + 1);  // one layer ahead
    layers_[k].ran = true;
  }
  const bool graph = torch::GradMode::is_enabled();
  torch::Tensor in = graph && x.requires_grad() ? ReleaseAfterBackward::apply(x, this, static_cast<std::int64_t>(k)) : x;
  torch::Tensor y = f(in);
  {
    std::lock_guard<std::mutex> lk(mu_);
    release(k);
  }
  if (graph && y.requires_grad()) y = GatherBeforeBackward::apply(y, this, static_cast<std::int64_t>(k));
  return y;
}

void ParameterGather::before_backward(std::size_t k) {
  std::unique_lock<std::mutex> lk(mu_);
  materialize(lk, k);
  if (k > 0) prefetch(k - 1);  // the layer backward reaches next
}

void ParameterGather::after_backward(std::size_t k) {
  std::lock_guard<std::mutex> lk(mu_);
  release(k);
}

void ParameterGather::with_all(const std::function<void()>& f) {
  {
    std::unique_lock<std::mutex> lk(mu_);
    for (std::size_t k = 0; k < layers_.size(); ++k) start_gather(k);
    for (std::size_t k = 0; k < layers_.size(); ++k) materialize(lk, k);
  }
  try {
    f();
  } catch (...) {
    release_all();
    throw;
  }
  release_all();
}

void ParameterGather::release_all() {
  std::lock_guard<std::mutex> lk(mu_);
  for (std::size_t k = 0; k < layers_.size(); ++k) release(k);
}

void ParameterGather::check_all_ran() {
  std::lock_guard<std::mutex> lk(mu_);
  for (auto& l : layers_) {
    if (!l.ran && l.end > l.begin) {
      throw_invalid_argument("shard 3: layer " + l.name + " computed without its parameters: call its forward " +
                             "through DistributedOptimizer::run_layer(\"" + l.name + "\", x, forward)");
    }
  }
  for (auto& l : layers_) l.ran = false;
}

std::int64_t ParameterGather::live_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return live_;
}

std::int64_t ParameterGather::peak_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return peak_;
}

}  // namespace hpct
