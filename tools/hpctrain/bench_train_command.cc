// `hpctrain bench train`: data-parallel training speed of a built-in model,
// one JSON line per rank count (--np 1,2,4), each with its scaling
// efficiency (samples/s over np times the smallest count's per-rank
// samples/s). The jobs of all rank counts run side by side taking turns of
// --phase-steps steps (bench/pacer.h), so the host's drift cancels out; each
// line also lists every round's figures. --plot FILE.svg draws samples/s
// and efficiency against ranks.
//
// Starts N local ranks itself with `mpirun -np N <this binary> bench train
// --worker ...` (MPI backend by default: shared memory between local ranks;
// --backend gloo meets through a file store in a temp directory), with
// OMP_NUM_THREADS and OPENBLAS_NUM_THREADS set to --threads. Rank 0 writes
// its result to a file in the run's temp directory; the parent prints it
// (bench/train_bench.h lists its fields).
//
// With host options (-H, --hostfile, --spawner, -i, --ssh-option;
// bench_hosts.h) the ranks start through `hpctrain launch` on those hosts
// instead (Gloo unless the spawner is mpirun or srun). The run's temp
// directory (pace page, step logs, result) must then be on a file system
// every host sees: --tmp-dir, by default the system temp directory, which
// suits hosts that share this one's file system (namespace hosts, NFS /tmp).
//
// --peer ddp runs PyTorch DDP after our run, with each --peer-hook in turn
// (bench/ddp_peer.h), --repeats times alternating, then prints summary lines
// with medians. --accuracy trains --epochs epochs on both sides and adds the
// test set's accuracy to every line (docs/train.md).
//
// The jobs, their turns and their lines are bench/train_scaling.h's, the
// DDP runs bench/ddp_peer.h's, the chart bench/scaling_plot.h's: this file
// parses the flags and calls them.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/ddp_peer.h"
#include "bench/scaling_plot.h"
#include "bench/train_bench.h"
#include "bench/train_scaling.h"
#include "bench_hosts.h"
#include "comm/connect.h"
#include "commands.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "engine/engine.h"
#include "torch/gradient_compressor.h"
#include "train/models.h"

