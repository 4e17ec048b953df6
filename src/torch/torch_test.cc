// The libtorch glue on real Gloo ranks living as threads of this process:
// data-parallel training ends with parameters bitwise identical on every
// rank and equal to one process training on the concatenated batch (MLP and
// CNN, 1-4 ranks, fusion on/off, overlap on/off, gradient accumulation,
// unused parameters); parameter and optimizer-state broadcast; metrics; the
// sampler's PyTorch semantics. Models are small so the suite stays fast; the
// MPI backend runs the same training check in tests/engine_mpi_test.cc.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>
#include <set>

#include "comm/testing/thread_world.h"
#include "hpctrain/hpctrain.h"
#include "torch/context.h"

namespace hpct {
namespace {

struct SmallMlp : torch::nn::Module {
  SmallMlp() {
    fc1 = register_module("fc1", torch::nn::Linear(20, 32));
    fc2 = register_module("fc2", torch::nn::Linear(32, 16));
    fc3 = register_module("fc3", torch::nn::Linear(16, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x.reshape({x.size(0), -1}))))));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

struct SmallCnn : torch::nn::Module {
  SmallCnn() {
    c1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)));
    c2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(4, 8, 3).padding(1)));
    fc = register_module("fc1", torch::nn::Linear(8 * 2 * 2, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(c1(x)), 2);
    x = torch::max_pool2d(torch::relu(c2(x)), 2);
    return fc(x.flatten(1));
  }
  torch::nn::Conv2d c1{nullptr}, c2{nullptr};
  torch::nn::Linear fc{nullptr};
};

// A model with a branch only some ranks use.
struct Branchy : torch::nn::Module {
  Branchy() {
    a = register_module("a", torch::nn::Linear(20, 10));
    b = register_module("b", torch::nn::Linear(20, 10));
  }
  torch::Tensor forward(torch::Tensor x, bool use_b) {
    x = x.reshape({x.size(0), -1});
    return use_b ? a(x) + b(x) : a(x);
  }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

Config test_config(std::int64_t fusion_bytes) {
  Config c;
  c.cycle_ms = 1;
  c.fusion_bytes = fusion_bytes;
  return c;
}

Logger quiet(int rank) { return Logger(LogLevel::kWarn, "all", rank, [](const std::string&) {}); }

// Batch `step` of global size n: inputs of shape `in_shape`, labels 0..9.
std::pair<torch::Tensor, torch::Tensor> batch(int step, std::int64_t n, std::vector<std::int64_t> in_shape) {
  auto gen = at::detail::createCPUGenerator(1000 + static_cast<std::uint64_t>(step));
  in_shape.insert(in_shape.begin(), n);
  auto x = torch::randn(in_shape, gen);
  auto y = torch::randint(0, 10, {n}, gen, torch::kLong);
  return {x, y};
}

torch::Tensor flat_params(torch::nn::Module& m) {
  std::vector<torch::Tensor> ps;
  for (auto& p : m.parameters()) ps.push_back(p.detach().reshape({-1}));
  return torch::cat(ps);
}

struct TrainCase {
  std::string model;  // mlp | cnn
  int ranks = 2;
  bool overlap = true;
  std::int64_t fusion_bytes = 64 << 20;
  int passes = 1;  // backward passes per step
  int steps = 4;
  std::int64_t batch_per_rank = 4;
};

template <typename M>
torch::Tensor train_reference(const TrainCase& c, std::vector<std::int64_t> in_shape) {
  torch::manual_seed(7);
  auto m = std::make_shared<M>();
  torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int s = 0; s < c.steps; ++s) {
    auto [x, y] = batch(s, c.batch_per_rank * c.ranks, in_shape);
    sgd.zero_grad();
    torch::nn::functional::cross_entropy(m->forward(x), y).backward();
    sgd.step();
  }
  return flat_params(*m);
}

