// Stage 3 of sharded data parallelism (docs/sharding.md): each rank holds
// only its range of the parameters (ShardLayout); a layer's full parameters
// exist only while its forward or its backward runs.
//
// Layers: the top-level children of the model, found from the parameter
// names (the part before the first '.': "fc1.weight" is layer "fc1"). In
// layout order each layer's parameters are one contiguous range of the flat
// vector, so gathering a layer is one all-gather in which every rank sends
// its intersection with that range (possibly nothing) and the result, in
// rank order, is the layer's flat parameters.
//
// libtorch has no module hooks, so the model's forward calls each layer
// through run(layer, x, f):
//   forward:  wait for the layer's gather (prefetched by the previous
//             layer's run, or started now), start the next layer's gather
//             (prefetch, one layer ahead in layout order), point the layer's
//             parameters at the gathered buffer (set_data), compute f(x),
//             then release them: each parameter's data becomes a zero-stride
//             view of one element (full shape, 4 bytes), so the module and
//             autograd keep the same tensors and shapes while the buffer is
//             freed.
//   backward: an identity autograd Function on the layer's output runs
//             before the layer's backward: it gathers the layer again (the
//             saved tensors are the parameters themselves, read at backward
//             time) and starts the previous layer's gather; one on the
//             layer's input runs after it and releases the layer (the
//             gradient accumulators run first: they have the highest
//             priority in libtorch's autograd queue). A first layer, whose
//             input needs no gradient, is released by release_all() (the
//             optimizer's synchronize()).
// Live at most: this rank's range plus the largest layer, with or without
// prefetch. A prefetch starts only when the layer in use and the next one
// together take no more than the largest layer's bytes: gathering the next
// layer while this one computes would otherwise hold two large layers at
// once (a model of equal layers then gathers each when it is needed, as
// without prefetch; small layers next to large ones are prefetched).
// Gradients are full-sized while backward runs; they are reduced and cut to
// this rank's range as at stage 2.
//
// A layer whose forward did not go through run() computes with the released
// view (one zero element, stride 0); check_all_ran() (called by synchronize())
// raises InvalidArgument naming it instead of training on garbage.
//
// Threads: run() on the training thread; the backward Functions on
// autograd's thread (the engine is thread-safe; state here is guarded).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "hpctrain/hpctrain.h"

namespace hpct {

class ParameterGather {
 public:
  // params in layout order; shard: this rank's range of the flat vector
  // (layout.count(rank) elements, updated in place by the optimizer). The
  // parameters hold their full values on entry; they are released here.
  ParameterGather(Context& ctx, const ShardLayout& layout,
                  std::vector<std::pair<std::string, torch::Tensor>> params, torch::Tensor shard,
                  bool prefetch = true);
  ParameterGather(const ParameterGather&) = delete;
  ParameterGather& operator=(const ParameterGather&) = delete;
  ~ParameterGather();

  using LayerForward = std::function<torch::Tensor(const torch::Tensor&)>;
  // f(x) with layer's full parameters present (see above). InvalidArgument
  // for a name that is not a layer.
  torch::Tensor run(const std::string& layer, const torch::Tensor& x, const LayerForward& f);

  // f() with every layer's full parameters present (saving, exporting,
  // comparing), then released again. A collective.
  void with_all(const std::function<void()>& f);
  // Releases every gathered layer (waiting for prefetches in flight).
  void release_all();
  // InvalidArgument naming the first layer with parameters whose forward
  // did not run through run() since the last call; resets the record.
  void check_all_ran();

  // Parameter bytes live now (the range plus gathered layers) and the most
  // since construction.
  std::int64_t live_bytes() const;
  std::int64_t peak_bytes() const;

  // Backward's hooks (the autograd Functions in parameter_gather.cc).
  void before_backward(std::size_t layer);
  void after_backward(std::size_t layer);

 private:
  struct Layer {
    std::string name;
    std::int64_t begin = 0, end = 0;  // flat range
    std::vector<std::size_t> params;  // indices into params_
    torch::Tensor full;               // gathered; undefined when released
    torch::Tensor contribution;       // this rank's part in flight
    engine::Handle pending;           // a gather in flight into `full`
    bool ran = false;                 // its forward went through run()
  };

  // mu_ held for each.
  void start_gather(std::size_t layer);
  // start_gather when prefetch is on and the gathered layers stay within
  // prefetch_budget_ with it.
  void prefetch(std::size_t layer);
  void materialize(std::unique_lock<std::mutex>& lk, std::size_t layer);
  void release(std::size_t layer);
  void account(std::int64_t delta);

  Context& ctx_;
  const ShardLayout& layout_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  torch::Tensor shard_;
  torch::Tensor released_storage_;  // the one element released parameter views (zero stride, full shape)
  bool prefetch_;
  std::int64_t prefetch_budget_ = 0;  // the largest layer's bytes: the most gathered at once
  mutable std::mutex mu_;
  std::vector<Layer> layers_;  // GUARDED_BY(mu_)
  std::int64_t live_ = 0, peak_ = 0;  // GUARDED_BY(mu_)
};

}  // namespace hpct
