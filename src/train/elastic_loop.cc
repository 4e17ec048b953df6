#include "train/elastic_loop.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>

#include <signal.h>
#include <unistd.h>

#include "train/training_state.h"
#include "train/validation.h"

namespace hpct::train {

void ElasticLoop::train_world(Context& ctx) {
  ++worlds;
  log = base_log.with_rank(ctx.rank());
  const bool lead = ctx.rank() == 0;
  MetricsFile metrics(lead ? o.metrics : "");
  record_change(ctx, metrics);
  // Random layers draw differently on each rank and in each world.
  torch::manual_seed(o.seed + 1 + static_cast<std::uint64_t>(ctx.rank()) +
                     1000003ull * static_cast<std::uint64_t>(state.last_change().generation));
  DistributedOptions dopts;
  dopts.compression = o.compression;
  dopts.compression_start_step = o.compression_start_step;
  dopts.allow_lossy = o.allow_lossy ? std::optional<bool>(true) : std::nullopt;
  dopts.shard = o.shard;
  dopts.shard_prefetch = o.shard_prefetch;
  DistributedOptimizer opt(ctx, optimizer, model.named_parameters(), dopts);
  // Sharded: this rank's range of the committed optimizer state, from the
  // ranks that hold it (the State synced the rest).
  if (o.shard > 0) shards.rebuild(ctx, state, model, optimizer, opt, loader);
  std::unique_ptr<data::Loader> val = open_validation_loader(lo, o.val, ctx.rank(), ctx.size());
  bool stop = o.max_steps > 0 && state.step >= o.max_steps;
  while (state.epoch < o.epochs && !stop) {
    stop = run_epoch(ctx, opt, val.get(), metrics);
    if (stop) break;
    ++state.epoch;
    state.batch = 0;
    state.samples = 0;
    commit(ctx, opt);
  }
  write_summary(ctx, val.get(), metrics);
}

void ElasticLoop::commit(Context& ctx, DistributedOptimizer& opt) {
  if (o.shard > 0) {
    shards.commit(ctx, state, model, optimizer, opt, loader);
  } else {
    state.commit();
  }
}

void ElasticLoop::record_change(Context& ctx, MetricsFile& metrics) {
  const auto& change = state.last_change();
  nlohmann::json cj;
  cj["type"] = "elastic";
  cj["generation"] = change.generation;
  cj["reason"] = change.reason;
  cj["old_size"] = change.old_size;
  cj["new_size"] = change.new_size;
  cj["rollback_steps"] = change.rollback_steps;
  cj["seconds"] = change.seconds;
  cj["step"] = state.step;
  changes.push_back(cj);
  metrics.write(cj);
  if (prometheus) prometheus->record_world(change.generation, ctx.size());
}

bool ElasticLoop::run_epoch(Context& ctx, DistributedOptimizer& opt, data::Loader* val, MetricsFile& metrics) {
  const bool lead = ctx.rank() == 0;
  const std::int64_t global_batch = o.batch * ctx.size();
  bool stop = false;
  loader.start_elastic_epoch(state.epoch, static_cast<std::uint64_t>(state.samples), ctx.rank(), ctx.size());
  model.train();
  auto epoch_start = Clock::now();
  auto interval_start = Clock::now();
  std::int64_t epoch_trained = 0;
  data::Batch batch;
  while (true) {
    const auto t0 = Clock::now();
    if (!loader.next(&batch)) break;
    const auto t1 = Clock::now();
    const double progress = static_cast<double>(state.epoch) + static_cast<double>(state.samples) / epoch_samples;
    const double lr = learning_rate(o, ctx.size(), progress);
    set_lr(optimizer, lr);
    opt.zero_grad();
    auto loss = classification_loss(o.model, logits(model, o.model, batch.images), batch.labels);
    loss.backward();
    const auto t2 = Clock::now();
    opt.synchronize();
    const auto t3 = Clock::now();
    opt.step();
    if (prometheus) {
      using D = std::chrono::duration<double>;
      prometheus->record_step(batch.labels.size(0), D(t1 - t0).count(), D(t2 - t1).count(),
                              D(t3 - t2).count(), D(Clock::now() - t3).count());
    }
    ++state.step;
    ++state.batch;
    state.samples += global_batch;
    epoch_trained += global_batch;
    last_loss = loss.item<double>();
    if (state.worker_id() == o.fault_worker && worlds == 1 && state.step == o.fault_step) {
      std::printf("fault: worker %lld ends itself at step %lld (%s)\n", static_cast<long long>(state.worker_id()),
                  static_cast<long long>(state.step), o.fault_kind.c_str());
      std::fflush(stdout);
      if (o.fault_kind == "exit") throw std::runtime_error("injected fault at step " + std::to_string(state.step));
      ::kill(::getpid(), SIGKILL);
    }
    if (lead && state.step % o.log_every == 0) {
      const double secs = seconds_since(interval_start);
      nlohmann::json j;
      j["type"] = "step";
      j["step"] = state.step;
      j["epoch"] = state.epoch;
      j["size"] = ctx.size();
      j["loss"] = last_loss;  // rank 0's last batch (the elastic loop keeps no split)
      j["lr"] = lr;
      j["samples_per_s"] = static_cast<double>(o.log_every * global_batch) / std::max(1e-9, secs);
      metrics.write(j);
      std::printf("epoch %lld step %lld loss %.4f lr %.4g size %d %.0f samples/s\n",
                  static_cast<long long>(state.epoch + 1), static_cast<long long>(state.step), last_loss, lr,
                  ctx.size(), static_cast<double>(o.log_every * global_batch) / std::max(1e-9, secs));
      std::fflush(stdout);
      interval_start = Clock::now();
    }
    if (o.max_steps > 0 && state.step >= o.max_steps) {
      stop = true;
      break;
    }
    if (state.step % o.elastic_commit_every == 0) commit(ctx, opt);
  }
  const double secs = seconds_since(epoch_start);
  train_seconds += secs;
  trained_samples += epoch_trained;
  if (val) validate(ctx, model, o.model, *val, &val_loss, &val_acc);
  if (lead) {
    nlohmann::json j;
    j["type"] = "epoch";
    j["epoch"] = state.epoch;
    j["step"] = state.step;
    j["size"] = ctx.size();
    j["train_loss"] = last_loss;
    if (val) {
      j["val_loss"] = val_loss;
      j["val_accuracy"] = val_acc;
    }
    metrics.write(j);
    std::printf("epoch %lld/%d done on %d ranks: %.1f s%s\n", static_cast<long long>(state.epoch + 1),
                o.epochs, ctx.size(), secs,
                val ? (", val loss " + std::to_string(val_loss) + ", val accuracy " +
                       std::to_string(val_acc * 100) + "%").c_str()
                    : "");
    std::fflush(stdout);
  }
  return stop;
}

void ElasticLoop::write_summary(Context& ctx, data::Loader* val, MetricsFile& metrics) {
  const auto check = check_parameters(ctx, model);
  if (!o.save_model.empty()) save_final_model(ctx, model, o.save_model, log);
  summary["type"] = "summary";
  summary["model"] = o.model;
  summary["parameters"] = parameter_count(model);
  summary["np"] = ctx.size();
  summary["epochs"] = o.epochs;
  summary["batch_per_rank"] = o.batch;
  summary["global_batch"] = o.batch * ctx.size();
  summary["steps"] = state.step;
  summary["resumed_from_step"] = -1;
  summary["stopped_by_signal"] = false;
  summary["train_loss"] = last_loss;
  if (val) {
    summary["val_loss"] = val_loss;
    summary["val_accuracy"] = val_acc;
  }
  summary["train_samples_per_s"] = static_cast<double>(trained_samples) / std::max(1e-9, train_seconds);
  summary["wall_s"] = seconds_since(wall_start);
  summary["params_crc32c"] = check.crc_hex;
  summary["params_identical_across_ranks"] = check.identical;
  summary["elastic_changes"] = changes;
  summary["rank"] = ctx.rank();
  metrics.write(summary);
}

}  // namespace hpct::train