template <typename M>
void check_training(const TrainCase& c, std::vector<std::int64_t> in_shape) {
  torch::Tensor want = train_reference<M>(c, in_shape);
  std::mutex mu;
  std::vector<torch::Tensor> got(static_cast<size_t>(c.ranks));
  comm::testing::run_gloo_world(c.ranks, Millis(30000), [&](comm::GlooCommunicator& comm) {
    auto ctx = make_context(comm, test_config(c.fusion_bytes), quiet(comm.rank()));
    const int r = ctx->rank();
    torch::Tensor start;
    std::shared_ptr<M> m;
    {
      std::lock_guard<std::mutex> lk(mu);  // torch::manual_seed is process-wide
      torch::manual_seed(7 + static_cast<std::uint64_t>(r));  // different on purpose: broadcast fixes it
      m = std::make_shared<M>();
    }
    if (r == 0) {
      std::lock_guard<std::mutex> lk(mu);
      torch::manual_seed(7);
      auto ref = std::make_shared<M>();
      torch::NoGradGuard ng;
      auto src = ref->parameters();
      auto dst = m->parameters();
      for (size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
    }
    broadcast_parameters(*ctx, *m);
    torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    DistributedOptions o;
    o.overlap = c.overlap;
    o.backward_passes_per_step = c.passes;
    DistributedOptimizer opt(*ctx, sgd, m->named_parameters(), o);
    for (int s = 0; s < c.steps; ++s) {
      auto [x, y] = batch(s, c.batch_per_rank * c.ranks, in_shape);
      auto xs = x.narrow(0, r * c.batch_per_rank, c.batch_per_rank);
      auto ys = y.narrow(0, r * c.batch_per_rank, c.batch_per_rank);
      opt.zero_grad();
      const std::int64_t micro = c.batch_per_rank / c.passes;
      for (int p = 0; p < c.passes; ++p) {
        auto loss = torch::nn::functional::cross_entropy(m->forward(xs.narrow(0, p * micro, micro)),
                                                         ys.narrow(0, p * micro, micro));
        (loss / c.passes).backward();
      }
      opt.step();
    }
    std::lock_guard<std::mutex> lk(mu);
    got[static_cast<size_t>(r)] = flat_params(*m);
  });
  for (int r = 0; r < c.ranks; ++r) {
    ASSERT_TRUE(torch::equal(got[static_cast<size_t>(r)], got[0]))
        << c.model << ": rank " << r << "'s parameters differ from rank 0's";
  }
  EXPECT_TRUE(torch::allclose(got[0], want, 1e-4, 1e-5))
      << c.model << " ranks " << c.ranks << ": max diff from the single-process reference "
      << (got[0] - want).abs().max().item<float>();
}

class TrainingMatchesOneProcess : public ::testing::TestWithParam<int> {};

TEST_P(TrainingMatchesOneProcess, Mlp) {
  TrainCase c{"mlp", GetParam()};
  check_training<SmallMlp>(c, {20});
}

TEST_P(TrainingMatchesOneProcess, Cnn) {
  TrainCase c{"cnn", GetParam()};
  check_training<SmallCnn>(c, {1, 8, 8});
}

INSTANTIATE_TEST_SUITE_P(Ranks, TrainingMatchesOneProcess, ::testing::Values(1, 2, 3, 4));

TEST(DistributedOptimizer, NoOverlapNoFusion) {
  TrainCase c{"mlp", 2};
  c.overlap = false;
  c.fusion_bytes = 0;
  check_training<SmallMlp>(c, {20});
  c.model = "cnn";
  check_training<SmallCnn>(c, {1, 8, 8});
}

// DistributedOptions::overlap unset follows HPCT_OVERLAP; set, it wins; a
// value that is not on/off/auto is refused by name.
TEST(DistributedOptimizer, OverlapFollowsHpctOverlapUnlessSet) {
  comm::testing::run_gloo_world(1, Millis(30000), [&](comm::GlooCommunicator& comm) {
    SmallMlp m;
    torch::optim::SGD sgd(m.parameters(), 0.1);
    for (bool on : {true, false}) {
      Config c = test_config(64 << 20);
      c.overlap = on ? "on" : "off";
      auto ctx = make_context(comm, c, quiet(0));
      {
        DistributedOptimizer opt(*ctx, sgd, m.named_parameters());
        EXPECT_EQ(opt.overlaps(), on);
      }
      DistributedOptions o;
      o.overlap = !on;
      DistributedOptimizer forced(*ctx, sgd, m.named_parameters(), o);
      EXPECT_EQ(forced.overlaps(), !on);
    }
    Config bad = test_config(64 << 20);
    bad.overlap = "sometimes";
    auto ctx = make_context(comm, bad, quiet(0));
    try {
      DistributedOptimizer opt(*ctx, sgd, m.named_parameters());
      ADD_FAILURE() << "HPCT_OVERLAP=sometimes was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("HPCT_OVERLAP=sometimes: expected on, off or auto"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(DistributedOptimizer, GradientAccumulation) {
  TrainCase c{"mlp", 2};
  c.passes = 2;
  check_training<SmallMlp>(c, {20});
}

TEST(DistributedOptimizer, UnusedParameterGetsTheOtherRanksAverage) {
  std::mutex mu;
  std::vector<torch::Tensor> b_grads(2);
  comm::testing::run_gloo_world(2, Millis(30000), [&](comm::GlooCommunicator& comm) {
    auto ctx = make_context(comm, test_config(64 << 20), quiet(comm.rank()));
    std::shared_ptr<Branchy> m;
    {
      std::lock_guard<std::mutex> lk(mu);
      torch::manual_seed(3);
      m = std::make_shared<Branchy>();
    }
    torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.0));
    DistributedOptimizer opt(*ctx, sgd, m->named_parameters());
    torch::Tensor local_b;
    for (int s = 0; s < 2; ++s) {
      auto [x, y] = batch(s, 4, {20});
      opt.zero_grad();
      bool use_b = ctx->rank() == 0;  // rank 1 never touches b
      torch::nn::functional::cross_entropy(m->forward(x, use_b), y).backward();
      if (use_b) local_b = m->b->weight.grad().clone();
      opt.step();
    }
    std::lock_guard<std::mutex> lk(mu);
    b_grads[static_cast<size_t>(ctx->rank())] = m->b->weight.grad().clone();
    if (ctx->rank() == 0) b_grads.push_back(local_b);
  });
  ASSERT_TRUE(torch::equal(b_grads[0], b_grads[1]));
  EXPECT_TRUE(torch::allclose(b_grads[0], b_grads[2] / 2));  // rank 1 contributed zeros
}

// Rank 1 skips a step (it caught an error before it) and goes on to a
// collective of its own: rank 0's step() ends within HPCT_TIMEOUT_S with
// Timeout naming a gradient and rank 1, instead of waiting for ever; then
// both ranks' next step works and leaves identical parameters.
TEST(DistributedOptimizer, StepOneRankSkipsFailsWithinTheBoundAndTheNextStepWorks) {
  std::mutex mu;
  std::vector<torch::Tensor> after(2);
  comm::testing::run_gloo_world(2, Millis(30000), [&](comm::GlooCommunicator& comm) {
    Config c = test_config(64 << 20);
    c.timeout_s = 2;
    auto ctx = make_context(comm, c, quiet(comm.rank()));
    const int r = ctx->rank();
    std::shared_ptr<SmallMlp> m;
    {
      std::lock_guard<std::mutex> lk(mu);
      torch::manual_seed(5);
      m = std::make_shared<SmallMlp>();
    }
    torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.05));
    DistributedOptimizer opt(*ctx, sgd, m->named_parameters());
    auto [x, y] = batch(0, 4, {20});
    opt.zero_grad();
    if (r == 0) {
      torch::nn::functional::cross_entropy(m->forward(x), y).backward();
      const auto start = SteadyClock::now();
      try {
        opt.step();
        ADD_FAILURE() << "step() completed though rank 1 never sent its gradients";
      } catch (const Error& e) {
        const double waited = std::chrono::duration<double>(SteadyClock::now() - start).count();
        EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
        EXPECT_NE(std::string(e.what()).find("not by ranks [1]"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("fc"), std::string::npos) << "names the gradient: " << e.what();
        EXPECT_LT(waited, 6.0) << "the bound is 2 s";
      }
    } else {
      auto t = torch::ones({3});
      try {
        allreduce(*ctx, "rank1-only", t, false);
        ADD_FAILURE() << "rank 1's lonely collective completed";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kTimeout) << e.what();
      }
    }
    // The ranks meet again before the next step: step names repeat from
    // step to step, so a rank that ran ahead into its next step would meet
    // the other's still-pending gradients of the skipped one.
    EXPECT_EQ(allreduce(*ctx, "resync", 1.0, false), 2.0);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(m->forward(x), y).backward();
    opt.step();
    std::lock_guard<std::mutex> lk(mu);
    after[static_cast<size_t>(r)] = flat_params(*m);
  });
  EXPECT_TRUE(torch::equal(after[0], after[1]));
}

