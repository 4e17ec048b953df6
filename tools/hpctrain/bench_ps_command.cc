// `hpctrain bench ps`: a gradient-heavy step (only the gradient exchange
// and an optimizer step that changes nothing) through DistributedOptimizer,
// the code path training uses, with --sync allreduce, ps or ps-async. Every
// rank of a job runs it:
//
//   hpctrain launch -H h1:1,h2:1,h3:1,h4:1 --servers 4 --server-hosts s1,s2,s3,s4
//       -- hpctrain bench ps --sync ps --mb 64
//   hpctrain launch -H h1:1,h2:1,h3:1,h4:1 -- hpctrain bench ps --sync allreduce --mb 64
//
// Rank 0 prints one JSON line: the step times (every timed step, the
// median), the gradient bytes per worker, goodput (bytes per worker over
// the median step), and whether every worker's gradients came back as the
// exact mean (rank r sends r + 1 everywhere: the mean is (W + 1) / 2, exact
// in float32). Comparing modes side by side is the caller's (docs/ps.md has
// the script: alternating runs).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "commands.h"
#include "core/env.h"
#include "core/error.h"
#include "hpctrain/hpctrain.h"

namespace hpct::cli {
namespace {

struct PsBenchArgs {
  std::string sync = "ps";
  double mb = 64;   // gradient megabytes (2^20) per worker
  int tensors = 16;
  int steps = 10;
  int warmup = 2;
  int staleness = -1;
};

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

}  // namespace

void add_bench_ps_command(CLI::App& bench, Cli& cli) {
  auto a = std::make_shared<PsBenchArgs>();
  auto* c = bench.add_subcommand("ps", "Gradient exchange of a gradient-heavy step: allreduce vs parameter servers");
  c->add_option("--sync", a->sync, "allreduce, ps or ps-async (ps modes: launch --servers K)")->capture_default_str();
  c->add_option("--mb", a->mb, "Gradient MiB per worker")->capture_default_str();
  c->add_option("--tensors", a->tensors, "Gradient tensors the MiB are split into")->capture_default_str();
  c->add_option("--steps", a->steps, "Timed steps")->capture_default_str();
  c->add_option("--warmup", a->warmup, "Untimed steps first")->capture_default_str();
  c->add_option("--staleness", a->staleness, "ps-async bound (default HPCT_PS_STALENESS)");
  c->callback([&cli, a] {
    cli.run = [&cli, a] {
      if (a->mb <= 0 || a->tensors < 1 || a->steps < 1 || a->warmup < 0) {
        throw_invalid_argument("--mb, --tensors and --steps must be positive, --warmup 0 or more");
      }
      auto ctx = init(cli.config);
      const auto elems = static_cast<std::int64_t>(a->mb * (1 << 20) / 4 / a->tensors);
      torch::OrderedDict<std::string, torch::Tensor> named;
      std::vector<torch::Tensor> params;
      for (int i = 0; i < a->tensors; ++i) {
        auto p = torch::zeros({std::max<std::int64_t>(1, elems)}, torch::kFloat).requires_grad_(true);
        params.push_back(p);
        named.insert("g" + std::to_string(i), p);
      }
      torch::optim::SGD sgd(params, torch::optim::SGDOptions(0.0));
      DistributedOptions d;
      d.sync = a->sync;
      d.overlap = false;
      d.staleness = a->staleness;
      DistributedOptimizer opt(*ctx, sgd, named, d);
      const float mine = static_cast<float>(ctx->rank() + 1);
      const float mean = static_cast<float>(ctx->size() + 1) / 2.0f;
      bool exact = true;
      std::vector<double> times;
      for (int s = 0; s < a->warmup + a->steps; ++s) {
        for (auto& p : params) {
          if (p.grad().defined()) {
            p.mutable_grad().fill_(mine);
          } else {
            p.mutable_grad() = torch::full_like(p, mine);
          }
        }
        auto t0 = std::chrono::steady_clock::now();
        opt.synchronize();
        opt.step();
        auto t1 = std::chrono::steady_clock::now();
        if (s >= a->warmup) times.push_back(std::chrono::duration<double>(t1 - t0).count());
        if (opt.sync_mode() != "ps-async") {
          for (auto& p : params) exact = exact && p.grad().eq(mean).all().item<bool>();
        }
      }
      opt.end_epoch();
      double all_exact = allreduce(*ctx, "bench_ps/exact", exact ? 1.0 : 0.0, false);
      if (ctx->rank() == 0) {
        auto sorted = times;
        std::sort(sorted.begin(), sorted.end());
        double median = sorted[sorted.size() / 2];
        if (sorted.size() % 2 == 0) median = (sorted[sorted.size() / 2 - 1] + median) / 2;
        const double bytes = static_cast<double>(elems) * 4 * a->tensors;
        nlohmann::json j;
        j["type"] = "bench_ps";
        j["sync"] = opt.sync_mode();
        j["workers"] = ctx->size();
        j["servers"] = std::atoi(ProcessEnv().get("HPCT_PS_SERVERS").value_or("0").c_str());
        j["gradient_bytes"] = bytes;
        j["tensors"] = a->tensors;
        j["step_s"] = times;
        j["step_s_median"] = median;
        j["goodput_gbit_s"] = bytes * 8 / median / 1e9;
        j["exact_mean_on_every_worker"] = opt.sync_mode() == "ps-async" ? nlohmann::json(nullptr)
                                                                         : nlohmann::json(all_exact == ctx->size());
        j["loadavg"] = load_average();
        std::cout << j.dump() << std::endl;
      }
      return exact ? 0 : 1;
    };
  });
}

}  // namespace hpct::cli
