#include "train/trainer.h"

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>

#include "core/config.h"
#include "core/env.h"
#include "core/error.h"
#include "core/world.h"
#include "data/loader.h"
#include "data/source/remote_fs.h"
#include "elastic/elastic.h"
#include "engine/engine.h"
#include "metrics/rank_metrics.h"
#include "train/device.h"
#include "train/elastic_loop.h"
#include "train/epoch_loop.h"
#include "train/models.h"
#include "train/sharded_checkpoint_train.h"
#include "train/train_setup.h"
#include "train/training_state.h"
#include "train/validation.h"

// The phases of a run live beside this file: the set-up shared by both
// loops (train_setup.h), the epoch loop (epoch_loop.h) and the elastic one
// (elastic_loop.h), validation (validation.h) and checkpointing
// (training_state.h). Here: the options checked, the run set up, the
// summary.
namespace hpct::train {
namespace {

// What --shard works with; DistributedOptimizer refuses the rest (--sync
// ps, lossy compression) by name.
void check_shard(const TrainOptions& o) {
  if (o.shard == 0) return;
  const std::string flag = "--shard " + std::to_string(o.shard);
  if (o.shard < 0 || o.shard > 3) throw_invalid_argument(flag + ": choose 0 (off), 1, 2 or 3");
  // Checkpoints are sharded (sharded_checkpoint_train.h).
  if (parse_device(o.device).is_cuda()) {
    throw_invalid_argument(flag + " trains on the CPU for now (--device " + o.device + "): drop --shard on GPUs");
  }
  if (o.shard == 3) {
    const auto names = model_names();
    if (std::find(names.begin(), names.end(), o.model) == names.end()) {
      throw_invalid_argument("--shard 3 gathers each layer in the forward of a built-in model (" + o.model +
                             " is a TorchScript model): use --shard 1 or 2, or a built-in model");
    }
  }
}

void check_options(const TrainOptions& o) {
  if (o.data.empty()) throw_invalid_argument("--data: no training shards given");
  if (o.epochs < 1 || o.batch < 1 || o.threads < 1 || o.log_every < 1) {
    throw_invalid_argument("--epochs, --batch, --threads and --log-every must be at least 1");
  }
  if ((o.checkpoint_every > 0 || !o.resume.empty()) && o.checkpoint_dir.empty() &&
      (o.resume.empty() || o.resume == "auto")) {
    throw_invalid_argument("--checkpoint-every and --resume auto need --checkpoint-dir");
  }
  if (o.stop_requested != nullptr && o.checkpoint_dir.empty()) {
    throw_invalid_argument("--checkpoint-on-signal needs --checkpoint-dir: where would the checkpoint go?");
  }
  check_shard(o);
  if (o.data_split == "global" && o.shard == 0 && !o.checkpoint_dir.empty()) {
    throw_invalid_argument("--data-split global with whole checkpoints: they keep each rank's loader position "
                           "for the world size that wrote them; use --data-split rank, or --shard N (sharded "
                           "checkpoints keep the global position)");
  }
  if (o.data_split != "rank" && o.data_split != "global") {
    throw_invalid_argument("--data-split " + o.data_split + ": choose rank or global");
  }
  const torch::Device device = parse_device(o.device);
  const c10::ScalarType amp = parse_amp(o.amp);
  if (amp == c10::kHalf && !o.sync.empty() && o.sync != "allreduce") {
    throw_invalid_argument("--amp fp16 skips steps whose gradients overflow, which the parameter servers "
                           "cannot follow: use --amp bf16 or --sync allreduce");
  }
  if (device.is_cuda()) {
    const auto names = model_names();
    if (std::find(names.begin(), names.end(), o.model) == names.end()) {
      throw_invalid_argument("--device cuda: TorchScript models (" + o.model + ") train on the CPU for now; use a "
                             "built-in model, or hpctrain.torch from Python, on GPUs (docs/gpu.md)");
    }
    // The engine's device path carries plain and fp16/bf16 gradients, and
    // PowerSGD's and int8's tensors (their state and arithmetic stay on the
    // gradient's device: src/torch/powersgd.cc, int8_compressor.cc); the
    // parameter servers are CPU processes.
    if (!o.sync.empty() && o.sync != "allreduce") {
      throw_invalid_argument("--device cuda: --sync " + o.sync + " is not available on GPUs yet; use --sync "
                             "allreduce (docs/gpu.md)");
    }
  }
}

// The Prometheus endpoint of the rank (null without a metrics port), with
// the shard file system's per-source counters.
std::unique_ptr<metrics::RankMetrics> rank_metrics(Context& ctx, const std::shared_ptr<data::ShardFileSystem>& shard_fs) {
  return metrics::rank_metrics_from_config(
      ctx.config(), discover_world(ProcessEnv()), ProcessEnv(), &ctx.engine(), &ctx.engine().communicator(),
      [fs = shard_fs] {
        // The shard file system's per-source counters ("s3://bucket", "https://host:port"), by kind.
        std::vector<metrics::DataSourceTotals> out;
        const nlohmann::json stats = fs->stats();  // items() must not outlive it
        for (const auto& [source, c] : stats.items()) {
          metrics::DataSourceTotals t;
          t.kind = source.rfind("s3://", 0) == 0 ? "s3" : source.rfind("http", 0) == 0 ? "http" : source;
          t.bytes = c.value("bytes", 0.0);
          t.stalls = c.value("stalls", 0.0);
          t.stall_seconds = c.value("stall_ms", 0.0) / 1e3;
          out.push_back(t);
        }
        return out;
      });
}

// This process's peak resident memory (getrusage; Linux counts KiB).
std::int64_t peak_resident_bytes() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<std::int64_t>(u.ru_maxrss) * 1024;
}

// --shard 3: the model's layers gather their parameters through the optimizer.
void gather_layers_through(DistributedOptimizer& opt, Model& model) {
  if (opt.shard_stage() != 3) return;
  model.set_layer_runner([&opt](const std::string& layer, const torch::Tensor& x, const Model::LayerForward& f) {
    return opt.run_layer(layer, x, f);
  });
}

// The summary of run_training, after the loop (a collective: the final
// parameter check and every rank's remote reads).
nlohmann::json summarize(Context& ctx, const TrainOptions& o, const Logger& log, const EpochLoop& loop,
                         std::int64_t resumed_from, Clock::time_point wall_start) {
  const MemoryBytes memory = loop.opt.memory_bytes();  // before the gather below
  // --shard 3: the parameters are gathered for the check and the saved model.
  ParameterCheck check;
  loop.opt.with_full_parameters([&] {
    check = check_parameters(ctx, loop.model);
    if (!o.save_model.empty()) save_final_model(ctx, loop.model, o.save_model, log);
  });

  nlohmann::json s;
  s["type"] = "summary";
  s["model"] = o.model;
  s["parameters"] = parameter_count(loop.model);
  s["np"] = ctx.size();
  s["device"] = o.device;
  s["amp"] = o.amp.empty() ? "none" : o.amp;
  if (loop.scaler.enabled()) {
    s["loss_scale"] = loop.scaler.scale();
    s["skipped_steps"] = loop.scaler.skipped_steps();
  }
  s["epochs"] = o.epochs;
  s["batch_per_rank"] = o.batch;
  s["global_batch"] = loop.global_batch;
  s["steps"] = loop.step;
  s["resumed_from_step"] = resumed_from;
  s["stopped_by_signal"] = loop.signalled;
  s["compression"] = !loop.opt.lossy_compression().empty() ? loop.opt.lossy_compression()
                     : !o.compression.empty()               ? o.compression
                                                            : ctx.config().compression;
  if (!loop.opt.compression_reason().empty()) s["compression_reason"] = loop.opt.compression_reason();
  s["train_loss"] = loop.last_loss;
  if (loop.val) {
    s["val_loss"] = loop.val_loss;
    s["val_accuracy"] = loop.val_acc;
  }
  s["train_samples_per_s"] = static_cast<double>(loop.trained_samples) / std::max(1e-9, loop.train_seconds);
  s["wall_s"] = seconds_since(wall_start);
  s["shard"] = o.shard;
  {
    const MemoryBytes& m = memory;  // rank 0's (every rank's are within a kAlign of it)
    // Flat keys: tools find the summary as the line's last '{"'.
    s["param_bytes"] = m.parameters;
    s["param_peak_bytes"] = m.parameters_peak;
    s["grad_bytes"] = m.gradients;
    s["optimizer_state_bytes"] = m.optimizer_state;
    s["peak_rss_bytes"] = peak_resident_bytes();
  }
  s["params_crc32c"] = check.crc_hex;
  s["params_identical_across_ranks"] = check.identical;
  {
    // Remote reads of every rank: bytes, requests, retries, resumes, stalls.
    auto t = loop.shard_fs.totals();
    auto sums = allreduce(ctx, "train/source_totals", torch::tensor(t, torch::kDouble), false);
    if (sums[1].item<double>() > 0 || sums[6].item<double>() > 0) {
      const char* names[] = {"bytes", "requests", "retries", "resumes", "stalls", "stall_ms", "cache_hits"};
      for (size_t i = 0; i < t.size(); ++i) s["remote_reads"][names[i]] = sums[static_cast<std::int64_t>(i)].item<double>();
    }
  }
  return s;
}

}  // namespace

