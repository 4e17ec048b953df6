// The engine and DistributedOptimizer on the MPI backend, under mpirun
// (every rank runs this program; the Gloo backend is covered in-process by
// src/engine/engine_test.cc and src/torch/torch_test.cc).
//
// Checks, each on every rank: (1) small MLP and CNN training with overlap
// on/off and fusion on/off ends with parameters bitwise identical across
// ranks (compared through an allgather) and equal within float tolerance to
// one process training on the concatenated batch; (2) tensors submitted in
// reversed order on odd ranks complete; (3) a shape mismatch raises Mismatch
// naming the tensor and every rank's shape; (4) stage 2 of sharding
// (gradients reduce-scattered) ends bitwise where unsharded training does. Each rank exits non-zero when a
// check failed, so mpirun does; failures print "[rank r] FAIL ...".
#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "core/config.h"
#include "core/env.h"
#include "engine/engine.h"
#include "hpctrain/hpctrain.h"
#include "torch/context.h"

namespace {

int failures = 0;
int my_rank = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "[rank %d] FAIL %s\n", my_rank, what.c_str());
  }
}

struct Mlp : torch::nn::Module {
  Mlp() {
    a = register_module("a", torch::nn::Linear(20, 32));
    b = register_module("b", torch::nn::Linear(32, 10));
  }
  torch::Tensor forward(torch::Tensor x) { return b(torch::relu(a(x.reshape({x.size(0), -1})))); }
  torch::nn::Linear a{nullptr}, b{nullptr};
};

struct Cnn : torch::nn::Module {
  Cnn() {
    c = register_module("c", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 4, 3).padding(1)));
    f = register_module("f", torch::nn::Linear(4 * 4 * 4, 10));
  }
  torch::Tensor forward(torch::Tensor x) { return f(torch::max_pool2d(torch::relu(c(x)), 2).flatten(1)); }
  torch::nn::Conv2d c{nullptr};
  torch::nn::Linear f{nullptr};
};

torch::Tensor flat(torch::nn::Module& m) {
  std::vector<torch::Tensor> ps;
  for (auto& p : m.parameters()) ps.push_back(p.detach().reshape({-1}));
  return torch::cat(ps);
}

template <typename M>
void check_training(hpct::Context& ctx, const std::string& name, std::vector<std::int64_t> in_shape,
                    bool overlap) {
  const int n = ctx.size(), r = ctx.rank();
  const std::int64_t b = 4;
  in_shape.insert(in_shape.begin(), b * n);
  auto run = [&](torch::nn::Module& m, auto&& step) {
    for (int s = 0; s < 4; ++s) {
      auto gen = at::detail::createCPUGenerator(100 + static_cast<std::uint64_t>(s));
      auto x = torch::randn(in_shape, gen);
      auto y = torch::randint(0, 10, {b * n}, gen, torch::kLong);
      step(x, y);
    }
    (void)m;
  };
  torch::manual_seed(11);
  auto ref = std::make_shared<M>();
  torch::optim::SGD ref_sgd(ref->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  run(*ref, [&](torch::Tensor x, torch::Tensor y) {
    ref_sgd.zero_grad();
    torch::nn::functional::cross_entropy(ref->forward(x), y).backward();
    ref_sgd.step();
  });

  torch::manual_seed(11 + static_cast<std::uint64_t>(r));  // differs per rank; broadcast fixes it
  auto m = std::make_shared<M>();
  if (r == 0) {
    torch::manual_seed(11);
    auto init = std::make_shared<M>();
    torch::NoGradGuard ng;
    for (size_t i = 0; i < m->parameters().size(); ++i) m->parameters()[i].copy_(init->parameters()[i]);
  }
  hpct::broadcast_parameters(ctx, *m);
  torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  hpct::DistributedOptions o;
  o.overlap = overlap;
  {
    hpct::DistributedOptimizer opt(ctx, sgd, m->named_parameters(), o);
    run(*m, [&](torch::Tensor x, torch::Tensor y) {
      opt.zero_grad();
      torch::nn::functional::cross_entropy(m->forward(x.narrow(0, r * b, b)), y.narrow(0, r * b, b))
          .backward();
      opt.step();
    });
  }
  auto mine = flat(*m);
  std::string what = name + (overlap ? " overlap" : " no-overlap");
  auto h = ctx.engine().allgather_async("check/" + what,
                                        {mine.data_ptr(), hpct::comm::DataType::kFloat32,
                                         {1, mine.numel()}, nullptr});
  h.wait();
  const auto* all = reinterpret_cast<const float*>(h.gathered().data());
  for (int q = 0; q < n; ++q) {
    check(std::memcmp(all + q * mine.numel(), mine.template data_ptr<float>(),
                      static_cast<size_t>(mine.numel()) * 4) == 0,
          what + ": parameters of rank " + std::to_string(q) + " differ bitwise from this rank's");
  }
  check(torch::allclose(mine, flat(*ref), 1e-4, 1e-5),
        what + ": differs from the single-process reference by " +
            std::to_string((mine - flat(*ref)).abs().max().template item<float>()));
}

// 20 Adam steps of the MLP at shard `stage`, each rank on batches of its
// own; the parameters after the last step.
torch::Tensor train_sharded(hpct::Context& ctx, int stage) {
  torch::manual_seed(11);
  auto m = std::make_shared<Mlp>();
  torch::optim::Adam adam(m->parameters(), torch::optim::AdamOptions(1e-2));
  hpct::DistributedOptions o;
  o.shard = stage;
  hpct::DistributedOptimizer opt(ctx, adam, m->named_parameters(), o);
  for (int s = 0; s < 20; ++s) {
    auto gen = at::detail::createCPUGenerator(500 + static_cast<std::uint64_t>(s * ctx.size() + ctx.rank()));
    auto x = torch::randn({8, 20}, gen);
    auto y = torch::randint(0, 10, {8}, gen, torch::kLong);
    opt.zero_grad();
    torch::nn::functional::cross_entropy(m->forward(x), y).backward();
    opt.step();
  }
  return flat(*m).clone();
}

// Stage 2 reduce-scatters the gradients (the engine's reduce_scatter_async):
// on MPI, shared memory on this host, it sums in the allreduce's (rank)
// order, so it ends where unsharded training does, bit for bit.
void check_stage2(hpct::Context& ctx) {
  auto plain = train_sharded(ctx, 0);
  auto sharded = train_sharded(ctx, 2);
  check(torch::equal(plain, sharded), "shard 2 differs from unsharded training by " +
                                          std::to_string((plain - sharded).abs().max().item<float>()));
}

}  // namespace

