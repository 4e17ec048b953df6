// `hpctrain bench train`: data-parallel training speed of a built-in model,
// one JSON line per run.
//
// Starts N local ranks itself with `mpirun -np N <this binary> bench train
// --worker ...` (MPI backend by default: shared memory between local ranks;
// --backend gloo meets through a file store in a temp directory), with
// OMP_NUM_THREADS and OPENBLAS_NUM_THREADS set to --threads. Rank 0 prints
// the result (bench/train_bench.h lists its fields).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "bench/train_bench.h"
#include "comm/connect.h"
#include "commands.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "engine/engine.h"
#include "train/models.h"

namespace hpct::cli {
namespace {

struct TrainArgs {
  bench::TrainBenchOptions o;
  std::string backend = "mpi";
  int np = 2;
  double timeout_s = 3600;
  bool no_overlap = false;
  bool worker = false;
};

std::vector<std::string> mpirun_prefix(int np) {
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(np), "--oversubscribe",
                                   "--mca", "btl", "self,vader", "--mca", "mpi_yield_when_idle", "1",
                                   "--bind-to", "none"};
  if (::geteuid() == 0) argv.push_back("--allow-run-as-root");
  return argv;
}

int run_parent(const TrainArgs& a, const Config& config) {
  if (a.np < 1) throw_invalid_argument("--np must be at least 1");
  if (a.o.steps < 1 || a.o.batch < 1 || a.o.threads < 1) {
    throw_invalid_argument("--steps, --batch and --threads must be at least 1");
  }
  train::make_model(a.o.model);  // refuse an unknown model before starting ranks
  comm::parse_backend(a.backend);
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "hpctrain-bench-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw_io("mkdtemp " + tmpl, errno);
  std::vector<std::string> argv = mpirun_prefix(a.np);
  std::map<std::string, std::string> env = {{"HPCT_BACKEND", a.backend},
                                            {"HPCT_STORE_DIR", tmpl},
                                            {"OMP_NUM_THREADS", std::to_string(a.o.threads)},
                                            {"OPENBLAS_NUM_THREADS", std::to_string(a.o.threads)}};
  for (const auto& [k, v] : env) argv.insert(argv.end(), {"-x", k});
  // Settings given in the environment or with --set reach every rank.
  for (const auto& e : config.describe()) {
    if (e.source != ConfigSource::kDefault) argv.insert(argv.end(), {"-x", e.env_name + "=" + e.value});
  }
  argv.insert(argv.end(), {self_executable(), "bench", "train", "--worker", "--model", a.o.model,
                           "--steps", std::to_string(a.o.steps), "--batch", std::to_string(a.o.batch),
                           "--threads", std::to_string(a.o.threads), "--warmup",
                           std::to_string(a.o.warmup)});
  if (a.o.synthetic) argv.push_back("--synthetic");
  if (a.no_overlap) argv.push_back("--no-overlap");
  if (!a.o.data_dir.empty()) argv.insert(argv.end(), {"--data-dir", a.o.data_dir});
  std::fflush(stdout);
  auto r = run_subprocess(argv, env, seconds_to_millis(a.timeout_s));
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  if (r.timed_out) throw_timeout("bench train did not finish: " + join_command(argv));
  if (r.signal != 0 || r.exit_code != 0) {
    std::fprintf(stderr, "hpctrain: bench train failed: %s\n", join_command(argv).c_str());
    return r.exit_code ? r.exit_code : 1;
  }
  return 0;
}

int run_worker(TrainArgs a, const Config& config) {
  auto ctx = init(config);
  a.o.overlap = !a.no_overlap;
  auto j = bench::run_train_bench(*ctx, a.o);
  j["backend"] = config.backend;  // HPCT_BACKEND, set by the parent for every rank
  if (ctx->rank() == 0) std::cout << j.dump() << std::endl;
  return 0;
}

}  // namespace

void add_bench_train_command(CLI::App& bench, Cli& cli) {
  auto a = std::make_shared<TrainArgs>();
  auto* c = bench.add_subcommand("train", "Data-parallel training speed of a built-in model (JSON)");
  c->add_option("--model", a->o.model, "mlp, cnn or resnet20")->capture_default_str();
  c->add_option("--np", a->np, "Ranks to start on this host")->capture_default_str();
  c->add_option("--steps", a->o.steps, "Timed steps")->capture_default_str();
  c->add_option("--batch", a->o.batch, "Batch per rank")->capture_default_str();
  c->add_option("--threads", a->o.threads, "Intra-op threads per rank")->capture_default_str();
  c->add_option("--warmup", a->o.warmup, "Untimed steps first")->capture_default_str();
  c->add_flag("--synthetic", a->o.synthetic, "Random images instead of Fashion-MNIST");
  c->add_option("--data-dir", a->o.data_dir, "Directory of the Fashion-MNIST idx files");
  c->add_option("--backend", a->backend, "mpi or gloo")->capture_default_str();
  c->add_flag("--no-overlap", a->no_overlap, "Allreduce all gradients in step(), not during backward");
  c->add_option("--timeout-s", a->timeout_s, "Bound on the whole run")->capture_default_str();
  c->add_flag("--worker", a->worker, "Internal: run as one rank of the benchmark")->group("");
  c->callback([&cli, a] {
    cli.run = [&cli, a] { return a->worker ? run_worker(*a, cli.config) : run_parent(*a, cli.config); };
  });
}

}  // namespace hpct::cli
