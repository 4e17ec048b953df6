// `hpctrain plan calibrate`: measures what plan's cost model needs (a
// 1-rank profile of the model, run by hpctrain-torch plan-profile, and
// `hpctrain bench comm` on this host and across the given hosts) and saves
// it as a calibration file; --train FILE takes the step's parts from a
// 1-rank `bench train` run instead (the trainer's own loop), --all-cores
// FILE the busy-cores factor. plan_command.cc has the prediction.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench_hosts.h"
#include "commands.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "plan/calibration.h"

namespace hpct::cli {
namespace {

using nlohmann::json;

struct CalibrateArgs {
  std::string model = "mlp";
  int batch = 64;
  int threads = 1;
  int profile_steps = 10;
  std::vector<std::string> comm_files;  // saved bench comm JSON lines
  std::string profile_from;             // an earlier calibration file: take its profile
  std::string train_from;               // bench train output: its 1-rank line sets the step's parts
  std::string all_cores_from;           // bench train --np 1,N on one host: the busy-cores factor
  bool no_comm = false;                 // profile only
  int local_np = 2;                     // ranks of the shared-memory run (0: none)
  std::string sizes = "4K,64K,1M,4M,16M";
  double budget_s = 0.2;
  int comm_runs = 3;  // each bench comm this many times; the fit takes each size's median
  BenchHosts hosts;
  int cores = 0;         // 0: this machine's
  int shared_cores = 0;  // hosts that share this many cores (namespace hosts)
  std::string save;
  double timeout_s = 600;
};

std::vector<json> read_json_lines(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw_io("read " + path, errno ? errno : ENOENT);
  std::vector<json> out;
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty() || line[0] != '{') continue;
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception&) {
      // Not one of ours (a launcher's line): skip.
    }
  }
  return out;
}

// Runs argv with its stdout into `out_path`; Io naming the command when it fails.
void run_to_file(const std::vector<std::string>& argv,
                 const std::map<std::string, std::string>& env, const std::string& out_path,
                 double timeout_s) {
  std::vector<std::string> sh = {"/bin/sh", "-c", "out=$1; shift; exec \"$@\" > \"$out\"", "sh",
                                 out_path};
  sh.insert(sh.end(), argv.begin(), argv.end());
  std::fflush(stdout);
  const SubprocessResult r = run_subprocess(sh, env, seconds_to_millis(timeout_s));
  if (r.timed_out || r.signal != 0 || r.exit_code != 0) {
    throw_io("calibration step `" + join_command(argv) + "` " +
                 (r.timed_out ? "did not end within " +
                                    std::to_string(static_cast<int>(timeout_s)) + " s (--timeout-s)"
                              : "failed (exit " + std::to_string(r.exit_code) + ", signal " +
                                    std::to_string(r.signal) + ")"),
             EIO);
  }
}

std::string temp_dir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "hpctrain-plan-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw_io("mkdtemp " + tmpl, errno);
  return tmpl;
}

