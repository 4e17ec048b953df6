// A user's own libtorch training program made data-parallel with hpctrain:
// the lines marked "hpctrain" are all it takes. Run it with
//   mpirun -np 2 build/examples/hpct_example_data_parallel
// (or `hpctrain launch -np 2 -- ...`; alone it trains as a single rank).
#include <torch/torch.h>

#include <cstdio>

#include "hpctrain/hpctrain.h"

struct Net : torch::nn::Module {
  Net() {
    fc1 = register_module("fc1", torch::nn::Linear(16, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 1));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

int main() {
  torch::set_num_threads(1);
  auto ctx = hpct::init();                                             // hpctrain
  // A regression problem: y = sum(x) + noise, 4096 samples.
  torch::manual_seed(0);
  auto x = torch::randn({4096, 16});
  auto y = x.sum(1, true) + 0.01 * torch::randn({4096, 1});

  auto net = std::make_shared<Net>();
  hpct::broadcast_parameters(*ctx, *net);                              // hpctrain
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  hpct::DistributedOptimizer opt(*ctx, sgd, net->named_parameters());  // hpctrain
  hpct::DistributedSampler sampler(4096, *ctx);                        // hpctrain

  for (std::uint64_t epoch = 0; epoch < 5; ++epoch) {
    sampler.set_epoch(epoch);
    double last = 0;
    while (auto idx = sampler.next(32)) {
      auto i = torch::tensor(std::vector<std::int64_t>(idx->begin(), idx->end()));
      opt.zero_grad();
      auto loss = torch::mse_loss(net->forward(x.index_select(0, i)), y.index_select(0, i));
      loss.backward();
      opt.step();
      last = loss.item<double>();
    }
    double avg = hpct::allreduce(*ctx, "loss", last);                  // hpctrain
    if (ctx->rank() == 0) std::printf("epoch %llu: loss %.5f (%d ranks)\n", (unsigned long long)epoch, avg, ctx->size());
  }
  return 0;
}