int main() {
  using namespace hpct;
  torch::set_num_threads(1);
  // MPI starts once per process: one communicator, one engine per variant.
  Config base = Config::from_env(ProcessEnv());
  Logger logger = Logger::from_config(base, -1);
  comm::World world = comm::connect_world(base, ProcessEnv(), logger);
  for (std::int64_t fusion : {std::int64_t{64} << 20, std::int64_t{0}}) {
    Config config = base;
    config.cycle_ms = 1;
    config.fusion_bytes = fusion;
    auto ctx = make_context(*world.comm, config, logger.with_rank(world.comm->rank()));
    my_rank = ctx->rank();
    std::string tag = fusion ? " fusion" : " no-fusion";
    check_training<Mlp>(*ctx, "mlp" + tag, {20}, true);
    check_training<Mlp>(*ctx, "mlp" + tag, {20}, false);
    check_training<Cnn>(*ctx, "cnn" + tag, {1, 8, 8}, true);
    check_training<Cnn>(*ctx, "cnn" + tag, {1, 8, 8}, false);

    if (fusion == 0) continue;
    check_stage2(*ctx);
    // Reversed order on odd ranks.
    std::vector<std::vector<float>> bufs(16);
    std::vector<engine::Handle> hs(16);
    for (int k = 0; k < 16; ++k) {
      int i = ctx->rank() % 2 ? 15 - k : k;
      bufs[static_cast<size_t>(i)].assign(static_cast<size_t>(10 + i), 1.0f);
      hs[static_cast<size_t>(i)] = ctx->engine().allreduce_async(
          "order/" + std::to_string(i),
          {bufs[static_cast<size_t>(i)].data(), comm::DataType::kFloat32, {10 + i}, nullptr},
          comm::ReduceOp::kSum);
    }
    for (int i = 0; i < 16; ++i) {
      hs[static_cast<size_t>(i)].wait(Millis(30000));
      check(bufs[static_cast<size_t>(i)][0] == static_cast<float>(ctx->size()), "reversed order sum");
    }
    // Shape mismatch: the last rank submits one more element.
    std::vector<float> v(static_cast<size_t>(ctx->rank() == ctx->size() - 1 ? 5 : 4), 1.0f);
    try {
      ctx->engine()
          .allreduce_async("mismatch/w", {v.data(), comm::DataType::kFloat32, {static_cast<std::int64_t>(v.size())}, nullptr},
                           comm::ReduceOp::kSum)
          .wait(Millis(30000));
      check(ctx->size() == 1, "no mismatch error");
    } catch (const Error& e) {
      std::string m = e.what();
      check(e.code() == ErrorCode::kMismatch, "mismatch code: " + m);
      // The signature names the compression: auto, HPCT_COMPRESSION's default.
      check(m.find("'mismatch/w'") != std::string::npos &&
                m.find("rank 0: allreduce float32 sum auto [4]") != std::string::npos &&
                m.find("rank " + std::to_string(ctx->size() - 1) + ": allreduce float32 sum auto [5]") !=
                    std::string::npos,
            "mismatch message: " + m);
    }
  }
  if (my_rank == 0) std::printf("engine_mpi_test: %s\n", failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