double learning_rate(const TrainOptions& o, int world_size, double e) {
  double scaled = o.lr;
  if (o.lr_scaling == "linear") {
    scaled = o.lr * static_cast<double>(o.batch * world_size) / static_cast<double>(o.lr_reference_batch);
  } else if (o.lr_scaling != "none") {
    throw_invalid_argument("--lr-scaling " + o.lr_scaling + ": choose linear or none");
  }
  // Goyal et al.'s gradual warmup: from one rank's rate (its batch alone) up
  // to the rate of the global batch.
  double start = scaled / world_size;
  if (o.warmup_epochs > 0 && e < o.warmup_epochs) return start + (scaled - start) * e / o.warmup_epochs;
  double span = std::max(1e-9, o.epochs - o.warmup_epochs);
  double f = std::clamp((e - o.warmup_epochs) / span, 0.0, 1.0);
  if (o.lr_schedule == "cosine") return scaled * 0.5 * (1 + std::cos(M_PI * f));
  if (o.lr_schedule == "step") return scaled * (f < 0.5 ? 1.0 : f < 0.75 ? 0.1 : 0.01);
  if (o.lr_schedule == "constant") return scaled;
  throw_invalid_argument("--lr-schedule " + o.lr_schedule + ": choose cosine, step or constant");
}

