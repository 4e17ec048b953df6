// `hpctrain bench comm`: collective timings per backend, ours next to the
// library's own call, as JSON lines.
//
// The command starts its own ranks: for each backend it runs
// `mpirun -np N <this binary> bench comm --worker ...` (mpirun only starts the
// processes; Gloo ranks meet through a fresh file store in a temp directory).
// Rank 0 of each run prints one JSON line per (op, size).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <nlohmann/json.hpp>

#include "bench/comm_bench.h"
#include "bench/raw_allreduce.h"
#include "comm/connect.h"
#include "commands.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "core/units.h"

namespace hpct::cli {
namespace {

struct CommArgs {
  std::string backend = "all";
  int np = 2;
  std::string sizes = "4K..256M";
  std::string ops = "allreduce";
  int iters = 0;
  double budget_s = 0.4;
  double timeout_s = 1800;
  bool worker = false;
};

int run_comm_parent(const CommArgs& a) {
  std::vector<std::string> backends;
  if (a.backend == "all") {
    backends = {"mpi", "gloo"};
  } else {
    comm::parse_backend(a.backend);
    backends = {a.backend};
  }
  parse_byte_sizes(a.sizes);   // refuse bad input before starting anything
  bench::parse_ops(a.ops);
  if (a.np < 1) throw_invalid_argument("--np must be at least 1");
  int worst = 0;
  for (const auto& b : backends) {
    namespace fs = std::filesystem;
    std::string tmpl = (fs::temp_directory_path() / "hpctrain-bench-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw_io("mkdtemp " + tmpl, errno);
    std::vector<std::string> argv = local_mpirun_prefix(a.np);
    argv.insert(argv.end(), {"-x", "HPCT_BACKEND", "-x", "HPCT_STORE_DIR", "-x", "HPCT_JOB_ID",
                             "-x", "OMP_NUM_THREADS", self_executable(), "bench", "comm", "--worker",
                             "--sizes", a.sizes, "--ops", a.ops, "--iters", std::to_string(a.iters),
                             "--budget-s", std::to_string(a.budget_s)});
    std::map<std::string, std::string> env = {{"HPCT_BACKEND", b},
                                              {"HPCT_STORE_DIR", tmpl},
                                              {"HPCT_JOB_ID", "bench-" + std::to_string(::getpid())},
                                              {"OMP_NUM_THREADS", "1"}};
    std::fflush(stdout);
    auto r = run_subprocess(argv, env, seconds_to_millis(a.timeout_s));
    std::error_code ec;
    fs::remove_all(tmpl, ec);
    if (r.timed_out) {
      throw_timeout("bench comm with backend " + b + " did not finish within " +
                    std::to_string(a.timeout_s) + " s: " + join_command(argv));
    }
    if (r.signal != 0 || r.exit_code != 0) {
      std::fprintf(stderr, "hpctrain: bench comm with backend %s failed (%s %d): %s\n", b.c_str(),
                   r.signal ? "signal" : "exit code", r.signal ? r.signal : r.exit_code,
                   join_command(argv).c_str());
      worst = worst ? worst : (r.exit_code ? r.exit_code : 1);
    }
  }
  return worst;
}

int run_comm_worker(const CommArgs& a, const Config& config) {
  Logger log = Logger::from_config(config, -1);
  comm::World world = comm::connect_world(config, ProcessEnv(), log);
  bench::CommBenchOptions o;
  o.sizes = parse_byte_sizes(a.sizes);
  o.ops = bench::parse_ops(a.ops);
  o.iters = a.iters;
  o.budget_s = a.budget_s;
  auto raw = bench::make_raw_allreduce(*world.comm);
  bench::run_comm_bench(*world.comm, o, raw.get(), [](const nlohmann::json& j) {
    std::cout << j.dump() << std::endl;
  });
  return 0;
}

}  // namespace

void add_bench_comm_command(CLI::App& bench, Cli& cli) {
  auto a = std::make_shared<CommArgs>();
  auto* c = bench.add_subcommand("comm", "Collective timings per backend, next to the raw library call");
  c->add_option("--backend", a->backend, "mpi, gloo or all")->capture_default_str();
  c->add_option("--np", a->np, "Ranks to start on this host")->capture_default_str();
  c->add_option("--sizes", a->sizes, "Bytes per rank: 4K..256M (x4 steps) or a list 1M,4M")
      ->capture_default_str();
  c->add_option("--ops", a->ops, "allreduce,broadcast,allgather,reduce_scatter,barrier or all")
      ->capture_default_str();
  c->add_option("--iters", a->iters, "Timed iterations per size (0: fill --budget-s)")
      ->capture_default_str();
  c->add_option("--budget-s", a->budget_s, "Seconds of timing per size when --iters is 0")
      ->capture_default_str();
  c->add_option("--timeout-s", a->timeout_s, "Bound on each backend's whole run")->capture_default_str();
  c->add_flag("--worker", a->worker, "Internal: run as one rank of the benchmark")->group("");
  c->callback([&cli, a] {
    cli.run = [&cli, a] { return a->worker ? run_comm_worker(*a, cli.config) : run_comm_parent(*a); };
  });
}

}  // namespace hpct::cli
