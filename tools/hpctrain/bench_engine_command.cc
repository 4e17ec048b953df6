// `hpctrain bench engine`: a real model's gradient list through the engine
// next to one raw allreduce of the same bytes, as JSON lines.
//
// Starts its own ranks with `mpirun -np N <this binary> bench engine
// --worker ...` (Gloo ranks meet through a file store in a temp directory);
// rank 0 prints one JSON line per (model, layout).
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bench/engine_bench.h"
#include "bench/raw_allreduce.h"
#include "comm/connect.h"
#include "commands.h"
#include "core/error.h"
#include "core/subprocess.h"

namespace hpct::cli {
namespace {

struct EngineArgs {
  std::string backend = "mpi";
  int np = 2;
  std::string models = "mlp,resnet20";
  std::string layouts = "flat,separate";
  std::string ops = "sum,avg";
  int iters = 10;
  int blocks = 3;
  double timeout_s = 1800;
  bool worker = false;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string part; std::getline(ss, part, ',');) {
    if (!part.empty()) out.push_back(part);
  }
  return out;
}

int run_parent(const EngineArgs& a, const Config& config) {
  if (a.np < 1) throw_invalid_argument("--np must be at least 1");
  comm::parse_backend(a.backend);
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "hpctrain-bench-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw_io("mkdtemp " + tmpl, errno);
  std::vector<std::string> argv = local_mpirun_prefix(a.np);
  argv.insert(argv.end(),
              {"-x", "HPCT_BACKEND", "-x", "HPCT_STORE_DIR", "-x", "OMP_NUM_THREADS", "-x",
               "OPENBLAS_NUM_THREADS", self_executable(), "bench", "engine", "--worker", "--models",
               a.models, "--layouts", a.layouts, "--ops", a.ops, "--iters", std::to_string(a.iters), "--blocks",
               std::to_string(a.blocks)});
  for (const auto& e : config.describe()) {
    if (e.source != ConfigSource::kDefault) {
      argv.insert(argv.begin() + 4, {"-x", e.env_name + "=" + e.value});
    }
  }
  std::map<std::string, std::string> env = {{"HPCT_BACKEND", a.backend},
                                            {"HPCT_STORE_DIR", tmpl},
                                            {"OMP_NUM_THREADS", "1"},
                                            {"OPENBLAS_NUM_THREADS", "1"}};
  std::fflush(stdout);
  auto r = run_subprocess(argv, env, seconds_to_millis(a.timeout_s));
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  if (r.timed_out) throw_timeout("bench engine did not finish: " + join_command(argv));
  if (r.signal != 0 || r.exit_code != 0) {
    std::fprintf(stderr, "hpctrain: bench engine failed: %s\n", join_command(argv).c_str());
    return r.exit_code ? r.exit_code : 1;
  }
  return 0;
}

int run_worker(const EngineArgs& a, const Config& config) {
  Logger log = Logger::from_config(config, -1);
  comm::World world = comm::connect_world(config, ProcessEnv(), log);
  bench::EngineBenchOptions o;
  o.models = split(a.models);
  o.layouts = split(a.layouts);
  o.ops = split(a.ops);
  o.iters = a.iters;
  o.blocks = a.blocks;
  auto raw = bench::make_raw_allreduce(*world.comm);
  bench::run_engine_bench(*world.comm, config, log.with_rank(world.comm->rank()), o, raw.get(),
                          [](const nlohmann::json& j) { std::cout << j.dump() << std::endl; });
  return 0;
}

}  // namespace

void add_bench_engine_command(CLI::App& bench, Cli& cli) {
  auto a = std::make_shared<EngineArgs>();
  auto* c = bench.add_subcommand(
      "engine", "A model's gradient list through the engine vs one raw allreduce of the same bytes");
  c->add_option("--backend", a->backend, "mpi or gloo")->capture_default_str();
  c->add_option("--np", a->np, "Ranks to start on this host")->capture_default_str();
  c->add_option("--models", a->models, "Comma-separated: mlp, cnn, resnet20")->capture_default_str();
  c->add_option("--layouts", a->layouts, "flat (DistributedOptimizer's), separate (packed)")
      ->capture_default_str();
  c->add_option("--ops", a->ops, "Engine ops: sum (the raw call's), avg (DistributedOptimizer's)")
      ->capture_default_str();
  c->add_option("--iters", a->iters, "Timed iterations per block")->capture_default_str();
  c->add_option("--blocks", a->blocks, "Engine/raw alternations")->capture_default_str();
  c->add_option("--timeout-s", a->timeout_s, "Bound on the whole run")->capture_default_str();
  c->add_flag("--worker", a->worker, "Internal: run as one rank of the benchmark")->group("");
  c->callback([&cli, a] {
    cli.run = [&cli, a] { return a->worker ? run_worker(*a, cli.config) : run_parent(*a, cli.config); };
  });
}

}  // namespace hpct::cli
