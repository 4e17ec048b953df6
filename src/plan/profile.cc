#include "plan/profile.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "core/error.h"
#include "core/stats.h"
#include "data/formats/idx.h"
#include "train/models.h"

namespace hpct::plan {
namespace {

using Clock = std::chrono::steady_clock;

double secs(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

Profile profile_model(const ProfileOptions& o) {
  if (o.steps < 1 || o.batch < 1 || o.threads < 1 || o.warmup < 0) {
    throw_invalid_argument(
        "profile: steps, batch and threads must be at least 1 and warmup at least 0");
  }
  at::set_num_threads(o.threads);
  torch::manual_seed(42);
  auto model = train::make_model(o.model, 1);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto gen = at::detail::createCPUGenerator(1);
  // The training set bench train reads, normalized alike: the time of a
  // step does not depend on the pixels much, but it is the same work.
  auto [ip, lp] =
      data::fashion_mnist_files(o.data_dir.empty() ? data::kFashionMnistDir : o.data_dir, "train");
  data::IdxArray im = data::read_idx(ip);
  data::IdxArray lb = data::read_idx(lp);
  const auto n = static_cast<std::int64_t>(im.items());
  auto images =
      ((torch::from_blob(im.values.data(), {n, 1, 28, 28}, torch::kUInt8).to(torch::kFloat) /
            255.0 -
        0.2860) /
       0.3530);
  auto labels = torch::from_blob(lb.values.data(), {n}, torch::kUInt8).to(torch::kLong);

  // The moment each gradient is ready, per step (hooks fire during backward).
  const auto named = model->named_parameters();
  std::vector<std::string> names;
  std::vector<std::int64_t> bytes;
  std::map<size_t, std::vector<double>> ready;  // parameter index -> ready times
  std::vector<std::pair<size_t, Clock::time_point>> fired;
  for (size_t k = 0; k < named.size(); ++k) {
    names.push_back(named[k].key());
    bytes.push_back(named[k].value().numel() *
                    static_cast<std::int64_t>(named[k].value().element_size()));
    named[k].value().register_hook([k, &fired](torch::Tensor g) {
      fired.emplace_back(k, Clock::now());
      return g;
    });
  }
  std::vector<double> data, fwd, bwd, opt;
  std::vector<std::vector<size_t>> orders;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    fired.clear();
    const auto t0 = Clock::now();
    auto idx = torch::randint(0, n, {o.batch}, gen, torch::kLong);
    auto x = images.index_select(0, idx);
    auto y = labels.index_select(0, idx);
    const auto t1 = Clock::now();
    sgd.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    const auto t2 = Clock::now();
    loss.backward();
    const auto t3 = Clock::now();
    sgd.step();
    loss.item<double>();
    const auto t4 = Clock::now();
    if (s < o.warmup) continue;
    data.push_back(secs(t0, t1));
    fwd.push_back(secs(t1, t2));
    bwd.push_back(secs(t2, t3));
    opt.push_back(secs(t3, t4));
    std::vector<size_t> order;
    for (const auto& [k, t] : fired) {
      ready[k].push_back(secs(t2, t));
      order.push_back(k);
    }
    orders.push_back(order);
  }
  Profile p;
  p.model = o.model;
  p.batch = o.batch;
  p.data_s = median(data);
  p.forward_s = median(fwd);
  p.backward_s = median(bwd);
  p.optimizer_s = median(opt);
  // Backward order as the last step saw it; ready times are medians.
  for (size_t k : orders.back()) {
    p.gradients.push_back(
        {names[k], static_cast<double>(bytes[k]), std::min(median(ready[k]), p.backward_s)});
  }
  return p;
}

}  // namespace hpct::plan
