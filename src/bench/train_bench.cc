#include "core/config.h"
#include "bench/train_bench.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <fstream>

#include "bench/pacer.h"
#include "core/error.h"
#include "data/idx.h"
#include "data/loader.h"
#include "engine/engine.h"
#include "train/models.h"

namespace hpct::bench {
namespace {

// [N, 1, 28, 28] float images and [N] labels.
std::pair<torch::Tensor, torch::Tensor> load_data(const TrainBenchOptions& o) {
  if (!o.shards.empty()) return {torch::empty({0}), torch::empty({0})};  // the Loader streams them
  if (o.synthetic) {
    auto gen = at::detail::createCPUGenerator(1);
    return {torch::randn({1024, 1, 28, 28}, gen), torch::randint(0, 10, {1024}, gen, torch::kLong)};
  }
  auto [ip, lp] = data::fashion_mnist_files(o.data_dir.empty() ? data::kFashionMnistDir : o.data_dir, "train");
  data::IdxArray im = data::read_idx(ip);
  data::IdxArray lb = data::read_idx(lp);
  auto n = static_cast<std::int64_t>(im.items());
  auto x = torch::from_blob(im.values.data(), {n, 1, 28, 28}, torch::kUInt8).to(torch::kFloat);
  x = (x / 255.0 - 0.2860) / 0.3530;
  auto y = torch::from_blob(lb.values.data(), {n}, torch::kUInt8).to(torch::kLong);
  return {x, y};
}

}  // namespace

nlohmann::json run_train_bench(Context& ctx, const TrainBenchOptions& o) {
  at::set_num_threads(o.threads);
  auto [images, labels] = load_data(o);
  torch::manual_seed(42);
  auto model = train::make_model(o.model, 1);
  broadcast_parameters(ctx, *model);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  DistributedOptions dopts;
  dopts.overlap = o.overlap;
  std::unique_ptr<DistributedOptimizer> dist;
  if (o.sync) dist = std::make_unique<DistributedOptimizer>(ctx, sgd, model->named_parameters(), dopts);

  DistributedSampler sampler(static_cast<std::size_t>(std::max<std::int64_t>(images.size(0), 1)), ctx,
                             true, 0, true);
  std::unique_ptr<data::Loader> loader;
  if (!o.shards.empty()) {
    data::LoaderOptions lo;
    lo.shards = o.shards;
    lo.rank = ctx.rank();
    lo.size = ctx.size();
    lo.batch_size = o.batch;
    lo.drop_last = true;
    lo.threads = o.data_threads;
    data::apply_config(ctx.config(), &lo);
    lo.normalize = true;
    lo.mean = {0.2860f};
    lo.std = {0.3530f};
    loader = std::make_unique<data::Loader>(lo);
    if (loader->batches_per_epoch() < 1) {
      throw_invalid_argument("bench train: the shards hold less than one batch of " +
                             std::to_string(o.batch) + " per rank");
    }
  }

  std::uint64_t epoch = 0;
  auto next_batch = [&]() {
    if (loader) {
      data::Batch b;
      if (!loader->next(&b)) {
        loader->start_epoch(static_cast<std::int64_t>(++epoch));
        if (!loader->next(&b)) throw_data_corrupt("bench train: an epoch of the shards gave no batch");
      }
      return std::make_pair(b.images, b.labels);
    }
    auto idx = sampler.next(static_cast<std::size_t>(o.batch));
    if (!idx || idx->size() < static_cast<std::size_t>(o.batch)) {
      sampler.set_epoch(++epoch);
      idx = sampler.next(static_cast<std::size_t>(o.batch));
    }
    std::vector<std::int64_t> v(idx->begin(), idx->end());
    auto t = torch::tensor(v, torch::kLong);
    return std::make_pair(images.index_select(0, t), labels.index_select(0, t));
  };

  double loss_value = 0;
  SteadyClock::time_point start;
  // Seconds this rank spent, over the timed steps, in each part of a step.
  enum Part { kData, kCompute, kSync, kOptimizer, kParts };
  double split[kParts] = {};
  auto lap = [](SteadyClock::time_point* t) {
    auto now = SteadyClock::now();
    double s = std::chrono::duration<double>(now - *t).count();
    *t = now;
    return s;
  };
  std::unique_ptr<PaceRank> pacer;
  if (!o.pace_file.empty()) pacer = std::make_unique<PaceRank>(o.pace_file, ctx.rank(), seconds_to_millis(o.pace_bound_s));
  struct StepRow {
    SteadyClock::time_point start, end;
    double parts[kParts];
  };
  std::vector<StepRow> rows_log;
  if (!o.step_log.empty()) rows_log.reserve(static_cast<size_t>(o.steps));
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    if (s == o.warmup) {
      allreduce(ctx, "bench/start", 0.0);  // every rank starts the clock together
      start = SteadyClock::now();
      std::fill(std::begin(split), std::end(split), 0.0);
    }
    if (pacer && s >= o.warmup) pacer->before_step(s - o.warmup);
    auto t = SteadyClock::now();
    const auto step_start = t;
    double before[kParts];
    std::copy(std::begin(split), std::end(split), before);
    auto [x, y] = next_batch();
    split[kData] += lap(&t);
    if (dist) {
      dist->zero_grad();
    } else {
      sgd.zero_grad();
    }
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    split[kCompute] += lap(&t);
    if (dist) {
      dist->synchronize();
    } else if (o.lockstep) {
      allreduce(ctx, "bench/lockstep", 0.0);
    }
    split[kSync] += lap(&t);
    if (dist) {
      dist->step();
    } else {
      sgd.step();
    }
    loss_value = loss.item<double>();
    split[kOptimizer] += lap(&t);
    if (!o.step_log.empty() && s >= o.warmup) {
      StepRow row{step_start, t, {}};
      for (int p = 0; p < kParts; ++p) row.parts[p] = split[p] - before[p];
      rows_log.push_back(row);
    }
  }
  if (!o.step_log.empty()) {
    const std::string path = o.step_log + "." + std::to_string(ctx.rank());
    std::ofstream log(path);
    auto ns = [](SteadyClock::time_point tp) {
      return std::chrono::duration_cast<std::chrono::nanoseconds>(tp.time_since_epoch()).count();
    };
    for (size_t i = 0; i < rows_log.size(); ++i) {
      log << i << ' ' << ns(rows_log[i].start) << ' ' << ns(rows_log[i].end);
      for (double part : rows_log[i].parts) log << ' ' << static_cast<long long>(part * 1e9);
      log << '\n';
    }
    if (!log.flush()) throw_io("write " + path, errno ? errno : EIO);
  }
  double mine = std::chrono::duration<double>(SteadyClock::now() - start).count();
  // Every rank's total time and split: one row per rank, through a sum of
  // zero rows with this rank's filled in.
  auto rows = torch::zeros({ctx.size(), 1 + kParts}, torch::kDouble);
  rows[ctx.rank()][0] = mine;
  for (int p = 0; p < kParts; ++p) rows[ctx.rank()][1 + p] = split[p];
  rows = allreduce(ctx, "bench/times", rows, false);
  auto times = rows.select(1, 0);
  double elapsed = times.max().item<double>();
  int slowest = static_cast<int>(times.argmax().item<std::int64_t>());
  double avg_loss = allreduce(ctx, "bench/loss", loss_value);
  auto stats = ctx.engine().stats();
  const auto& eo = ctx.engine().options();

