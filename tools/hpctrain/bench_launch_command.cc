// `hpctrain bench launch`: how long a launcher takes from its start to every
// rank past its first barrier, for `hpctrain launch -np N` and `mpirun -np N`
// running the same program (`hpctrain rank-check --timestamp`: Gloo through
// the job store under hpctrain, MPI under mpirun). Runs alternate so machine
// noise hits both; JSON lines, one per run and a summary with the medians
// and the ratio to mpirun.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "core/stats.h"
#include "launch/child_process.h"

namespace hpct::cli {
namespace {

struct BenchLaunchArgs {
  int np = 2;
  int reps = 5;
  double timeout_s = 60;
};

// Runs argv to its end (bounded) and returns its stdout. Io/Timeout on failure.
std::string run_capture(const std::vector<std::string>& argv, double timeout_s, int* exit_status) {
  launch::ChildOptions o;
  o.argv = argv;
  o.pipe_stdin = false;
  launch::Child c = launch::start_child(o);
  std::string out;
  bool out_open = true, err_open = true;
  Deadline deadline(seconds_to_millis(timeout_s));
  int status = 0;
  bool ended = false;
  while ((out_open || err_open || !ended) && !deadline.expired()) {
    pollfd fds[2] = {{c.stdout_fd.get(), POLLIN, 0}, {c.stderr_fd.get(), POLLIN, 0}};
    ::poll(fds, 2, 20);
    char buf[8192];
    if (out_open) {
      ssize_t n = ::read(c.stdout_fd.get(), buf, sizeof buf);
      if (n == 0) out_open = false;
      if (n > 0) out.append(buf, static_cast<size_t>(n));
    }
    if (err_open) {
      ssize_t n = ::read(c.stderr_fd.get(), buf, sizeof buf);
      if (n == 0) err_open = false;
    }
    if (!ended) ended = launch::reap(c.pid, &status);
  }
  if (!ended) {
    ::kill(-c.pid, SIGKILL);
    while (!launch::reap(c.pid, &status)) ::usleep(1000);
    throw_timeout("bench launch: " + join_command(argv) + " did not finish within " +
                  std::to_string(timeout_s) + " s");
  }
  *exit_status = status;
  return out;
}

// Seconds from t0 to the last rank's "past-barrier RANK NS" line.
double time_to_barrier(const std::string& out, long long t0, int np, const std::string& what) {
  std::istringstream in(out);
  std::string line;
  long long last = 0;
  int seen = 0;
  while (std::getline(in, line)) {
    auto at = line.find("past-barrier ");
    if (at == std::string::npos) continue;
    std::istringstream words(line.substr(at + 13));
    int rank;
    long long ns;
    if (words >> rank >> ns) {
      last = std::max(last, ns);
      ++seen;
    }
  }
  if (seen != np) {
    throw Error(ErrorCode::kMismatch, "bench launch: " + what + " printed " + std::to_string(seen) +
                                          " barrier times, expected " + std::to_string(np) + ": " + out.substr(0, 400));
  }
  return (last - t0) / 1e9;
}

int run_bench_launch(const BenchLaunchArgs& a) {
  if (a.np < 1 || a.reps < 1) throw_invalid_argument("bench launch: --np and --reps must be at least 1");
  const std::string self = self_executable();
  const std::string np = std::to_string(a.np);
  const std::vector<std::string> program = {self, "rank-check", "--timestamp"};
  std::vector<std::string> ours = {self, "launch", "--np", np, "--"};
  std::vector<std::string> mpirun = {"mpirun", "-np", np, "--oversubscribe", "--mca", "btl", "self,vader",
                                     "--mca", "mpi_yield_when_idle", "1", "--bind-to", "none"};
  if (::geteuid() == 0) mpirun.push_back("--allow-run-as-root");
  for (auto* v : {&ours, &mpirun}) v->insert(v->end(), program.begin(), program.end());
  const char* names[2] = {"hpctrain launch", "mpirun"};

  std::vector<double> times[2];
  for (int rep = -1; rep < a.reps; ++rep) {  // rep -1 warms the page cache for both
    double t[2];
    for (int which = 0; which < 2; ++which) {
      const auto& argv = which == 0 ? ours : mpirun;
      int status = 0;
      long long t0 = unix_ns();
      std::string out = run_capture(argv, a.timeout_s, &status);
      if (status != 0) {
        throw_peer_failure("bench launch: " + join_command(argv) + " failed (status " +
                           std::to_string(status) + "): " + out.substr(0, 400));
      }
      t[which] = time_to_barrier(out, t0, a.np, names[which]);
    }
    if (rep < 0) continue;
    for (int w = 0; w < 2; ++w) times[w].push_back(t[w]);
    nlohmann::json j = {{"bench", "launch"}, {"np", a.np},        {"rep", rep},
                        {"hpctrain_launch_s", t[0]}, {"mpirun_s", t[1]}, {"ratio", t[0] / t[1]}};
    std::cout << j.dump() << std::endl;
  }
  double mh = median(times[0]), mm = median(times[1]);
  nlohmann::json s = {{"bench", "launch"}, {"np", a.np}, {"reps", a.reps}, {"summary", true},
                      {"median_hpctrain_launch_s", mh}, {"median_mpirun_s", mm}, {"ratio", mh / mm},
                      {"what", "start to every rank past its first barrier, same program "
                               "(hpctrain rank-check): hpctrain launch (Gloo via the job store) "
                               "vs mpirun (MPI)"}};
  std::cout << s.dump() << std::endl;
  return 0;
}

}  // namespace

void add_bench_launch_command(CLI::App& bench, Cli& cli) {
  (void)cli;
  auto a = std::make_shared<BenchLaunchArgs>();
  auto* c = bench.add_subcommand("launch", "Start-up time of hpctrain launch next to mpirun, same program");
  c->add_option("--np", a->np, "Ranks on this host")->capture_default_str();
  c->add_option("--reps", a->reps, "Timed runs of each (after one warm-up run)")->capture_default_str();
  c->add_option("--timeout-s", a->timeout_s, "Bound on each run")->capture_default_str();
  c->callback([&cli, a] { cli.run = [a] { return run_bench_launch(*a); }; });
}

}  // namespace hpct::cli