TEST(Broadcast, OptimizerStateAndMetrics) {
  comm::testing::run_gloo_world(3, Millis(30000), [&](comm::GlooCommunicator& comm) {
    auto ctx = make_context(comm, test_config(64 << 20), quiet(comm.rank()));
    const int r = ctx->rank();
    auto w = torch::full({4}, static_cast<float>(r), torch::requires_grad());
    torch::optim::SGD sgd({w}, torch::optim::SGDOptions(0.1 * (r + 1)).momentum(0.9));
    // Only rank 1 has taken a step: a momentum buffer exists there alone.
    if (r == 1) {
      w.mutable_grad() = torch::full({4}, 2.0f);
      sgd.step();
    }
    broadcast_optimizer_state(*ctx, sgd, 1);
    auto& opts = static_cast<torch::optim::SGDOptions&>(sgd.param_groups()[0].options());
    EXPECT_DOUBLE_EQ(opts.lr(), 0.2);
    auto& state = sgd.state();
    ASSERT_EQ(state.size(), 1u) << "rank " << r;
    auto& buf = static_cast<torch::optim::SGDParamState&>(*state.begin()->second).momentum_buffer();
    EXPECT_TRUE(torch::equal(buf, torch::full({4}, 2.0f)));

    EXPECT_DOUBLE_EQ(allreduce(*ctx, "loss", static_cast<double>(r)), 1.0);
    EXPECT_DOUBLE_EQ(allreduce(*ctx, "count", 2.0, false), 6.0);
  });
}

