// `hpctrain train`: data-parallel training of a built-in or TorchScript model on WebDataset
// shards (train/trainer.h). Each rank runs this command: under `hpctrain
// launch`, mpirun or srun, or alone as a single rank. Rank 0 prints the
// progress and the summary.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "hpctrain/hpctrain.h"
#include "train/device.h"
#include "train/scripted_model.h"
#include "train/trainer.h"

namespace hpct::cli {
namespace {

// Exit code of a run stopped by --checkpoint-on-signal after its checkpoint:
// sysexits' EX_TEMPFAIL, "try again later" (a requeued job resumes it).
constexpr int kStoppedBySignal = 75;

// Set by SIGUSR1/SIGTERM under --checkpoint-on-signal. A signal handler can
// only reach a static; it is read through TrainOptions::stop_requested only.
std::atomic<bool> stop_signal_seen{false};

void on_stop_signal(int) { stop_signal_seen.store(true); }

void install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGUSR1, SIGTERM}) {
    if (::sigaction(sig, &sa, nullptr) != 0) throw_io("sigaction", errno);
  }
}

// A number of the summary; NaN when absent or null (no epoch ran).
double num(const nlohmann::json& s, const char* key) {
  return s.contains(key) && s[key].is_number() ? s[key].get<double>() : NAN;
}

void print_summary(const nlohmann::json& s) {
  std::printf("summary: %s on %d rank(s), %d epoch(s), global batch %lld, %lld steps\n",
              s["model"].get<std::string>().c_str(), s["np"].get<int>(), s["epochs"].get<int>(),
              static_cast<long long>(s["global_batch"].get<std::int64_t>()),
              static_cast<long long>(s["steps"].get<std::int64_t>()));
  if (s.contains("val_accuracy")) {
    std::printf("summary: validation accuracy %.2f%%, loss %.4f\n", num(s, "val_accuracy") * 100,
                num(s, "val_loss"));
  }
  std::printf("summary: train loss %.4f, %.0f samples/s, wall %.1f s\n", num(s, "train_loss"),
              num(s, "train_samples_per_s"), num(s, "wall_s"));
  std::printf("summary: parameters crc32c %s, identical on every rank: %s\n",
              s["params_crc32c"].get<std::string>().c_str(),
              s["params_identical_across_ranks"].get<bool>() ? "yes" : "NO");
  std::cout << s.dump() << std::endl;
}

// How the gradients move and where the model computes: --compression and
// its start, --allow-lossy, --device, --amp, --sync, --staleness and --shard.
void add_sync_and_device_flags(CLI::App* c, train::TrainOptions* o) {
  c->add_option("--compression", o->compression,
                "Gradient compression: none, fp16, bf16, auto (default HPCT_COMPRESSION, auto), or lossy with "
                "error feedback: powersgd[:RANK] (low rank, default 4) or int8 (docs/compression.md)");
  c->add_option("--compression-start-step", o->compression_start_step,
                "Lossy compression: steps of plain allreduce first (default HPCT_COMPRESSION_START_STEP, 50)");
  c->add_flag("--allow-lossy", o->allow_lossy,
              "--compression auto may pick powersgd or int8 when the link limits the step (HPCT_ALLOW_LOSSY)");
  c->add_option("--device", o->device,
                "cpu, cuda or cuda:N: where the model trains (docs/gpu.md); several ranks may share a GPU")
      ->capture_default_str();
  c->add_option("--amp", o->amp, "Mixed precision: bf16, or fp16 with dynamic loss scaling (autocast; "
                "default none: float32)");
  c->add_option("--sync", o->sync,
                "allreduce, ps or ps-async (parameter servers: launch --servers K; default HPCT_SYNC)");
  c->add_option("--staleness", o->staleness,
                "ps-async: steps a worker may run ahead of the slowest (default HPCT_PS_STALENESS)");
  c->add_option("--shard", o->shard,
                "Sharded data parallel (docs/sharding.md): 0 off, 1 optimizer state, 2 and gradients, 3 and "
                "parameters split over the ranks")
      ->check(CLI::Range(0, 3))
      ->capture_default_str();
  c->add_option("--data-split", o->data_split,
                "rank (a slice per rank) or global (by global batch: the same samples per step at any world "
                "size, so a --shard checkpoint resumes mid-epoch on more or fewer ranks)")
      ->check(CLI::IsMember({"rank", "global"}))
      ->capture_default_str();
  c->add_option("--shard-prefetch", o->shard_prefetch,
                "--shard 3: gather the next layer while this one computes, when both fit in the largest layer's bytes (false: never)")
      ->capture_default_str();
}

}  // namespace

