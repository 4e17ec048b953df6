#include "train/epoch_loop.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "engine/engine.h"
#include "train/training_state.h"
#include "train/validation.h"

namespace hpct::train {

void EpochLoop::run(std::int64_t first_epoch) {
  // Resumed at or past --max-steps (a job requeued after its last
  // checkpoint): there is nothing left to train, only to report.
  bool stop = o.max_steps > 0 && step >= o.max_steps;
  const bool finished_before = stop || first_epoch >= o.epochs;
  if (stop && lead) {
    log.info("train", "already at step " + std::to_string(step) + " of --max-steps " + std::to_string(o.max_steps) +
                          "; nothing left to train");
  }
  for (std::int64_t epoch = first_epoch; epoch < o.epochs && !stop; ++epoch) {
    run_epoch(epoch, &stop);
    if (signalled) break;
  }
  if (finished_before) evaluate();  // resumed after the last step: report the model as saved
}

void EpochLoop::run_epoch(std::int64_t epoch, bool* stop) {
  epoch_consumed = 0;
  if (o.data_split == "global") {
    epoch_consumed = resume_consumed;
    resume_consumed = 0;
    loader.start_elastic_epoch(epoch, epoch_consumed, ctx.rank(), ctx.size());
  } else {
    loader.start_epoch(epoch);
  }
  if (!loader_state.empty()) {
    loader.restore_state(loader_state);
    loader_state.clear();
  }
  model.train();
  auto epoch_start = Clock::now();
  const std::int64_t epoch_samples = train_steps(epoch, epoch_start, stop);
  if (signalled) {
    // The scheduler kills us KillWait seconds after its signal: save first, skip validation.
    save(epoch, false);
    if (lead) {
      log.info("train", "stopped on a signal after step " + std::to_string(step) +
                            "; checkpoint saved, resume with --resume auto");
    }
    return;
  }
  // Parameter servers: every worker waits for the others to finish the
  // epoch; ps-async: every worker now holds the servers' parameters.
  opt.end_epoch();
  double epoch_seconds = seconds_since(epoch_start);
  train_seconds += epoch_seconds;
  trained_samples += epoch_samples;
  if (o.progress && lead) std::printf("\n");
  evaluate();
  if (lead) report_epoch(epoch, epoch_seconds, epoch_samples);
  save(epoch, !*stop);
}

std::int64_t EpochLoop::train_steps(std::int64_t epoch, Clock::time_point epoch_start, bool* stop) {
  Interval interval;
  std::int64_t epoch_samples = 0;
  data::Batch batch;
  // What this rank does, for the flight record (hpctrain why names the phase
  // of a rank that never reached a collective).
  engine::FlightRecord& record = ctx.engine().flight_record();
  while (true) {
    auto t0 = Clock::now();
    record.set_phase(engine::Phase::kData, step);
    if (!loader.next(&batch)) break;
    record.set_phase(engine::Phase::kForward);
    auto t1 = Clock::now();
    double lr = learning_rate(o, ctx.size(), static_cast<double>(step) / static_cast<double>(steps_per_epoch));
    set_lr(optimizer, lr);
    opt.zero_grad();
    torch::Tensor loss;
    {
      AutocastScope autocast(device.type(), amp);
      loss = classification_loss(o.model, logits(model, o.model, batch.images), batch.labels, {}, batch.max_label);
    }
    record.set_phase(engine::Phase::kBackward);
    scaler.scale_loss(loss).backward();
    auto t2 = Clock::now();
    opt.synchronize();
    // fp16: a step whose averaged gradients hold an inf or NaN is skipped
    // on every rank alike (they hold the same gradients).
    const bool finite = scaler.unscale_and_check(params);
    scaler.update(finite);
    auto t3 = Clock::now();
    record.set_phase(engine::Phase::kOptimizer);
    if (finite) opt.step();
    auto t4 = Clock::now();
    ++step;
    epoch_consumed += static_cast<std::uint64_t>(global_batch);
    last_loss_t = loss.detach();
    using D = std::chrono::duration<double>;
    interval.data += D(t1 - t0).count();
    interval.compute += D(t2 - t1).count();
    interval.sync += D(t3 - t2).count();
    interval.optim += D(t4 - t3).count();
    // Where a straggler's time goes (engine/straggler.h): data, or compute.
    ctx.engine().note_work(D(t1 - t0).count(), D(t2 - t1).count() + D(t4 - t3).count());
    if (prometheus) {
      prometheus->record_step(batch.labels.size(0), D(t1 - t0).count(), D(t2 - t1).count(),
                              D(t3 - t2).count(), D(t4 - t3).count());
      const MemoryBytes m = opt.memory_bytes();  // a sum of tensor sizes: cheap beside a step
      prometheus->record_memory({static_cast<double>(m.parameters), static_cast<double>(m.gradients),
                                 static_cast<double>(m.optimizer_state), static_cast<double>(m.parameters_peak)});
    }
    interval.loss = interval.loss.defined() ? interval.loss + last_loss_t : last_loss_t.to(torch::kDouble);
    ++interval.steps;
    epoch_samples += global_batch;
    if (o.progress && lead) {
      last_loss = last_loss_t.item<double>();
      print_progress(epoch, lr, epoch_samples, epoch_start);
    }
    bool at_end = o.max_steps > 0 && step >= o.max_steps;
    if (step % o.log_every == 0 || at_end) {
      report_interval(epoch, lr, interval);
      interval = Interval{};
    }
    if (o.stop_requested != nullptr && !at_end) {
      double asked = o.stop_requested->load() ? 1 : 0;
      if (allreduce(ctx, "train/stop_requested", asked, false) > 0) {
        signalled = true;
        *stop = true;
        break;
      }
    }
    if (o.checkpoint_every > 0 && step % o.checkpoint_every == 0 && !at_end) save(epoch, false);
    if (at_end) {
      *stop = true;
      break;
    }
  }
  if (last_loss_t.defined()) last_loss = last_loss_t.item<double>();
  return epoch_samples;
}

void EpochLoop::print_progress(std::int64_t epoch, double lr, std::int64_t epoch_samples,
                               Clock::time_point epoch_start) const {
  std::int64_t in_epoch = step - epoch * steps_per_epoch;
  int width = 30;
  int filled = static_cast<int>(width * in_epoch / steps_per_epoch);
  std::printf("\repoch %lld/%d [%s%s] %lld/%lld loss %.4f lr %.4g %.0f samples/s   ",
              static_cast<long long>(epoch + 1), o.epochs, std::string(filled, '=').c_str(),
              std::string(width - filled, ' ').c_str(), static_cast<long long>(in_epoch),
              static_cast<long long>(steps_per_epoch), last_loss, lr,
              static_cast<double>(epoch_samples) / seconds_since(epoch_start));
  std::fflush(stdout);
}

void EpochLoop::report_interval(std::int64_t epoch, double lr, const Interval& interval) {
  auto m = torch::zeros({ctx.size(), 5}, torch::kDouble);
  double n = std::max(1, interval.steps);
  const double loss_sum = interval.loss.defined() ? interval.loss.item<double>() : 0.0;
  if (last_loss_t.defined()) last_loss = last_loss_t.item<double>();
  m[ctx.rank()] = torch::tensor({interval.data / n, interval.compute / n, interval.sync / n,
                                 interval.optim / n, loss_sum / n},
                                torch::kDouble);
  m = allreduce(ctx, "train/step_times", m, false);
  if (!lead) return;
  auto totals = m.narrow(1, 0, 4).sum(1);
  auto slowest = totals.argmax().item<std::int64_t>();
  auto row = m[slowest];
  double elapsed = seconds_since(interval.start);
  nlohmann::json j;
  j["type"] = "step";
  j["step"] = step;
  j["epoch"] = epoch;
  j["loss"] = m.narrow(1, 4, 1).mean().item<double>();
  j["lr"] = lr;
  j["samples_per_s"] = static_cast<double>(interval.steps * global_batch) / elapsed;
  j["data_wait_ms"] = row[0].item<double>() * 1e3;
  j["forward_backward_ms"] = row[1].item<double>() * 1e3;
  j["sync_wait_ms"] = row[2].item<double>() * 1e3;
  j["optimizer_ms"] = row[3].item<double>() * 1e3;
  j["slowest_rank"] = slowest;
  nlohmann::json ranks = nlohmann::json::array();
  for (std::int64_t r = 0; r < ctx.size(); ++r) {
    ranks.push_back({{"data_wait_ms", m[r][0].item<double>() * 1e3},
                     {"forward_backward_ms", m[r][1].item<double>() * 1e3},
                     {"sync_wait_ms", m[r][2].item<double>() * 1e3},
                     {"optimizer_ms", m[r][3].item<double>() * 1e3}});
  }
  j["ranks"] = ranks;
  if (!opt.lossy_compression().empty()) j["compression"] = opt.lossy_compression();
  if (!opt.compression_reason().empty()) j["compression_reason"] = opt.compression_reason();
  auto sources = shard_fs.stats();
  if (!sources.empty()) j["sources"] = sources;  // rank 0's remote reads so far
  metrics.write(j);
  if (!o.progress) {
    std::printf("epoch %lld step %lld loss %.4f lr %.4g %.0f samples/s (slowest rank %lld: data %.1f ms, "
                "fwd+bwd %.1f ms, sync %.1f ms, opt %.1f ms)\n",
                static_cast<long long>(epoch + 1), static_cast<long long>(step),
                j["loss"].get<double>(), lr, j["samples_per_s"].get<double>(),
                static_cast<long long>(slowest), j["data_wait_ms"].get<double>(),
                j["forward_backward_ms"].get<double>(), j["sync_wait_ms"].get<double>(),
                j["optimizer_ms"].get<double>());
    std::fflush(stdout);
  }
}

void EpochLoop::report_epoch(std::int64_t epoch, double epoch_seconds, std::int64_t epoch_samples) {
  nlohmann::json j;
  j["type"] = "epoch";
  j["epoch"] = epoch;
  j["step"] = step;
  j["train_loss"] = last_loss;
  j["epoch_s"] = epoch_seconds;
  j["samples_per_s"] = static_cast<double>(epoch_samples) / std::max(1e-9, epoch_seconds);
  if (val) {
    j["val_loss"] = val_loss;
    j["val_accuracy"] = val_acc;
  }
  metrics.write(j);
  std::printf("epoch %lld/%d done: %.1f s, %.0f samples/s%s\n", static_cast<long long>(epoch + 1),
              o.epochs, epoch_seconds, j["samples_per_s"].get<double>(),
              val ? (", val loss " + std::to_string(val_loss) + ", val accuracy " +
                     std::to_string(val_acc * 100) + "%").c_str()
                  : "");
  std::fflush(stdout);
}

void EpochLoop::evaluate() {
  ctx.engine().flight_record().set_phase(engine::Phase::kEval);
  if (val) validate(ctx, model, o.model, *val, &val_loss, &val_acc);
}

void EpochLoop::save(std::int64_t epoch, bool epoch_done) {
  ctx.engine().flight_record().set_phase(engine::Phase::kCheckpoint);
  save_checkpoint(ctx, o, log, model, optimizer, loader, opt, step, epoch, epoch_done, epoch_consumed);
}

}  // namespace hpct::train