TEST(DistributedSampler, PyTorchSemantics) {
  // Expected values from PyTorch 1.13's torch.utils.data.DistributedSampler
  // (python3-torch): dataset of 10, 3 replicas, seed 5, epoch 1.
  for (bool drop_last : {false, true}) {
    std::vector<std::size_t> seen;
    std::multiset<std::size_t> all;
    for (int r = 0; r < 3; ++r) {
      DistributedSampler s(10, 3, r, true, 5, drop_last);
      s.set_epoch(1);
      EXPECT_EQ(s.num_samples(), drop_last ? 3u : 4u);
      for (auto i : s.indices()) all.insert(i);
    }
    EXPECT_EQ(all.size(), drop_last ? 9u : 12u);
  }
  const std::vector<std::vector<std::size_t>> pytorch = {{0, 1, 9, 6}, {7, 8, 2, 0}, {5, 3, 4, 7}};
  for (int r = 0; r < 3; ++r) {
    DistributedSampler s(10, 3, r, true, 5);
    s.set_epoch(1);
    EXPECT_EQ(s.indices(), pytorch[static_cast<size_t>(r)]) << "rank " << r;
  }
  DistributedSampler big(1000, 2, 1, true, 0);
  EXPECT_EQ(std::vector<std::size_t>(big.indices().begin(), big.indices().begin() + 8),
            (std::vector<std::size_t>{37, 775, 209, 500, 264, 825, 928, 726}));
  DistributedSampler a(10, 3, 0, true, 5), b(10, 3, 0, true, 5);
  a.set_epoch(1);
  b.set_epoch(1);
  EXPECT_EQ(a.indices(), b.indices());
  b.set_epoch(2);
  EXPECT_NE(a.indices(), b.indices());
  DistributedSampler plain(7, 2, 1, false);
  EXPECT_EQ(plain.indices(), (std::vector<std::size_t>{1, 3, 5, 0}));  // padded with index 0
  auto batch1 = plain.next(3);
  ASSERT_TRUE(batch1);
  EXPECT_EQ(batch1->size(), 3u);
  EXPECT_EQ(plain.next(3)->size(), 1u);
  EXPECT_FALSE(plain.next(3));
}

}  // namespace
}  // namespace hpct