namespace hpct::cli {
namespace {

struct TrainArgs {
  bench::TrainBenchOptions o;
  std::string backend = "mpi";
  std::string np = "2";     // one rank count, or a list: 1,2,4
  std::string plot;         // SVG of samples/s and efficiency against ranks
  std::string result_file;  // worker: rank 0 writes its JSON line here instead of stdout
  double timeout_s = 3600;
  bool no_overlap = false;
  bool contention = false;  // also run each np > 1 without gradient sync
  int phase_steps = 20;     // timed steps per job per turn (bench/pacer.h)
  bool worker = false;
  BenchHosts hosts;
  std::string tmp_dir;  // where each job's directory goes (shared by the hosts)
  std::string peer;     // "ddp": also run PyTorch DDP on the same ranks and print the ratio
  std::string peer_hooks = "none";  // DDP's comm hooks, a list: none,fp16,powersgd:4
  int repeats = 1;                  // our run and each peer's, alternating, this many times
  double peer_timeout_s = 120;      // bound on any one step or collective of the peer
  double peer_bucket_mb = 0;        // DDP's bucket size (0: its defaults)
  bool accuracy = false;            // run --epochs epochs and report the test accuracy
  int epochs = 5;
  bool steps_given = false;
  std::string ddp_script = HPCT_DDP_PEER_SCRIPT;
  std::string python = HPCT_TORCH_PYTHON_DEFAULT;  // the python3 hpctrain was built against
  int ddp_port = 0;  // 0: 29500 + pid % 1000
};

// "a,b,c" -> {a, b, c}.
std::vector<std::string> split_list(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

std::vector<int> parse_np_list(const std::string& list) {
  std::vector<int> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      int n = std::stoi(item, &used);
      if (used != item.size() || n < 1) throw std::invalid_argument(item);
      out.push_back(n);
    } catch (const std::exception&) {
      throw_invalid_argument("--np " + list + ": '" + item +
                             "' is not a rank count (e.g. --np 1,2,4)");
    }
  }
  if (out.empty()) throw_invalid_argument("--np: no rank count given");
  return out;
}

void check_args(const TrainArgs& a) {
  if (a.o.synthetic && !a.o.shards.empty()) {
    throw_invalid_argument(
        "--synthetic and --data exclude each other: pick random images or the shards");
  }
  if (a.o.batch < 1 || a.o.threads < 1)
    throw_invalid_argument("--batch and --threads must be at least 1");
  if (a.o.steps < 2 || a.phase_steps < 2) {
    throw_invalid_argument(
        "--steps and --phase-steps must be at least 2 (the first step of each turn is not timed)");
  }
  if (a.o.data_threads < 1) throw_invalid_argument("--data-threads must be at least 1");
  train::make_model(a.o.model);  // refuse an unknown model before starting ranks
  comm::parse_backend(a.backend);
  if (!a.o.compression.empty() && !parse_lossy(a.o.compression)) engine::parse_compression(a.o.compression);
  if (a.o.optimizer != "sgd" && a.o.optimizer != "adam")
    throw_invalid_argument("--optimizer " + a.o.optimizer + ": choose sgd or adam");
  if (a.o.shard < 0 || a.o.shard > 3)
    throw_invalid_argument("--shard " + std::to_string(a.o.shard) + ": choose 0 (off), 1, 2 or 3");
  if (a.o.optimizer != "sgd" && !a.peer.empty())
    throw_invalid_argument("--optimizer " + a.o.optimizer +
                           " with --peer: the DDP peer trains with SGD; for Adam use bench/zero_peers.py");
  if (a.o.shard == 3 && a.accuracy)
    throw_invalid_argument("--accuracy with --shard 3: the test pass is not sharded; use `hpctrain train --shard 3`");
  if (a.o.shard != 0 && a.contention)
    throw_invalid_argument("--contention trains without gradient sync, which --shard needs: drop one of them");
  if (a.repeats < 1) throw_invalid_argument("--repeats must be at least 1");
  if (a.peer_timeout_s <= 0) throw_invalid_argument("--peer-timeout-s must be more than 0");
  if (a.peer_bucket_mb < 0) throw_invalid_argument("--peer-bucket-mb must be 0 (DDP's defaults) or more");
  if (a.peer.empty() && a.peer_hooks != "none")
    throw_invalid_argument("--peer-hook is a hook of the DDP peer: add --peer ddp");
  for (const auto& hook : split_list(a.peer_hooks)) bench::check_peer_hook(hook);
  if (a.o.max_samples < 0) throw_invalid_argument("--max-samples must be 0 (all) or more");
  if ((a.accuracy || a.o.max_samples > 0) && (a.o.synthetic || !a.o.shards.empty())) {
    throw_invalid_argument(
        "--accuracy and --max-samples use Fashion-MNIST in memory: drop --synthetic or --data");
  }
  if (a.accuracy && a.steps_given)
    throw_invalid_argument("--accuracy runs --epochs epochs and works out the steps: drop --steps");
  if (a.accuracy && a.epochs < 1) throw_invalid_argument("--epochs must be at least 1");
}

// The first host of -H or --hostfile: where DDP's rank 0 (its store) runs.
std::string first_host(const BenchHosts& h) {
  std::string text = h.hosts;
  if (text.empty() && !h.hostfile.empty()) {
    std::ifstream in(h.hostfile);
    std::string line;
    while (std::getline(in, line)) {
      const auto start = line.find_first_not_of(" \t");
      if (start != std::string::npos && line[start] != '#') {
        text = line.substr(start);
        break;
      }
    }
  }
  const auto end = text.find_first_of(":, \t");
  return text.substr(0, end);
}

// --peer ddp: one DDP run (bench/ddp_peer.h) with this run's settings and
// the given hook; across hosts through hpctrain launch on the same hosts,
// each run on its own port (a crashed run's may linger).
nlohmann::json run_ddp_peer(const TrainArgs& a, const std::string& hook, int np, int run, const Deadline& deadline) {
  bench::DdpPeerOptions d;
  d.model = a.o.model;
  d.hook = hook;
  d.steps = a.o.steps;
  d.batch = a.o.batch;
  d.threads = a.o.threads;
  d.warmup = a.o.warmup;
  d.evaluate = a.accuracy;
  d.bucket_mb = a.peer_bucket_mb;
  d.max_samples = a.o.max_samples;
  d.python = a.python;
  d.script = a.ddp_script;
  d.tmp_dir = a.tmp_dir;
  d.timeout_s = std::max(1.0, deadline.remaining().count() / 1e3);
  d.collective_timeout_s = std::min(a.peer_timeout_s, d.timeout_s);
  if (a.hosts.any()) {
    d.port = (a.ddp_port > 0 ? a.ddp_port : 29500 + ::getpid() % 1000) + run % 50;
    d.interface = a.hosts.network_interface.empty() ? "eth0" : a.hosts.network_interface;
    d.master = first_host(a.hosts);
    d.launch_prefix = [&a](int n, const std::map<std::string, std::string>& env) {
      return a.hosts.launch_prefix(n, "gloo", env);
    };
  }
  return bench::run_ddp_peer_once(d, np);
}

// The parent's settings for bench::run_train_scaling: the ranks start under
// mpirun on this host, or through hpctrain launch with the host options
// (Gloo unless the spawner is mpirun or srun).
bench::TrainScalingOptions scaling_options(const TrainArgs& a) {
  bench::TrainScalingOptions s;
  s.o = a.o;
  s.backend = a.backend;
  s.timeout_s = a.timeout_s;
  s.no_overlap = a.no_overlap;
  s.contention = a.contention;
  s.phase_steps = a.phase_steps;
  s.tmp_dir = a.tmp_dir;
  s.accuracy = a.accuracy;
  s.epochs = a.epochs;
  s.repeats = a.repeats;
  s.mpirun_prefix = local_mpirun_prefix;
  if (a.hosts.any()) {
    s.hosts_prefix = [&a](int np, const std::map<std::string, std::string>& env) {
      const bool mpi_launcher = a.hosts.spawner == "mpirun" || a.hosts.spawner == "srun";
      return a.hosts.launch_prefix(np, mpi_launcher ? a.backend : "gloo", env);
    };
  }
  return s;
}

// Our run and, with --peer ddp, DDP with each hook after it, --repeats times
// in turn, so the host's drift reaches every side alike; then, with a peer,
// one summary line per rank count and hook (bench::peer_summaries).
int run_parent(TrainArgs a, const Config& config) {
  check_args(a);
  const auto nps = parse_np_list(a.np);
  if (a.accuracy) {
    if (nps.size() != 1)
      throw_invalid_argument("--accuracy runs a number of epochs: give one rank count (--np " + a.np + ")");
    a.o.steps = bench::accuracy_steps(a.o, a.epochs, nps[0]);
  }
  const auto hooks = split_list(a.peer_hooks);
  Deadline deadline(seconds_to_millis(a.timeout_s));
  std::vector<nlohmann::json> ours, ddp;
  int peer_runs = 0;
  for (int repeat = 1; repeat <= a.repeats; ++repeat) {
    std::vector<nlohmann::json> lines;
    if (int rc = bench::run_train_scaling(scaling_options(a), config, nps, repeat, deadline, &lines)) return rc;
    if (!a.plot.empty() && repeat == a.repeats) {
      bench::write_scaling_plot(a.plot, lines);
      std::fprintf(stderr, "hpctrain: plot written to %s\n", a.plot.c_str());
    }
    ours.insert(ours.end(), lines.begin(), lines.end());
    if (a.peer != "ddp") continue;
    for (const auto& hook : hooks) {
      for (int np : nps) {
        nlohmann::json d = run_ddp_peer(a, hook, np, peer_runs++, deadline);
        // A hang inside DDP (its watchdog ended it: no progress within
        // --peer-timeout-s) is run once more; a crash is its result. The
        // line keeps the hang's text.
        if (d.value("hung", false) && deadline.remaining().count() > 0) {
          const nlohmann::json hung = d;
          std::fprintf(stderr, "hpctrain: bench train: the DDP peer hung; running it once more\n");
          d = run_ddp_peer(a, hook, np, peer_runs++, deadline);
          d["hung_before"] = hung["error"];
        }
        if (a.repeats > 1) d["repeat"] = repeat;
        if (a.accuracy) d["epochs"] = a.epochs;
        std::cout << d.dump() << std::endl;
        ddp.push_back(d);
      }
    }
  }
  for (const auto& s : bench::peer_summaries(ours, ddp)) std::cout << s.dump() << std::endl;
  return 0;
}

int run_worker(TrainArgs a, const Config& config) {
  auto ctx = init(config);
  a.o.pace_bound_s = a.timeout_s;
  if (a.no_overlap) a.o.overlap = false;
  auto j = bench::run_train_bench(*ctx, a.o);
  j["backend"] = config.backend;  // HPCT_BACKEND, set by the parent for every rank
  if (ctx->rank() == 0 && !a.result_file.empty()) {
    std::ofstream(a.result_file) << j.dump() << "\n";
  } else if (ctx->rank() == 0) {
    std::cout << j.dump() << std::endl;
  }
  return 0;
}

}  // namespace

