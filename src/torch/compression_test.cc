// Lossy gradient compression (powersgd, int8) on real Gloo ranks living as
// threads of this process, through the engine: PowerSGD's approximation
// against the SVD's best rank-r error; error feedback carrying the residual
// from step to step and across a save/load; bitwise identical parameters on
// 1-4 ranks when training with DistributedOptimizer; plain allreduce before
// the start step; tensors below the compression rate left exact; int8 within
// its quantisation step. Small tensors: the whole file runs in seconds.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <mutex>

#include "comm/testing/thread_world.h"
#include "hpctrain/hpctrain.h"
#include "torch/context.h"
#include "torch/gradient_compressor.h"
#include "torch/int8_compressor.h"
#include "torch/powersgd.h"

namespace hpct {
namespace {

Config test_config() {
  Config c;
  c.cycle_ms = 1;
  c.compression = "none";  // the engine's own wire type under the lossy modes: exact
  return c;
}

Logger quiet(int rank) { return Logger(LogLevel::kWarn, "all", rank, [](const std::string&) {}); }

// A rank-k matrix plus small noise, drawn from `seed`.
torch::Tensor low_rank_plus_noise(std::int64_t n, std::int64_t m, std::int64_t k, double noise, std::uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto a = torch::randn({n, k}, gen);
  auto b = torch::randn({k, m}, gen);
  return a.mm(b) + noise * torch::randn({n, m}, gen);
}

double rel_error(const torch::Tensor& approx, const torch::Tensor& exact) {
  return ((approx - exact).norm() / exact.norm()).item<double>();
}

LossySpec powersgd_spec(int rank, std::int64_t start = 0) {
  LossySpec s = *parse_lossy("powersgd:" + std::to_string(rank));
  s.start_step = start;
  return s;
}

// Runs fn on `ranks` Gloo ranks, each with a Context (engine) of its own.
void on_ranks(int ranks, const std::function<void(Context&)>& fn) {
  comm::testing::run_gloo_world(ranks, Millis(30000), [&](comm::GlooCommunicator& comm) {
    auto ctx = make_context(comm, test_config(), quiet(comm.rank()));
    fn(*ctx);
  });
}

TEST(LossySpec, ParsesModesAndRefusesBadRanks) {
  EXPECT_FALSE(parse_lossy("fp16"));
  EXPECT_FALSE(parse_lossy("auto"));
  EXPECT_EQ(parse_lossy("powersgd")->rank, 4);
  EXPECT_EQ(parse_lossy("powersgd:2")->name(), "powersgd:2");
  EXPECT_EQ(parse_lossy("int8")->kind, LossySpec::Kind::kInt8);
  for (const char* bad : {"powersgd:", "powersgd:0", "powersgd:x", "powersgd:-1"}) {
    try {
      parse_lossy(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank after powersgd"), std::string::npos) << e.what();
    }
  }
  try {
    engine::parse_compression("int4");
    ADD_FAILURE() << "int4 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("powersgd[:RANK], int8"), std::string::npos) << e.what();
  }
}

TEST(PowerSgd, OrthogonalisesColumns) {
  auto p = torch::randn({50, 4});
  PowerSgd::orthogonalise(p);
  EXPECT_TRUE(torch::allclose(p.t().mm(p), torch::eye(4), 1e-5, 1e-5)) << p.t().mm(p);
  auto z = torch::zeros({10, 2});
  PowerSgd::orthogonalise(z);
  EXPECT_TRUE(torch::equal(z, torch::zeros({10, 2})));  // a zero gradient stays zero, no NaN
}

// Without error feedback, one power step per call on the same matrix with
// Q kept (warm start) is power iteration: the error falls toward the best
// rank-r error, the SVD's, from a first step that is much worse.
TEST(PowerSgd, WarmStartConvergesTowardTheSvdsBestRankRError) {
  on_ranks(1, [](Context& ctx) {
    const int r = 4;
    auto m = low_rank_plus_noise(96, 64, 6, 0.05, 11);
    auto s = std::get<1>(torch::linalg_svd(m, false));
    auto tail = s.narrow(0, r, s.size(0) - r);
    const double best = (tail.norm() / s.norm()).item<double>();
    LossySpec spec = powersgd_spec(r);
    spec.error_feedback = false;
    PowerSgd psgd(spec);
    std::vector<double> errors;
    for (int step = 0; step < 30; ++step) {
      std::vector<GradSlot> g{{"w", m.clone()}};
      psgd.reduce(ctx.engine(), g, true);
      errors.push_back(rel_error(g[0].grad, m));
    }
    EXPECT_GT(errors[0], 1.2 * best) << "the first step from a random Q should be far from the best";
    EXPECT_LT(errors.back(), 1.02 * best) << "after 30 warm steps: " << errors.back() << " vs SVD " << best;
    EXPECT_LT(errors.back(), errors[0]);
  });
}

// Error feedback: what a step leaves out is this rank's residual and goes
// into the next step, so sum of outputs + residual = steps x gradient
// exactly (nothing is lost), and the residual stays bounded: the mean of
// the outputs over many steps of a constant gradient approaches the
// gradient itself although each step's rank-1 approximation stays poor.
TEST(PowerSgd, ErrorFeedbackCarriesTheResidualAcrossSteps) {
  on_ranks(1, [](Context& ctx) {
    auto m = low_rank_plus_noise(40, 30, 3, 0.3, 21);
    LossySpec spec = powersgd_spec(1);
    PowerSgd psgd(spec);
    auto sum = torch::zeros_like(m);
    double first = 0, at_50 = 0;
    const int steps = 200;
    for (int step = 0; step < steps; ++step) {
      std::vector<GradSlot> g{{"w", m.clone()}};
      psgd.reduce(ctx.engine(), g, true);
      if (step == 0) {
        first = rel_error(g[0].grad, m);
        // The residual is exactly what the step did not send.
        EXPECT_TRUE(torch::allclose(psgd.buffers().at("error/w"), m - g[0].grad, 1e-5, 1e-5));
      }
      sum += g[0].grad;
      if (step + 1 == 50) at_50 = rel_error(sum / 50, m);
    }
    EXPECT_GT(first, 0.3);
    EXPECT_TRUE(torch::allclose(sum + psgd.buffers().at("error/w"), steps * m, 1e-3, 1e-2));
    const double at_end = rel_error(sum / steps, m);
    std::printf("rank-1 error: one step %.3f, mean of 50 %.3f, of %d %.3f\n", first, at_50, steps, at_end);
    EXPECT_LT(at_end, first / 4);
    EXPECT_LT(at_end, at_50 / 2);  // the residual stays bounded: the mean's error falls like 1 / steps
  });
}

// Saved after some steps and loaded into a fresh compressor, the state
// (step, residuals, Q) makes the next steps compute the same bits.
TEST(GradientCompressor, StateSurvivesSaveAndLoadBitExactly) {
  for (const char* mode : {"powersgd:2", "int8"}) {
    on_ranks(2, [&](Context& ctx) {
      LossySpec spec = *parse_lossy(mode);
      spec.start_step = 1;
      auto a = make_gradient_compressor(spec);
      auto gen = at::detail::createCPUGenerator(100 + static_cast<std::uint64_t>(ctx.rank()));
      auto grads = [&](int step) {
        auto g = at::detail::createCPUGenerator(static_cast<std::uint64_t>(step * 10 + ctx.rank()));
        return std::vector<GradSlot>{{"w.weight", torch::randn({32, 48}, g)}, {"w.bias", torch::randn({32}, g)}};
      };
      for (int step = 0; step < 3; ++step) {
        auto g = grads(step);
        a->reduce(ctx.engine(), g, true);
      }
      torch::serialize::OutputArchive out;
      a->save(out);
      std::ostringstream bytes;
      out.save_to(bytes);
      auto b = make_gradient_compressor(spec);
      torch::serialize::InputArchive in;
      std::istringstream is(bytes.str());
      in.load_from(is);
      b->load(in);
      EXPECT_EQ(b->step(), 3);
      ASSERT_EQ(b->buffers().size(), a->buffers().size());
      for (int step = 3; step < 5; ++step) {
        auto ga = grads(step), gb = grads(step);
        a->reduce(ctx.engine(), ga, true);
        b->reduce(ctx.engine(), gb, true);
        EXPECT_TRUE(torch::equal(ga[0].grad, gb[0].grad)) << mode << " step " << step;
        EXPECT_TRUE(torch::equal(a->buffers().at("error/w.weight"), b->buffers().at("error/w.weight")));
      }
      // Without the residuals (what another rank may take): the step and
      // powersgd's Q, no error/ buffer; drop_residuals() forgets them too.
      torch::serialize::OutputArchive shared;
      a->save(shared, /*residuals=*/false);
      std::ostringstream shared_bytes;
      shared.save_to(shared_bytes);
      auto d = make_gradient_compressor(spec);
      torch::serialize::InputArchive shared_in;
      std::istringstream sis(shared_bytes.str());
      shared_in.load_from(sis);
      d->load(shared_in);
      EXPECT_EQ(d->step(), 5);
      EXPECT_EQ(d->buffers().count("error/w.weight"), 0u);
      EXPECT_EQ(d->buffers().count("q/w.weight"), std::string(mode) == "int8" ? 0u : 1u);
      b->drop_residuals();
      EXPECT_EQ(b->buffers().count("error/w.weight"), 0u);
      EXPECT_EQ(b->buffers().size(), d->buffers().size());
      // Another mode's state is refused by name.
      LossySpec other = *parse_lossy(std::string(mode) == "int8" ? "powersgd:2" : "int8");
      auto c = make_gradient_compressor(other);
      torch::serialize::InputArchive again;
      std::istringstream is2(bytes.str());
      again.load_from(is2);
      try {
        c->load(again);
        ADD_FAILURE() << "loaded " << mode << " state into " << other.name();
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("resume with --compression " + std::string(mode)), std::string::npos)
            << e.what();
      }
    });
  }
}

// A tensor whose compression rate is below the minimum (and a 1-D one)
// goes plain: exactly the average, no residual; a matrix above it is
// compressed.
TEST(GradientCompressor, TensorBelowTheCompressionRateGoesUncompressed) {
  on_ranks(2, [](Context& ctx) {
    LossySpec spec = powersgd_spec(4);  // [10, 16]: 160 / (4 * 26) = 1.5 < 2; [64, 48]: 6.9
    PowerSgd psgd(spec);
    auto gen = at::detail::createCPUGenerator(5 + static_cast<std::uint64_t>(ctx.rank()));
    auto small = torch::randn({10, 16}, gen), big = torch::randn({64, 48}, gen), bias = torch::randn({64}, gen);
    EXPECT_FALSE(psgd.compresses(small, 2));
    EXPECT_TRUE(psgd.compresses(big, 2));
    EXPECT_FALSE(psgd.compresses(bias, 2));
    auto exact = [&](const torch::Tensor& t, const std::string& name) {
      return allreduce(ctx, "exact/" + name, t, true);
    };
    auto want_small = exact(small, "small"), want_big = exact(big, "big"), want_bias = exact(bias, "bias");
    std::vector<GradSlot> g{{"small", small.clone()}, {"big", big.clone()}, {"bias", bias.clone()}};
    psgd.reduce(ctx.engine(), g, true);
    EXPECT_TRUE(torch::equal(g[0].grad, want_small));
    EXPECT_TRUE(torch::equal(g[2].grad, want_bias));
    EXPECT_FALSE(torch::allclose(g[1].grad, want_big, 1e-3, 1e-3));  // rank 4 of a random 64x48: lossy
    EXPECT_EQ(psgd.buffers().count("error/small"), 0u);
    EXPECT_EQ(psgd.buffers().count("error/big"), 1u);
  });
}

// int8: each element of the average within half a quantisation step of
// its chunk (scale / levels / 2), and the same bits on every rank.
TEST(Int8Compressor, AverageWithinHalfAStepOnEveryRank) {
  for (int ranks : {2, 3}) {
    std::mutex mu;
    std::vector<torch::Tensor> got(static_cast<size_t>(ranks));
    on_ranks(ranks, [&](Context& ctx) {
      LossySpec spec = *parse_lossy("int8");
      spec.start_step = 0;
      Int8Compressor q(spec);
      auto gen = at::detail::createCPUGenerator(9 + static_cast<std::uint64_t>(ctx.rank()));
      auto x = torch::randn({1000}, gen) * (1 + ctx.rank());  // 3 full chunks and a tail
      auto want = allreduce(ctx, "exact", x, true);
      auto scale = allreduce(ctx, "scale", x.abs().max().reshape({1}), false);  // an upper bound of any chunk's
      std::vector<GradSlot> g{{"x", x.clone()}};
      q.reduce(ctx.engine(), g, true);
      const double half_step = scale.item<double>() / Int8Compressor::levels(ranks) / 2;
      EXPECT_LE((g[0].grad - want).abs().max().item<double>(), half_step * 1.001);
      std::lock_guard<std::mutex> lk(mu);
      got[static_cast<size_t>(ctx.rank())] = g[0].grad;
    });
    for (int r = 1; r < ranks; ++r) EXPECT_TRUE(torch::equal(got[static_cast<size_t>(r)], got[0])) << r;
  }
  EXPECT_EQ(Int8Compressor::levels(2), 63);
  EXPECT_EQ(Int8Compressor::levels(127), 1);
}

// A chunk of zeros, or of denormals (a dead unit's gradient row), whose
// inverse scale would overflow: zeros on the wire, finite results, its
// values kept in the residual.
TEST(Int8Compressor, ZeroAndDenormalChunksStayFinite) {
  on_ranks(2, [](Context& ctx) {
    LossySpec spec = *parse_lossy("int8");
    spec.start_step = 0;
    Int8Compressor q(spec);
    auto x = torch::randn({768});
    x.narrow(0, 0, 256).zero_();
    x.narrow(0, 256, 256).fill_(1e-41f);
    std::vector<GradSlot> g{{"x", x.clone()}};
    q.reduce(ctx.engine(), g, true);
    EXPECT_TRUE(torch::isfinite(g[0].grad).all().item<bool>());
    EXPECT_TRUE(torch::equal(g[0].grad.narrow(0, 0, 512), torch::zeros({512})));
    EXPECT_TRUE(torch::equal(q.buffers().at("error/x").narrow(0, 256, 256), x.narrow(0, 256, 256)));
  });
}

struct Mlp : torch::nn::Module {
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(20, 64));
    fc2 = register_module("fc2", torch::nn::Linear(64, 48));
    fc3 = register_module("fc3", torch::nn::Linear(48, 10));
  }
  torch::Tensor forward(torch::Tensor x) { return fc3(torch::relu(fc2(torch::relu(fc1(x))))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};

// Trains Mlp with DistributedOptimizer on `ranks` ranks; every rank's final
// parameters, flattened.
std::vector<torch::Tensor> train(int ranks, const std::string& compression, std::int64_t start, int steps) {
  std::mutex mu;
  std::vector<torch::Tensor> got(static_cast<size_t>(ranks));
  on_ranks(ranks, [&](Context& ctx) {
    std::shared_ptr<Mlp> m;
    {
      std::lock_guard<std::mutex> lk(mu);  // torch::manual_seed is process-wide
      torch::manual_seed(3);
      m = std::make_shared<Mlp>();
    }
    torch::optim::SGD sgd(m->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    DistributedOptions o;
    o.compression = compression;
    o.compression_start_step = start;
    DistributedOptimizer opt(ctx, sgd, m->named_parameters(), o);
    for (int s = 0; s < steps; ++s) {
      auto gen = at::detail::createCPUGenerator(static_cast<std::uint64_t>(1000 * s + ctx.rank()));
      auto x = torch::randn({8, 20}, gen);
      auto y = torch::randint(0, 10, {8}, gen, torch::kLong);
      opt.zero_grad();
      torch::nn::functional::cross_entropy(m->forward(x), y).backward();
      opt.step();
    }
    std::vector<torch::Tensor> ps;
    for (auto& p : m->parameters()) ps.push_back(p.detach().reshape({-1}));
    std::lock_guard<std::mutex> lk(mu);
    got[static_cast<size_t>(ctx.rank())] = torch::cat(ps);
  });
  return got;
}

class LossyTrainingRanks : public ::testing::TestWithParam<int> {};

TEST_P(LossyTrainingRanks, ParametersIdenticalOnEveryRank) {
  const int ranks = GetParam();
  for (const char* mode : {"powersgd:2", "int8"}) {
    auto got = train(ranks, mode, 2, 6);
    auto plain = train(ranks, "none", 2, 6);
    for (int r = 1; r < ranks; ++r) {
      EXPECT_TRUE(torch::equal(got[static_cast<size_t>(r)], got[0])) << mode << ": rank " << r << " differs";
    }
    // It trained, and not exactly as plain allreduce would have.
    EXPECT_FALSE(torch::equal(got[0], plain[0])) << mode;
    EXPECT_LT(((got[0] - plain[0]).norm() / plain[0].norm()).item<double>(), 0.05) << mode;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, LossyTrainingRanks, ::testing::Values(1, 2, 3, 4));

// Before the start step every gradient is plain-allreduced: the parameters
// are exactly uncompressed training's; from it on they are not.
TEST(LossyTraining, PlainAllreduceBeforeTheStartStep) {
  for (const char* mode : {"powersgd:4", "int8"}) {
    EXPECT_TRUE(torch::equal(train(2, mode, 3, 3)[0], train(2, "none", 0, 3)[0])) << mode;
    EXPECT_FALSE(torch::equal(train(2, mode, 3, 4)[0], train(2, "none", 0, 4)[0])) << mode;
  }
}

// auto --allow-lossy measures the first steps, then decides on every rank
// alike and says why; ranks of one host have no network to save.
TEST(LossyTraining, AutoAllowLossyOnOneHostPicksNoneAndSaysWhy) {
  on_ranks(2, [](Context& ctx) {
    torch::nn::Linear m(20, 64);
    torch::optim::SGD sgd(m->parameters(), 0.01);
    DistributedOptions o;
    o.compression = "auto";
    o.allow_lossy = true;
    o.compression_start_step = 0;
    DistributedOptimizer opt(ctx, sgd, m->named_parameters(), o);
    for (int s = 0; s < 6; ++s) {
      opt.zero_grad();
      m->forward(torch::randn({4, 20})).sum().backward();
      opt.step();
    }
    EXPECT_EQ(opt.lossy_compression(), "");
    EXPECT_NE(opt.compression_reason().find("auto picked none: every rank is on one host"), std::string::npos)
        << opt.compression_reason();
    // Without --allow-lossy auto never considers them, and says nothing.
    DistributedOptions plain;
    plain.compression = "auto";
    plain.allow_lossy = false;
    DistributedOptimizer opt2(ctx, sgd, m->named_parameters(), plain);
    EXPECT_EQ(opt2.compression_reason(), "");
  });
}

}  // namespace
}  // namespace hpct