// 2. The links: saved bench comm output, and/or bench comm run now (its
// output files in dir).
std::vector<json> comm_lines(const CalibrateArgs& a, const std::string& dir,
                             const std::filesystem::path& self_dir) {
  std::vector<json> lines;
  for (const auto& f : a.comm_files) {
    auto more = read_json_lines(f);
    lines.insert(lines.end(), more.begin(), more.end());
  }
  if (!a.no_comm && a.comm_files.empty()) {
    const std::string hpctrain = (self_dir / "hpctrain").string();
    const std::vector<std::string> common = {
        "--sizes", a.sizes, "--budget-s", std::to_string(a.budget_s), "--rtt-pings", "0"};
    auto run_comm = [&](std::vector<std::string> argv,
                        const std::map<std::string, std::string>& env, const std::string& what) {
      argv.insert(argv.end(), common.begin(), common.end());
      for (int run = 1; run <= a.comm_runs; ++run) {
        std::fprintf(stderr, "plan calibrate: bench comm, %s (run %d of %d)\n", what.c_str(), run,
                     a.comm_runs);
        const std::string out = dir + "/comm." + std::to_string(lines.size()) + ".jsonl";
        run_to_file(argv, env, out, a.timeout_s);
        auto more = read_json_lines(out);
        lines.insert(lines.end(), more.begin(), more.end());
      }
    };
    if (a.hosts.any()) {
      // Across hosts, one rank each on the first two: direct and Gloo's ring.
      std::vector<std::string> argv = {hpctrain, "bench", "comm", "--np", "2"};
      BenchHosts h = a.hosts;
      if (!h.hosts.empty()) argv.insert(argv.end(), {"-H", h.hosts});
      if (!h.hostfile.empty()) argv.insert(argv.end(), {"--hostfile", h.hostfile});
      if (!h.spawner.empty()) argv.insert(argv.end(), {"--spawner", h.spawner});
      if (!h.identity.empty()) argv.insert(argv.end(), {"-i", h.identity});
      for (const auto& o : h.ssh_options) argv.insert(argv.end(), {"--ssh-option", o});
      if (!h.network_interface.empty())
        argv.insert(argv.end(), {"--network-interface", h.network_interface});
      run_comm(argv, {}, "2 ranks across hosts");
      if (a.local_np >= 2 && !h.hosts.empty()) {
        // Shared memory inside one of those hosts.
        const std::string first = h.hosts.substr(0, h.hosts.find_first_of(":,"));
        std::vector<std::string> local = {hpctrain,
                                          "bench",
                                          "comm",
                                          "--np",
                                          std::to_string(a.local_np),
                                          "-H",
                                          first + ":" + std::to_string(a.local_np)};
        if (!h.identity.empty()) local.insert(local.end(), {"-i", h.identity});
        for (const auto& o : h.ssh_options) local.insert(local.end(), {"--ssh-option", o});
        run_comm(local, {}, std::to_string(a.local_np) + " ranks on " + first);
      }
    } else {
      // This host only: its own TCP between 2 ranks (direct, Gloo's ring)
      // stands in for the link, and shared memory for the host.
      run_comm({hpctrain, "bench", "comm", "--backend", "gloo", "--np", "2"}, {{"HPCT_SHM", "0"}},
               "2 ranks over this host's TCP (loopback)");
      if (a.local_np >= 2) {
        run_comm(
            {hpctrain, "bench", "comm", "--backend", "gloo", "--np", std::to_string(a.local_np)},
            {}, std::to_string(a.local_np) + " ranks in shared memory");
      }
    }
  }
  return lines;
}

int run_calibrate(const CalibrateArgs& a) {
  if (a.save.empty())
    throw_invalid_argument("plan calibrate: --save FILE is required (where the calibration goes)");
  const std::string dir = temp_dir();
  const auto self_dir = std::filesystem::path(self_executable()).parent_path();
  plan::Calibration cal;
  cal.host.cores = a.cores > 0 ? a.cores : static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
  cal.host.threads_per_rank = a.threads;
  cal.host.shared_cores = a.shared_cores;

  // 1. The model alone on one rank (hpctrain-torch: libtorch stays out of
  // here), or the profile of an earlier calibration.
  if (!a.profile_from.empty()) {
    cal.profile = plan::load_calibration(a.profile_from).profile;
  } else {
    const std::string profile_path = dir + "/profile.json";
    std::fprintf(stderr, "plan calibrate: profiling %s alone (batch %d, %d thread)\n",
                 a.model.c_str(), a.batch, a.threads);
    run_to_file({(self_dir / kTorchExecutable).string(), "plan-profile", "--model", a.model,
                 "--batch", std::to_string(a.batch), "--threads", std::to_string(a.threads),
                 "--steps", std::to_string(a.profile_steps), "--out", profile_path},
                {{"OMP_NUM_THREADS", std::to_string(a.threads)},
                 {"OPENBLAS_NUM_THREADS", std::to_string(a.threads)}},
                dir + "/profile.out", a.timeout_s);
    {
      json doc = plan::to_json(cal);
      std::ifstream f(profile_path);
      doc["profile"] = json::parse(f);
      cal = plan::calibration_from_json(doc);
    }
  }

  // The step's parts as the trainer's own loop measured them on one rank
  // (plan/calibration.h, with_measured_step); the gradients' bytes and
  // order stay the profile's.
  if (!a.train_from.empty()) {
    cal.profile = plan::with_measured_step(
        cal.profile, plan::one_rank_bench_train_line(read_json_lines(a.train_from), a.train_from));
  }

  // How much slower a rank computes when the ranks fill the cores
  // (plan/calibration.h, all_cores_factor), from the same kind of run.
  // Busy cores are never faster than one alone: a ratio below 1 says the
  // two jobs saw different shares of a machine shared with other work, and
  // the factor stays 1.
  if (!a.all_cores_from.empty()) {
    const double f =
        plan::all_cores_factor(read_json_lines(a.all_cores_from),
                               cal.host.shared_cores > 0 ? cal.host.shared_cores : cal.host.cores,
                               cal.host.threads_per_rank, a.all_cores_from);
    if (f < 1) {
      std::fprintf(stderr,
                   "plan calibrate: warning: in %s the ranks that fill the cores stepped %.3fx "
                   "as long as one rank alone (below 1: the machine was shared with other work "
                   "while it ran); taking 1; measure on a quiet host\n",
                   a.all_cores_from.c_str(), f);
    }
    cal.host.busy_factor = std::max(1.0, f);
  }

  // 2. The links: saved bench comm output, and/or bench comm run now.
  const std::vector<json> lines = comm_lines(a, dir, self_dir);
  const auto fitted = plan::fit_bench_comm(lines, &cal.algorithms);
  if (!a.no_comm && fitted.empty()) {
    throw_invalid_argument(
        "plan calibrate: the bench comm output held no allreduce lines to fit (direct, shm); check "
        "the comm files or the hosts");
  }
  plan::save_calibration(cal, a.save);
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  json summary = {{"plan", "calibration"},
                  {"file", a.save},
                  {"model", cal.profile.model},
                  {"step_s", cal.profile.step_s()},
                  {"gradient_bytes", cal.profile.gradient_bytes()},
                  {"gradients", cal.profile.gradients.size()},
                  {"busy_factor", cal.host.busy_factor},
                  {"algorithms", json::object()}};
  for (const auto& [n, ab] : cal.algorithms) {
    summary["algorithms"][n] = {{"alpha_us", ab.alpha_s * 1e6},
                                {"GBps", ab.beta_s_per_byte > 0 ? 1e-9 / ab.beta_s_per_byte : 0.0}};
  }
  std::cout << summary.dump() << std::endl;
  return 0;
}

}  // namespace