void add_train_command(CLI::App& app, Cli& cli) {
  auto o = std::make_shared<train::TrainOptions>();
  auto* c = app.add_subcommand("train", "Train a model on WebDataset shards across the job's ranks");
  c->add_option("--model", o->model, "mlp, cnn, resnet20, mlp50m, mlp200m, or a TorchScript file (torch.jit.script(m).save())")
      ->capture_default_str();
  c->add_option("--data", o->data, "Training shards: files, patterns ('train-{000000..000005}.tar') or @list")
      ->required();
  c->add_option("--val", o->val, "Validation shards (evaluated after each epoch, split over ranks)");
  c->add_option("--epochs", o->epochs, "Epochs")->capture_default_str();
  c->add_option("--batch", o->batch, "Batch per rank")->capture_default_str();
  c->add_option("--lr", o->lr, "Learning rate for a global batch of --lr-reference-batch")->capture_default_str();
  c->add_option("--lr-scaling", o->lr_scaling, "linear (lr x global batch / reference batch) or none")
      ->capture_default_str();
  c->add_option("--lr-reference-batch", o->lr_reference_batch, "Global batch --lr is meant for")
      ->capture_default_str();
  c->add_option("--warmup-epochs", o->warmup_epochs, "Linear warmup from one rank's rate to the global batch's")
      ->capture_default_str();
  c->add_option("--lr-schedule", o->lr_schedule, "cosine, step or constant after warmup")->capture_default_str();
  c->add_option("--optimizer", o->optimizer, "sgd or adam")->capture_default_str();
  c->add_option("--momentum", o->momentum, "SGD momentum")->capture_default_str();
  c->add_option("--weight-decay", o->weight_decay, "Weight decay")->capture_default_str();
  add_sync_and_device_flags(c, o.get());
  c->add_option("--threads", o->threads, "Intra-op threads per rank")->capture_default_str();
  c->add_option("--data-threads", o->data_threads, "Decode threads per rank")->capture_default_str();
  c->add_option("--checkpoint-dir", o->checkpoint_dir, "Where rank 0 writes checkpoints");
  c->add_option("--checkpoint-every", o->checkpoint_every, "Steps between checkpoints (0: each epoch's end)")
      ->capture_default_str();
  c->add_option("--resume", o->resume, "auto (newest whole checkpoint in --checkpoint-dir) or a checkpoint file");
  c->add_option("--metrics", o->metrics, "JSON-lines metrics file (rank 0 appends)");
  c->add_option("--save-model", o->save_model,
                "Write the final model here (rank 0; every rank when the path holds {rank}): TorchScript for a "
                "TorchScript model, a libtorch archive otherwise");
  c->add_option("--seed", o->seed, "Seed of the model, the data order and augmentation")->capture_default_str();
  c->add_option("--max-steps", o->max_steps, "Stop after this many steps in total (0: no limit)")
      ->capture_default_str();
  c->add_option("--log-every", o->log_every, "Steps between metrics lines")->capture_default_str();
  auto on_signal = std::make_shared<bool>(false);
  c->add_flag("--checkpoint-on-signal", *on_signal,
              "On SIGUSR1 or SIGTERM (Slurm's warning before a time limit, scontrol requeue, preemption): "
              "checkpoint at the next step and exit 75");
  auto elastic = std::make_shared<bool>(false);
  c->add_flag("--elastic", *elastic,
              "Elastic job (start with hpctrain launch --min-np A --max-np B): hosts may leave and join; "
              "training rolls back to the last commit and goes on (docs/elastic.md)");
  c->add_option("--commit-every", o->elastic_commit_every,
                "--elastic: steps between in-memory commits (a failure loses at most these)")
      ->capture_default_str();
  c->add_option("--fault-worker", o->fault_worker, "Tests: the elastic worker id that ends itself")->group("");
  c->add_option("--fault-step", o->fault_step, "Tests: the step at which it does")->group("");
  c->add_option("--fault", o->fault_kind, "Tests: kill (SIGKILL) or exit (an exception)")->group("");
  auto source_flags = std::make_shared<SourceFlags>();
  add_source_flags(c, source_flags.get());
  auto progress = std::make_shared<std::string>("auto");
  c->add_option("--progress", *progress, "auto (bar when stdout is a terminal), bar or lines")
      ->capture_default_str();
  c->callback([&cli, o, progress, on_signal, source_flags, elastic] {
    cli.run = [&cli, o, progress, on_signal, source_flags, elastic] {
      apply_source_flags(*source_flags, &cli.config);
      if (*progress != "auto" && *progress != "bar" && *progress != "lines") {
        throw_invalid_argument("--progress " + *progress + ": choose auto, bar or lines");
      }
      // A missing GPU or bad --amp ends the run here, in milliseconds, before
      // the model, the data or the other ranks.
      const torch::Device device = train::parse_device(o->device);
      train::parse_amp(o->amp);
      train::use_device(device);
      train::open_model(o->model);  // refuse an unknown or unreadable model before joining the job
      if (*elastic) {
        if (!device.is_cpu()) throw_invalid_argument("--elastic trains on the CPU for now; drop --device");
        if (*on_signal) throw_invalid_argument("--elastic keeps its state in memory; drop --checkpoint-on-signal");
        Logger log = Logger::from_config(cli.config, -1);
        auto summary = train::run_elastic_training(*o, cli.config, log);
        if (summary.value("removed", false)) {
          std::printf("elastic: this worker was removed from the job\n");
          return 0;
        }
        if (summary["rank"].get<int>() == 0) print_summary(summary);
        return summary["params_identical_across_ranks"].get<bool>() ? 0 : 1;
      }
      if (*on_signal) install_stop_signals();  // before joining: a signal while we connect is kept too
      // On a GPU the engine gets the plugin's collectives (NCCL or staged).
      auto ctx = device.is_cuda() ? init(cli.config, train::gpu_engine_setup(device, cli.config)) : init(cli.config);
      auto opts = *o;
      if (*on_signal) opts.stop_requested = &stop_signal_seen;
      opts.progress = *progress == "bar" || (*progress == "auto" && ::isatty(1) != 0);
      Logger log = Logger::from_config(cli.config, ctx->rank());
      auto summary = train::run_training(*ctx, opts, log);
      if (ctx->rank() == 0) print_summary(summary);
      if (summary["stopped_by_signal"].get<bool>()) return kStoppedBySignal;
      return summary["params_identical_across_ranks"].get<bool>() ? 0 : 1;
    };
  });
}

}  // namespace hpct::cli
