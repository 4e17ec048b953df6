// `hpctrain rank-check`: a small rank program for launch tests, the startup
// benchmark and users checking a cluster. It connects the world
// (comm/connect.h, whichever launcher started it), passes a barrier, checks
// an allreduce, prints what it learned about itself, and can fail on purpose.
// Hidden from --help.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "comm/connect.h"
#include "commands.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/world.h"

namespace hpct::cli {
namespace {

struct RankCheckArgs {
  bool no_comm = false;
  bool print_env = false;
  bool print_pid = false;
  bool timestamp = false;
  int fail_rank = -1;
  int fail_code = 1;
  int fail_signal = 0;
  int fail_restarts_below = 1 << 30;
  double sleep_s = 0;
};

int run_rank_check(const RankCheckArgs& a, const Config& config) {
  ProcessEnv env;
  WorldInfo info = discover_world(env);
  int rank = info.rank;
  std::string backend = "none";
  std::string reduce = "skipped";
  comm::World world;
  if (a.print_pid) std::printf("pid %d %d\n", rank, static_cast<int>(::getpid()));
  std::fflush(stdout);
  if (!a.no_comm) {
    world = comm::connect_world(config, env, Logger::from_config(config, rank));
    comm::barrier(*world.comm);
    if (a.timestamp) std::printf("past-barrier %d %lld\n", world.comm->rank(), unix_ns());
    std::fflush(stdout);
    rank = world.comm->rank();
    backend = world.comm->backend_name();
    double value = rank + 1;
    comm::AllreduceOptions o;
    o.output = &value;
    o.count = 1;
    o.dtype = comm::DataType::kFloat64;
    comm::allreduce(*world.comm, o);
    int n = world.comm->size();
    double want = n * (n + 1) / 2.0;
    reduce = value == want ? "ok" : "WRONG(" + std::to_string(value) + ")";
  }
  std::printf("rank-check rank=%d size=%d local=%d/%d cross=%d/%d host=%s restart=%d omp=%s backend=%s allreduce=%s\n",
              rank, info.size, info.local_rank, info.local_size, info.cross_rank, info.cross_size,
              env.get("HPCT_HOSTNAME").value_or("?").c_str(), info.restart,
              env.get("OMP_NUM_THREADS").value_or("unset").c_str(), backend.c_str(), reduce.c_str());
  if (a.print_env) {
    for (const auto& [k, v] : env.with_prefix("HPCT_")) std::printf("env %s=%s\n", k.c_str(), v.c_str());
    for (const char* k : {"OMP_NUM_THREADS", "PWD"}) {
      if (auto v = env.get(k)) std::printf("env %s=%s\n", k, v->c_str());
    }
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd)) std::printf("cwd %s\n", cwd);
  }
  std::fflush(stdout);
  if (rank == a.fail_rank && info.restart < a.fail_restarts_below) {
    std::fprintf(stderr, "rank-check: rank %d failing on purpose (restart %d)\n", rank, info.restart);
    std::fflush(stderr);
    if (a.fail_signal != 0) ::raise(a.fail_signal);
    // Exit at once, as a crashing rank would: a clean return would run
    // MPI_Finalize, which waits for the ranks still sleeping.
    std::fflush(stdout);
    std::_Exit(a.fail_code);
  }
  if (a.sleep_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(a.sleep_s));
  return reduce == "ok" || reduce == "skipped" ? 0 : 1;
}

}  // namespace

void add_rank_check_command(CLI::App& app, Cli& cli) {
  auto a = std::make_shared<RankCheckArgs>();
  auto* c = app.add_subcommand("rank-check", "Internal: a rank program for launch tests");
  c->group("");
  c->add_flag("--no-comm", a->no_comm, "Do not connect the world");
  c->add_flag("--print-env", a->print_env, "Print HPCT_* and OMP_NUM_THREADS");
  c->add_flag("--print-pid", a->print_pid, "Print 'pid RANK PID' first");
  c->add_flag("--timestamp", a->timestamp, "Print 'past-barrier RANK UNIX_NS' after the first barrier");
  c->add_option("--fail-rank", a->fail_rank, "This rank fails after the allreduce");
  c->add_option("--fail-code", a->fail_code, "Exit code of the failing rank");
  c->add_option("--fail-signal", a->fail_signal, "The failing rank raises this signal instead");
  c->add_option("--fail-restarts-below", a->fail_restarts_below,
                "Fail only while HPCT_RESTART is below this");
  c->add_option("--sleep-s", a->sleep_s, "Then sleep this long (ranks that do not fail)");
  c->callback([&cli, a] { cli.run = [&cli, a] { return run_rank_check(*a, cli.config); }; });
}

}  // namespace hpct::cli
