#include "core/config.h"
#include "bench/train_bench.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <array>
#include <fstream>

#include "bench/pacer.h"
#include "core/error.h"
#include "data/formats/idx.h"
#include "data/loader.h"
#include "engine/engine.h"
#include "train/models.h"

namespace hpct::bench {
namespace {

// Fashion-MNIST's split ("train" or "test"), normalized like the peer script's.
std::pair<torch::Tensor, torch::Tensor> load_fashion_mnist(const TrainBenchOptions& o, const std::string& split) {
  auto [ip, lp] = data::fashion_mnist_files(o.data_dir.empty() ? data::kFashionMnistDir : o.data_dir, split);
  data::IdxArray im = data::read_idx(ip);
  data::IdxArray lb = data::read_idx(lp);
  auto n = static_cast<std::int64_t>(im.items());
  auto x = torch::from_blob(im.values.data(), {n, 1, 28, 28}, torch::kUInt8).to(torch::kFloat);
  x = (x / 255.0 - 0.2860) / 0.3530;
  auto y = torch::from_blob(lb.values.data(), {n}, torch::kUInt8).to(torch::kLong);
  return {x, y};
}

// The test set through the model: this rank's share (every size-th image
// from its rank on), summed over the ranks. Returns accuracy and mean loss.
std::pair<double, double> evaluate_test_set(Context& ctx, const TrainBenchOptions& o, train::Model& model) {
  auto [x, y] = load_fashion_mnist(o, "test");
  auto mine = torch::arange(ctx.rank(), x.size(0), ctx.size(), torch::kLong);
  x = x.index_select(0, mine);
  y = y.index_select(0, mine);
  torch::NoGradGuard no_grad;
  model.eval();
  double correct = 0, loss = 0;
  for (std::int64_t i = 0; i < x.size(0); i += 1000) {
    const std::int64_t n = std::min<std::int64_t>(1000, x.size(0) - i);
    auto out = model.forward(x.narrow(0, i, n));
    auto yi = y.narrow(0, i, n);
    loss += torch::nn::functional::cross_entropy(
                out, yi, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                .item<double>();
    correct += out.argmax(1).eq(yi).sum().item<double>();
  }
  model.train();
  auto t = allreduce(ctx, "bench/test", torch::tensor({correct, loss, static_cast<double>(x.size(0))}, torch::kDouble),
                     false);
  const double count = std::max(1.0, t[2].item<double>());
  return {t[0].item<double>() / count, t[1].item<double>() / count};
}

// [N, 1, 28, 28] float images and [N] labels.
std::pair<torch::Tensor, torch::Tensor> load_data(const TrainBenchOptions& o) {
  if (!o.shards.empty()) return {torch::empty({0}), torch::empty({0})};  // the Loader streams them
  if (o.synthetic) {
    auto gen = at::detail::createCPUGenerator(1);
    return {torch::randn({1024, 1, 28, 28}, gen), torch::randint(0, 10, {1024}, gen, torch::kLong)};
  }
  auto [x, y] = load_fashion_mnist(o, "train");
  if (o.max_samples > 0 && o.max_samples < x.size(0)) return {x.narrow(0, 0, o.max_samples), y.narrow(0, 0, o.max_samples)};
  return {x, y};
}

// With shards: the Loader that streams them (this rank's part, full
// batches, normalized like Fashion-MNIST in memory); null without.
std::unique_ptr<data::Loader> shard_loader(Context& ctx, const TrainBenchOptions& o) {
  if (o.shards.empty()) return nullptr;
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
  auto loader = std::make_unique<data::Loader>(lo);
  if (loader->batches_per_epoch() < 1) {
    throw_invalid_argument("bench train: the shards hold less than one batch of " +
                           std::to_string(o.batch) + " per rank");
  }
  return loader;
}

// The benchmark's optimizer over the model (train_bench.h: optimizer).
std::unique_ptr<torch::optim::Optimizer> make_optimizer(const TrainBenchOptions& o, train::Model& model) {
  if (o.optimizer == "adam")
    return std::make_unique<torch::optim::Adam>(model.parameters(), torch::optim::AdamOptions(1e-3));
  if (o.optimizer != "sgd")
    throw_invalid_argument("bench train: optimizer '" + o.optimizer + "' is not one of sgd, adam");
  return std::make_unique<torch::optim::SGD>(model.parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
}

// The step log's lines (train_bench.h): step, start, end, then the parts.
void write_step_log(const std::string& path, const std::vector<std::array<SteadyClock::time_point, 5>>& marks) {
  std::ofstream log(path);
  auto ns = [](SteadyClock::duration d) { return std::chrono::duration_cast<std::chrono::nanoseconds>(d).count(); };
  for (size_t i = 0; i < marks.size(); ++i) {
    const auto& m = marks[i];
    log << i << ' ' << ns(m[0].time_since_epoch()) << ' ' << ns(m[4].time_since_epoch());
    for (int p = 1; p < 5; ++p) log << ' ' << ns(m[p] - m[p - 1]);
    log << '\n';
  }
  if (!log.flush()) throw_io("write " + path, errno ? errno : EIO);
}

// The result line: the run's settings and speed, and what the engine did.
nlohmann::json result_line(Context& ctx, const TrainBenchOptions& o, train::Model& model, std::int64_t train_samples,
                           bool streamed, const DistributedOptimizer* dist, double elapsed, double avg_loss,
                           std::pair<double, double> test) {
  auto stats = ctx.engine().stats();
  const auto& eo = ctx.engine().options();

  nlohmann::json j;
  j["bench"] = "train";
  j["impl"] = "hpctrain";
  j["model"] = o.model;
  j["parameters"] = train::parameter_count(model);
  j["np"] = ctx.size();
  j["batch_per_rank"] = o.batch;
  j["steps"] = o.steps;
  j["threads"] = o.threads;
  j["data"] = !o.shards.empty() ? "shards" : o.synthetic ? "synthetic" : "fashion-mnist";
  if (o.shards.empty()) j["train_samples"] = train_samples;
  if (o.evaluate) {
    j["test_accuracy"] = test.first;
    j["test_loss"] = test.second;
  }
  if (streamed) j["data_threads"] = o.data_threads;
  j["samples_per_s"] = static_cast<double>(ctx.size()) * o.batch * o.steps / elapsed;
  j["step_ms"] = elapsed / o.steps * 1e3;
  j["final_loss"] = avg_loss;
  j["overlap"] = dist ? dist->overlaps() : false;
  j["sync"] = o.sync;
  j["optimizer"] = o.optimizer;
  j["shard"] = o.shard;
  if (o.shard == 3) j["shard_prefetch"] = o.shard_prefetch;
  if (dist) {
    const MemoryBytes mem = dist->memory_bytes();
    j["optimizer_state_bytes"] = mem.optimizer_state;
    j["parameter_peak_bytes"] = mem.parameters_peak;
  }
  j["lockstep"] = o.sync || o.lockstep;
  j["fusion_bytes"] = eo.fusion_bytes;
  j["cycle_ms"] = eo.cycle_ms;
  j["flight_record_entries"] = eo.flight_entries;
  // A lossy mode (powersgd:R or int8) is DistributedOptimizer's.
  j["compression"] = dist && !dist->lossy_compression().empty()
                         ? dist->lossy_compression()
                         : (o.compression.empty() ? engine::compression_name(eo.compression) : o.compression);
  if (dist && !dist->compression_reason().empty()) j["compression_reason"] = dist->compression_reason();
  j["engine_rounds"] = stats.rounds;
  j["engine_full_rounds"] = stats.full_rounds;
  j["engine_in_place_bytes"] = stats.in_place_bytes;
  j["engine_packed_bytes"] = stats.packed_bytes;
  j["engine_compressed_collectives"] = stats.compressed_collectives;
  // What compression auto decided, per size class (from 2^class bytes up).
  nlohmann::json decided = nlohmann::json::array();
  for (const auto& [cls, d] : ctx.engine().auto_compression_decisions()) {
    decided.push_back({{"from_bytes", std::uint64_t{1} << cls},
                       {"choice", engine::compression_name(d.choice)},
                       {"float32_ms", d.none_ms},
                       {"float16_ms", d.fp16_ms}});
  }
  j["compression_auto"] = decided;
  return j;
}

}  // namespace

nlohmann::json run_train_bench(Context& ctx, const TrainBenchOptions& o) {
  at::set_num_threads(o.threads);
  auto [images, labels] = load_data(o);
  torch::manual_seed(42);
  auto model = train::make_model(o.model, 1);
  broadcast_parameters(ctx, *model);
  std::unique_ptr<torch::optim::Optimizer> local = make_optimizer(o, *model);
  DistributedOptions dopts;
  dopts.overlap = o.overlap;
  dopts.compression = o.compression;
  dopts.shard = o.shard;
  dopts.shard_prefetch = o.shard_prefetch;
  std::unique_ptr<DistributedOptimizer> dist;
  if (o.sync) dist = std::make_unique<DistributedOptimizer>(ctx, *local, model->named_parameters(), dopts);
  if (dist && o.shard == 3) {
    DistributedOptimizer* d = dist.get();
    model->set_layer_runner([d](const std::string& layer, const torch::Tensor& x,
                                const train::Model::LayerForward& f) { return d->run_layer(layer, x, f); });
  }

  DistributedSampler sampler(static_cast<std::size_t>(std::max<std::int64_t>(images.size(0), 1)), ctx,
                             true, 0, true);
  std::unique_ptr<data::Loader> loader = shard_loader(ctx, o);

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
  std::unique_ptr<PaceRank> pacer;
  if (!o.pace_file.empty()) pacer = std::make_unique<PaceRank>(o.pace_file, ctx.rank(), seconds_to_millis(o.pace_bound_s));
  // Per timed step: its start, then the end of its data wait, forward and
  // backward, gradient sync and optimizer (the step log's columns).
  std::vector<std::array<SteadyClock::time_point, 5>> marks;
  if (!o.step_log.empty()) marks.reserve(static_cast<size_t>(o.steps));
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    if (s == o.warmup) {
      allreduce(ctx, "bench/start", 0.0);  // every rank starts the clock together
      start = SteadyClock::now();
    }
    if (pacer && s >= o.warmup) pacer->before_step(s - o.warmup);
    std::array<SteadyClock::time_point, 5> m;
    m[0] = SteadyClock::now();
    auto [x, y] = next_batch();
    m[1] = SteadyClock::now();
    if (dist) {
      dist->zero_grad();
    } else {
      local->zero_grad();
    }
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    m[2] = SteadyClock::now();
    if (dist) {
      dist->synchronize();
    } else if (o.lockstep) {
      allreduce(ctx, "bench/lockstep", 0.0);
    }
    m[3] = SteadyClock::now();
    if (dist) {
      dist->step();
    } else {
      local->step();
    }
    loss_value = loss.item<double>();
    m[4] = SteadyClock::now();
    if (!o.step_log.empty() && s >= o.warmup) marks.push_back(m);
  }
  if (!o.step_log.empty()) write_step_log(o.step_log + "." + std::to_string(ctx.rank()), marks);
  double mine = std::chrono::duration<double>(SteadyClock::now() - start).count();
  // The slowest rank's time: max through a sum of one-hot vectors.
  auto times = torch::zeros({ctx.size()}, torch::kDouble);
  times[ctx.rank()] = mine;
  times = allreduce(ctx, "bench/times", times, false);
  double elapsed = times.max().item<double>();
  double avg_loss = allreduce(ctx, "bench/loss", loss_value);
  std::pair<double, double> test{-1, -1};
  if (o.evaluate) test = evaluate_test_set(ctx, o, *model);
  return result_line(ctx, o, *model, images.size(0), loader != nullptr, dist.get(), elapsed, avg_loss, test);
}

}  // namespace hpct::bench