void add_bench_train_command(CLI::App& bench, Cli& cli) {
  auto a = std::make_shared<TrainArgs>();
  auto* c =
      bench.add_subcommand("train", "Data-parallel training speed of a built-in model (JSON)");
  c->add_option("--model", a->o.model, "mlp, cnn or resnet20")->capture_default_str();
  c->add_option("--np", a->np, "Ranks to start on this host, or a list (1,2,4): one run each")
      ->capture_default_str();
  c->add_option("--plot", a->plot,
                "Write an SVG of samples/s and scaling efficiency against ranks");
  auto* steps = c->add_option("--steps", a->o.steps, "Timed steps")->capture_default_str();
  c->add_option("--batch", a->o.batch, "Batch per rank")->capture_default_str();
  c->add_option("--threads", a->o.threads, "Intra-op threads per rank")->capture_default_str();
  c->add_option("--warmup", a->o.warmup, "Untimed steps first")->capture_default_str();
  c->add_option("--phase-steps", a->phase_steps,
                "Jobs take turns (one per rank count, started once): each runs this many timed "
                "steps while the others sleep, round after round")
      ->capture_default_str();
  c->add_flag("--synthetic", a->o.synthetic, "Random images instead of Fashion-MNIST");
  c->add_option("--data-dir", a->o.data_dir, "Directory of the Fashion-MNIST idx files");
  c->add_option("--data", a->o.shards,
                "Shards to stream through the Loader instead (train-{000000..000005}.tar; "
                "`hpctrain data pack --from fashion-mnist` makes them)");
  c->add_option("--data-threads", a->o.data_threads, "Loader decode threads per rank (with --data)")
      ->capture_default_str();
  c->add_option("--backend", a->backend, "mpi or gloo")->capture_default_str();
  c->add_flag("--contention", a->contention,
              "For each np > 1 also time the same ranks training alone (no gradient sync) and in "
              "lockstep (meeting every step, no gradients): separates what the host allows from "
              "what moving gradients costs");
  c->add_flag(
      "--no-sync", [a](std::int64_t) { a->o.sync = false; },
      "Every rank trains alone (no gradient allreduce)");
  c->add_flag("--lockstep", a->o.lockstep,
              "With --no-sync: the ranks still meet once a step (a one-number allreduce)");
  c->add_flag(
      "--no-overlap", a->no_overlap,
      "Allreduce all gradients in step(), not during backward (default: HPCT_OVERLAP, auto)");
  c->add_option("--timeout-s", a->timeout_s, "Bound on the whole run")->capture_default_str();
  c->add_flag("--worker", a->worker, "Internal: run as one rank of the benchmark")->group("");
  add_bench_host_options(c, &a->hosts);
  c->add_option("--peer", a->peer,
                "ddp: then run PyTorch DDP (gloo) on the same hosts, same model and steps, and "
                "print the ratio")
      ->check(CLI::IsMember({"", "ddp"}));
  c->add_option("--peer-hook", a->peer_hooks,
                "DDP's own comm hook, or a list run one after another: none, fp16 (fp16_compress_hook), "
                "powersgd:RANK[:START] (powerSGD_hook, matrix_approximation_rank RANK, start_powerSGD_iter "
                "START, default max(2, --warmup)); a peer that crashes is reported failed with its error")
      ->capture_default_str();
  c->add_option("--peer-timeout-s", a->peer_timeout_s,
                "Bound on any one step or collective of the peer: a hang in DDP is run once more, and a "
                "second hang becomes a failed peer, after this long each")
      ->capture_default_str();
  c->add_option("--peer-bucket-mb", a->peer_bucket_mb,
                "DDP's bucket_cap_mb and first bucket size in MiB (0: DDP's defaults, 25 and 1); above the "
                "model's size DDP syncs in one bucket, where its PowerSGD hook does not crash")
      ->capture_default_str();
  c->add_option("--repeats", a->repeats,
                "Run our side and each peer this many times, alternating; the summary lines give medians")
      ->capture_default_str();
  c->add_option("--compression", a->o.compression,
                "Gradient compression of our side (as `hpctrain train --compression`; default HPCT_COMPRESSION)");
  c->add_option("--optimizer", a->o.optimizer, "sgd (lr 0.01, momentum 0.9) or adam (lr 1e-3)")
      ->capture_default_str();
  c->add_option("--shard", a->o.shard,
                "Sharded data parallel stage of our side, 0-3 (as `hpctrain train --shard`; docs/sharding.md)")
      ->capture_default_str();
  c->add_option("--shard-prefetch", a->o.shard_prefetch, "With --shard 3: gather the next layer ahead")
      ->capture_default_str();
  c->add_flag("--accuracy", a->accuracy,
              "Train --epochs epochs on Fashion-MNIST (both sides, with --peer) and report the test set's "
              "accuracy beside the speed; the steps follow from the epochs");
  c->add_option("--epochs", a->epochs, "With --accuracy: epochs to train")->capture_default_str();
  c->add_option("--max-samples", a->o.max_samples,
                "Train on the first N Fashion-MNIST images only (0: all 60,000)")
      ->capture_default_str();
  c->add_flag("--evaluate", a->o.evaluate, "Internal: report the test set's accuracy after the steps")->group("");
  c->add_option("--ddp-script", a->ddp_script, "bench/ddp_peer.py, as every host sees it")
      ->capture_default_str();
  c->add_option("--python", a->python, "Python with torch, on every host")->capture_default_str();
  c->add_option("--ddp-port", a->ddp_port,
                "DDP's store port on the first host (0: 29500 + pid % 1000)");
  c->add_option("--tmp-dir", a->tmp_dir,
                "Directory for each job's pace page, step logs and result; across hosts it must be "
                "shared by every host (default: the system temp directory)");
  c->add_option("--result-file", a->result_file, "Internal: where rank 0 writes its result")
      ->group("");
  c->add_option("--pace-file", a->o.pace_file, "Internal: the pacing page of this job")->group("");
  c->add_option("--step-log", a->o.step_log, "Internal: per-step timings, one file per rank")
      ->group("");
  c->callback([&cli, a, steps] {
    a->steps_given = steps->count() > 0;
    cli.run = [&cli, a] {
      return a->worker ? run_worker(*a, cli.config) : run_parent(*a, cli.config);
    };
  });
}

}  // namespace hpct::cli