void add_plan_calibrate_command(CLI::App* plan, Cli& cli) {
  auto k = std::make_shared<CalibrateArgs>();
  auto* cal = plan->add_subcommand(
      "calibrate",
      "Measure what plan predicts from: a 1-rank model profile and bench comm on the links");
  cal->add_option("--model", k->model, "Built-in model to profile: mlp, cnn, resnet20")
      ->capture_default_str();
  cal->add_option("--batch", k->batch, "Samples per rank and step")->capture_default_str();
  cal->add_option("--threads", k->threads, "Intra-op threads per rank")->capture_default_str();
  cal->add_option("--profile-steps", k->profile_steps, "Timed steps of the profile")
      ->capture_default_str();
  cal->add_option("--comm", k->comm_files,
                  "Fit the links from this saved bench comm output (JSON lines; repeatable) "
                  "instead of running it");
  cal->add_option("--profile", k->profile_from,
                  "Take the model profile from this earlier calibration file instead of profiling");
  cal->add_option("--train", k->train_from,
                  "Take data, compute and optimizer time from this bench train output's 1-rank "
                  "line (--np 1 or 1,N): the trainer's own loop");
  cal->add_option("--all-cores", k->all_cores_from,
                  "Measure how much slower a rank computes when the ranks fill the cores, from "
                  "this bench train output of --np 1,N with the N ranks on one host (N x threads "
                  ">= its cores; may be the --train file)");
  cal->add_flag("--no-comm", k->no_comm,
                "Profile only (give the links to plan with --link/--latency)");
  cal->add_option("--local-np", k->local_np, "Ranks of the shared-memory run on one host (0: none)")
      ->capture_default_str();
  cal->add_option("--sizes", k->sizes, "bench comm message sizes")->capture_default_str();
  cal->add_option("--budget-s", k->budget_s, "bench comm seconds per size")->capture_default_str();
  cal->add_option("--comm-runs", k->comm_runs,
                  "Run each bench comm this many times; each size's median is fitted, so one run "
                  "that caught a stall does not set the link")
      ->check(CLI::Range(1, 20))
      ->capture_default_str();
  cal->add_option("--cores", k->cores, "Cores per host (default: this machine's)");
  cal->add_option("--shared-cores", k->shared_cores,
                  "All hosts share this many cores (namespace hosts on one machine)")
      ->capture_default_str();
  cal->add_option("--save", k->save, "Where the calibration goes (required)");
  cal->add_option("--timeout-s", k->timeout_s, "Bound on each measuring step")
      ->capture_default_str();
  add_bench_host_options(cal, &k->hosts);
  cal->callback([&cli, k] { cli.run = [k] { return run_calibrate(*k); }; });
}

}  // namespace hpct::cli