  nlohmann::json j;
  j["bench"] = "train";
  j["impl"] = "hpctrain";
  j["model"] = o.model;
  j["parameters"] = train::parameter_count(*model);
  j["np"] = ctx.size();
  j["batch_per_rank"] = o.batch;
  j["steps"] = o.steps;
  j["threads"] = o.threads;
  j["data"] = !o.shards.empty() ? "shards" : o.synthetic ? "synthetic" : "fashion-mnist";
  if (loader) j["data_threads"] = o.data_threads;
  j["samples_per_s"] = static_cast<double>(ctx.size()) * o.batch * o.steps / elapsed;
  j["step_ms"] = elapsed / o.steps * 1e3;
  j["final_loss"] = avg_loss;
  // Mean milliseconds per step in each part, on the slowest rank and averaged
  // over ranks: data wait, forward+backward, gradient sync wait, optimizer.
  const char* part_names[kParts] = {"data", "compute", "sync", "optimizer"};
  nlohmann::json slow_split, mean_split;
  for (int p = 0; p < kParts; ++p) {
    slow_split[part_names[p]] = rows[slowest][1 + p].item<double>() / o.steps * 1e3;
    mean_split[part_names[p]] = rows.select(1, 1 + p).mean().item<double>() / o.steps * 1e3;
  }
  // Each rank's forward+backward: an imbalance between ranks (one rank's
  // cores busier) shows here and as the others' sync wait.
  std::vector<double> compute_by_rank;
  for (int r = 0; r < ctx.size(); ++r) compute_by_rank.push_back(rows[r][1 + kCompute].item<double>() / o.steps * 1e3);
  j["compute_ms_by_rank"] = compute_by_rank;
  j["slowest_rank"] = slowest;
  j["split_ms_slowest"] = slow_split;
  j["split_ms_mean"] = mean_split;
  j["overlap"] = dist ? dist->overlaps() : false;
  j["sync"] = o.sync;
  j["lockstep"] = o.sync || o.lockstep;
  j["fusion_bytes"] = eo.fusion_bytes;
  j["cycle_ms"] = eo.cycle_ms;
  j["compression"] = engine::compression_name(eo.compression);
  j["engine_rounds"] = stats.rounds;
  j["engine_full_rounds"] = stats.full_rounds;
  j["engine_in_place_bytes"] = stats.in_place_bytes;
  j["engine_packed_bytes"] = stats.packed_bytes;
  return j;
}

}  // namespace hpct::bench