// The sync, compression and staleness of the run's DistributedOptimizer.
DistributedOptions distributed_options(const TrainOptions& o) {
  DistributedOptions d;
  d.compression = o.compression;
  d.sync = o.sync;
  d.staleness = o.staleness;
  d.compression_start_step = o.compression_start_step;
  d.allow_lossy = o.allow_lossy ? std::optional<bool>(true) : std::nullopt;
  d.shard = o.shard;
  d.shard_prefetch = o.shard_prefetch;
  return d;
}

namespace {

// A resumed run's lossy-compression state (residuals), or the refusal of a
// lossy mode the checkpoint was not written with.
void restore_compression(DistributedOptimizer& opt, const ResumePoint& resumed) {
  if (!resumed.compression_state.empty()) {
    opt.restore_compression_state(resumed.compression_state);
  } else if (resumed.resumed_from >= 0 && !opt.lossy_compression().empty()) {
    throw_invalid_argument("--compression " + opt.lossy_compression() + ": the checkpoint of step " +
                           std::to_string(resumed.resumed_from) + " holds no compression state (written without it); " +
                           "resume with the compression it was written with");
  }
}

}  // namespace

nlohmann::json run_training(Context& ctx, const TrainOptions& o, const Logger& log) {
  check_options(o);
  learning_rate(o, ctx.size(), 0);  // refuse a bad schedule before any work
  const bool lead = ctx.rank() == 0;
  at::set_num_threads(o.threads);
  auto wall_start = Clock::now();

  // One file system for every loader of the run: remote shards are fetched
  // once (into spools or the cache) and their counts go to the metrics.
  auto shard_fs = data::make_shard_file_system(ctx.config(), log);
  const torch::Device device = parse_device(o.device);
  use_device(device);  // loads torch's CUDA library for a GPU (the CLI checked it before joining)
  auto sample = probe_sample(o, log, shard_fs, ctx.config());
  torch::manual_seed(o.seed);
  auto model = open_probed_model(o, sample);
  auto optimizer = make_optimizer(o, *model);
  // Dropout and other random layers draw differently on each rank.
  torch::manual_seed(o.seed + 1 + static_cast<std::uint64_t>(ctx.rank()));

  data::LoaderOptions lo;
  lo.shards = o.data;
  lo.rank = ctx.rank();
  lo.size = ctx.size();
  lo.seed = o.seed;
  lo.batch_size = o.batch;
  lo.drop_last = true;  // full batches: the global batch is the same every step
  lo.threads = o.data_threads;
  data::apply_config(ctx.config(), &lo);
  lo.fs = shard_fs;
  lo.normalize = true;
  lo.logger = log;
  lo.pin_memory = device.is_cuda();
  lo.device = device;
  data::Loader loader(lo);
  // Remote shards start downloading now, this rank's bytes of them, while
  // the world and the optimizer are set up.
  loader.prefetch();
  std::unique_ptr<data::Loader> val = open_validation_loader(lo, o.val, ctx.rank(), ctx.size());
  const std::int64_t steps_per_epoch = loader.batches_per_epoch();
  if (steps_per_epoch < 1) throw_invalid_argument("the training shards hold less than one batch per rank");

  // Sharded runs resume once DistributedOptimizer holds the shards (below).
  ResumePoint resumed = o.shard > 0 ? ResumePoint{} : resume_point(ctx, o, log, *model, *optimizer);
  broadcast_parameters(ctx, *model);  // on the host: the engine moves host tensors
  std::vector<torch::Tensor> trainable;
  for (const auto& p : model->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  if (device.is_cuda()) {
    // In place (the optimizer keeps its references to the same tensors).
    model->to(device);
    move_optimizer_state(*optimizer, device);
  }
  // On a GPU its hooks hand the engine CUDA gradients (tensor_ref: the
  // plugin's CudaDevice, the current stream's ready event); the engine
  // averages them on the GPU (gpu_engine_setup).
  DistributedOptimizer opt(ctx, *optimizer, model->named_parameters(), distributed_options(o));
  gather_layers_through(opt, *model);
  if (opt.shard_stage() > 0) resumed = resume_sharded_checkpoint(ctx, o, log, *model, *optimizer, opt);
  restore_compression(opt, resumed);

  MetricsFile metrics(lead ? o.metrics : "");
  const auto prometheus = rank_metrics(ctx, shard_fs);
  if (prometheus) {
    prometheus->record_world(0, ctx.size());
    log.info("train", "metrics at " + prometheus->url());
  }
  EpochLoop loop{ctx, o, log, *model, *optimizer, opt, loader, val.get(), *shard_fs, metrics, prometheus.get(),
                 steps_per_epoch, o.batch * ctx.size(), lead};
  loop.device = device;
  loop.amp = parse_amp(o.amp);
  loop.scaler = LossScaler(loop.amp == c10::kHalf);
  loop.params = trainable;
  loop.step = resumed.step;
  loop.loader_state = resumed.loader_state;
  loop.resume_consumed = resumed.consumed;
  {
    // Where this run begins: a restart by the launcher or a resume shows
    // in the report's timeline.
    nlohmann::json j;
    j["type"] = "start";
    j["model"] = o.model;
    j["np"] = ctx.size();
    j["batch_per_rank"] = o.batch;
    j["restart"] = discover_world(ProcessEnv()).restart;
    j["step"] = loop.step;
    j["resumed_from_step"] = resumed.resumed_from;
    metrics.write(j);
  }
  loop.run(resumed.first_epoch);
  auto s = summarize(ctx, o, log, loop, resumed.resumed_from, wall_start);
  metrics.write(s);
  return s;
}

nlohmann::json run_elastic_training(const TrainOptions& o, const Config& config, const Logger& base_log) {
  if (o.data.empty()) throw_invalid_argument("--data: no training shards given");
  if (o.epochs < 1 || o.batch < 1 || o.threads < 1 || o.log_every < 1 || o.elastic_commit_every < 1) {
    throw_invalid_argument("--epochs, --batch, --threads, --log-every and --commit-every must be at least 1");
  }
  if (o.shard == 3) {
    throw_invalid_argument("--elastic with --shard 3 is not supported: at stage 3 each rank keeps only its range "
                           "of the parameters too, which elastic commits do not replicate; use --shard 1 or 2 "
                           "(the optimizer state is sharded and each range replicated on another host), or drop "
                           "--elastic");
  }
  check_shard(o);
  if (!o.resume.empty() || o.stop_requested != nullptr || (!o.sync.empty() && o.sync != "allreduce")) {
    throw_invalid_argument("--elastic keeps its state in memory (commits): drop --resume, "
                           "--checkpoint-on-signal and --sync ps/ps-async");
  }
  learning_rate(o, 1, 0);  // refuse a bad schedule before any work
  at::set_num_threads(o.threads);
  const auto wall_start = Clock::now();
  Logger log = base_log;
  auto shard_fs = data::make_shard_file_system(config, log);
  auto sample = probe_sample(o, log, shard_fs, config);
  torch::manual_seed(o.seed);
  auto model = open_probed_model(o, sample);
  auto optimizer = make_optimizer(o, *model);

  data::LoaderOptions lo;
  lo.shards = o.data;
  lo.fs = shard_fs;
  lo.seed = o.seed;
  lo.batch_size = o.batch;
  lo.drop_last = true;
  lo.threads = o.data_threads;
  data::apply_config(config, &lo);
  lo.normalize = true;
  lo.logger = log;
  data::Loader loader(lo);
  loader.start_elastic_epoch(0, 0, 0, 1);
  // The epoch's length in samples, for the schedule (the whole dataset but
  // a last partial batch).
  const double epoch_samples = static_cast<double>(std::max<std::uint64_t>(1, loader.samples_per_epoch()));

  elastic::State state(*model, *optimizer);
  // Sharded: sharded checkpoints every 10 commits instead (elastic_shards.h).
  if (!o.checkpoint_dir.empty() && o.shard == 0) state.write_every(o.checkpoint_dir + "/elastic-state.pt", 10);
  // One endpoint for the process, across its worlds: the engine and the
  // communicator are rebuilt with each world, so their families are left
  // out here; the steps' split and the membership changes are recorded.
  const auto prometheus = metrics::rank_metrics_from_config(config, discover_world(ProcessEnv()), ProcessEnv(),
                                                            nullptr, nullptr);
  if (prometheus) log.info("train", "metrics at " + prometheus->url());
  ElasticLoop loop{o, base_log, log, *model, *optimizer, lo, loader, state, prometheus.get(), epoch_samples,
                   wall_start};
  const bool stayed = elastic::run(state, [&](Context& ctx) { loop.train_world(ctx); }, config, base_log);
  if (!stayed) {
    loop.summary = nlohmann::json::object();
    loop.summary["type"] = "summary";
    loop.summary["removed"] = true;
  }
  return loop.summary;
}

}  // namespace hpct::train
