// `hpctrain bench comm`: collective timings per backend, ours next to the
// library's own call, as JSON lines.
//
// The command starts its own ranks: for each backend it runs
// `mpirun -np N <this binary> bench comm --worker ...` (mpirun only starts the
// processes; Gloo ranks meet through a fresh file store in a temp directory).
// With host options (-H, --hostfile, --spawner; bench_hosts.h) it starts them
// through `hpctrain launch` on those hosts instead, and inside a job started
// by hpctrain launch, mpirun or srun it is one rank of that job.
// Rank 0 of each run prints one JSON line per (op, size), and one per peer
// with the TCP round trip to it (bench/tcp_rtt.h); allreduce lines carry the
// largest of those round trips and their time over it.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "bench/comm_bench.h"
#include "bench/raw_allreduce.h"
#include "bench/tcp_rtt.h"
#include "bench_hosts.h"
#include "comm/connect.h"
#include "commands.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "core/units.h"

namespace hpct::cli {
namespace {

struct CommArgs {
  std::string backend = "all";
  int np = 0;
  std::string sizes = "4K..256M";
  std::string ops = "allreduce";
  int iters = 0;
  double budget_s = 0.4;
  double timeout_s = 1800;
  bool worker = false;
  int rtt_pings = 200;
  bool check = false;
  double check_ratio = 1.0;
  std::string input = "fresh";
  BenchHosts hosts;
};

// The worker's arguments that both the local and the across-hosts runs pass.
std::vector<std::string> worker_args(const CommArgs& a) {
  std::vector<std::string> v = {"bench", "comm", "--worker", "--sizes", a.sizes, "--ops", a.ops,
                                "--iters", std::to_string(a.iters), "--budget-s",
                                std::to_string(a.budget_s), "--input", a.input};
  if (a.check) v.insert(v.end(), {"--check", "--check-ratio", std::to_string(a.check_ratio)});
  return v;
}

// Across hosts: one `hpctrain launch` per backend, on the user's hosts.
// Runs one backend's benchmark job and waits for it (bounded by timeout_s:
// Timeout naming the command). Returns 0, or the job's exit code (1 for a
// signal) after one line on stderr naming the backend and the command.
int run_backend_job(const std::string& backend, const std::vector<std::string>& argv,
                    const std::map<std::string, std::string>& env, double timeout_s) {
  std::fflush(stdout);
  auto r = run_subprocess(argv, env, seconds_to_millis(timeout_s));
  if (r.timed_out) {
    throw_timeout("bench comm with backend " + backend + " did not finish within " +
                  std::to_string(timeout_s) + " s: " + join_command(argv));
  }
  if (r.signal == 0 && r.exit_code == 0) return 0;
  std::fprintf(stderr, "hpctrain: bench comm with backend %s failed (%s %d): %s\n", backend.c_str(),
               r.signal ? "signal" : "exit code", r.signal ? r.signal : r.exit_code,
               join_command(argv).c_str());
  return r.exit_code ? r.exit_code : 1;
}

int run_comm_across_hosts(const CommArgs& a, const std::vector<std::string>& backends) {
  int worst = 0;
  for (const auto& b : backends) {
    std::vector<std::string> argv = a.hosts.launch_prefix(
        a.np, b, {{"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}});
    argv.push_back(self_executable());
    for (const auto& w : worker_args(a)) argv.push_back(w);
    argv.insert(argv.end(), {"--rtt-pings", std::to_string(a.rtt_pings)});
    const int code = run_backend_job(b, argv, {}, a.timeout_s);
    worst = worst ? worst : code;
  }
  return worst;
}

int run_comm_parent(const CommArgs& a) {
  std::vector<std::string> backends;
  if (a.backend == "all") {
    backends = {"mpi", "gloo"};
  } else {
    comm::parse_backend(a.backend);
    backends = {a.backend};
  }
  parse_byte_sizes(a.sizes);   // refuse bad input before starting anything
  if (!(a.check_ratio > 0)) {
    throw_invalid_argument("--check-ratio must be a positive bound on our time over the raw "
                           "call's, got " + std::to_string(a.check_ratio));
  }
  bench::parse_ops(a.ops);
  if (a.np < 0) throw_invalid_argument("--np must be at least 1 (0: every slot of the hosts)");
  if (a.hosts.any()) {
    // Across hosts MPI needs an MPI launcher; Gloo runs under any.
    const bool mpi_launcher = a.hosts.spawner == "mpirun" || a.hosts.spawner == "srun";
    if (a.backend == "all") backends = mpi_launcher ? backends : std::vector<std::string>{"gloo"};
    if (!mpi_launcher && a.backend == "mpi") {
      throw_invalid_argument("bench comm --backend mpi across hosts needs --spawner mpirun or srun");
    }
    return run_comm_across_hosts(a, backends);
  }
  const int np = a.np == 0 ? 2 : a.np;
  int worst = 0;
  for (const auto& b : backends) {
    namespace fs = std::filesystem;
    std::string tmpl = (fs::temp_directory_path() / "hpctrain-bench-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw_io("mkdtemp " + tmpl, errno);
    std::vector<std::string> argv = local_mpirun_prefix(np);
    argv.insert(argv.end(), {"-x", "HPCT_BACKEND", "-x", "HPCT_STORE_DIR", "-x", "HPCT_JOB_ID",
                             "-x", "OMP_NUM_THREADS", self_executable()});
    for (const auto& w : worker_args(a)) argv.push_back(w);
    std::map<std::string, std::string> env = {{"HPCT_BACKEND", b},
                                              {"HPCT_STORE_DIR", tmpl},
                                              {"HPCT_JOB_ID", "bench-" + std::to_string(::getpid())},
                                              {"OMP_NUM_THREADS", "1"}};
    int code;
    try {
      code = run_backend_job(b, argv, env, a.timeout_s);
    } catch (...) {
      std::error_code ec;
      fs::remove_all(tmpl, ec);
      throw;
    }
    std::error_code ec;
    fs::remove_all(tmpl, ec);
    worst = worst ? worst : code;
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
  o.check_max_ratio = a.check_ratio;
  o.fresh_input = a.input == "fresh";
  auto raw = bench::make_raw_allreduce(*world.comm);
  // The round trip first, on idle links: what a small allreduce is held to.
  comm::barrier(*world.comm);
  double rtt_us = 0;
  // Only across hosts: on one host the ranks share memory, not a link.
  const bool across_hosts = world.info.cross_size > 1 || world.info.local_size < world.comm->size();
  if (world.comm->size() > 1 && a.rtt_pings > 0 && across_hosts) {
    for (const auto& t : bench::measure_tcp_round_trips(*world.comm, a.rtt_pings,
                                                        seconds_to_millis(120))) {
      rtt_us = std::max(rtt_us, t.median_us);
      std::cout << nlohmann::json{{"bench", "comm"},
                                  {"op", "tcp_round_trip"},
                                  {"backend", world.comm->backend_name()},
                                  {"peer_rank", t.peer_rank},
                                  {"peer_address", t.address},
                                  {"pings", a.rtt_pings},
                                  {"rtt_us", t.median_us},
                                  {"rtt_min_us", t.min_us}}
                       .dump()
                << std::endl;
    }
  }
  const auto failed = bench::run_comm_bench(*world.comm, o, raw.get(), [rtt_us](nlohmann::json j) {
    if (rtt_us > 0 && j.value("op", "") == "allreduce") {
      j["tcp_rtt_us"] = rtt_us;
      j["time_over_rtt"] = j["time_us"].get<double>() / rtt_us;
    }
    std::cout << j.dump() << std::endl;
  });
  if (!a.check || failed.empty()) return 0;
  for (const auto& f : failed) {
    std::fprintf(stderr,
                 "hpctrain: bench comm --check failed: %s; on a quiet machine the shared-memory "
                 "path has regressed (docs/comm.md), on a loaded one rerun it\n",
                 f.c_str());
  }
  return 1;
}

}  // namespace

void add_bench_comm_command(CLI::App& bench, Cli& cli) {
  auto a = std::make_shared<CommArgs>();
  auto* c = bench.add_subcommand("comm", "Collective timings per backend, next to the raw library call");
  c->add_option("--backend", a->backend, "mpi, gloo or all")->capture_default_str();
  c->add_option("--np", a->np, "Ranks to start (0: 2 on this host, or every slot of the hosts)")
      ->capture_default_str();
  c->add_option("--rtt-pings", a->rtt_pings, "TCP round trips timed to each peer across hosts (0: none)")
      ->capture_default_str();
  add_bench_host_options(c, &a->hosts);
  c->add_option("--sizes", a->sizes, "Bytes per rank: 4K..256M (x4 steps) or a list 1M,4M")
      ->capture_default_str();
  c->add_option("--ops", a->ops, "allreduce,broadcast,allgather,reduce_scatter,barrier or all")
      ->capture_default_str();
  c->add_option("--iters", a->iters, "Timed iterations per size (0: fill --budget-s)")
      ->capture_default_str();
  c->add_option("--budget-s", a->budget_s, "Seconds of timing per size when --iters is 0")
      ->capture_default_str();
  c->add_flag("--check", a->check,
              "Exit 1 when the shared-memory allreduce takes more than --check-ratio times the "
              "raw call's time at 1 MiB or more (lines carry \"check\")");
  c->add_option("--check-ratio", a->check_ratio, "The bound --check holds the paired ratio to")
      ->capture_default_str();
  c->add_option("--input", a->input,
                 "fresh: each timed call starts from an input the rank has just written, as a "
                 "training step's gradients (not timed), and our allreduce's sums are checked; "
                 "reused: each call takes the bytes the previous call left")
      ->check(CLI::IsMember({"fresh", "reused"}))
      ->capture_default_str();
  c->add_option("--timeout-s", a->timeout_s, "Bound on each backend's whole run")->capture_default_str();
  c->add_flag("--worker", a->worker, "Internal: run as one rank of the benchmark")->group("");
  c->callback([&cli, a] {
    cli.run = [&cli, a] {
      return a->worker || running_inside_a_job() ? run_comm_worker(*a, cli.config)
                                                 : run_comm_parent(*a);
    };
  });
}

}  // namespace hpct::cli
