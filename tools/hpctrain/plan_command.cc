// `hpctrain plan`: how fast a data-parallel job would train on H hosts of L
// ranks, per sync path and compression, from the alpha-beta cost model
// (src/plan/cost_model.h); and `hpctrain plan calibrate`, which measures
// what the model needs (a 1-rank profile of the model, run by hpctrain-torch
// plan-profile, and `hpctrain bench comm` on this host and across the given
// hosts) and saves it as a calibration file; --train FILE takes the step's
// parts from a 1-rank `bench train` run instead (the trainer's own loop).
//
//   hpctrain plan calibrate --model mlp [-H h1:1,h2:1 -i KEY] --save cal.json
//   hpctrain plan calibrate --profile cal.json --train train.jsonl --comm c.jsonl --save cal2.json
//   hpctrain plan --calibration cal.json --hosts 1,2,4,8,1024 --ranks-per-host 1,2
//       --paths flat,hier,ps:2 --compression none,fp16 [--json] [--plot FILE.svg]
//   hpctrain plan --model-bytes 80M --compute-per-sample 2ms --link 25gbit --latency 20us ...
//
// Output: a table (default) or JSON lines: one {"plan": "prediction"} per
// (path, compression, ranks per host, hosts), then one {"plan": "bound"} per
// (path, compression, ranks per host) with the host count up to which
// efficiency stays at or above --efficiency-bound.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bench/scaling_plot.h"
#include "bench_hosts.h"
#include "commands.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "plan/calibration.h"
#include "plan/cost_model.h"

namespace hpct::cli {
namespace {

using nlohmann::json;

struct PlanArgs {
  // Calibration: a file, and/or given values that override it.
  std::string calibration;
  std::string link, latency;          // direct and ring
  std::string shm_link, shm_latency;  // shared memory on one host
  std::string compute_per_sample;     // forward + backward per sample
  std::string gradient_bytes;         // e.g. 80M
  int batch = 0;                      // per rank; 0: the calibration's (64 when given)
  int cores = 0;                      // per host; 0: the calibration's
  int shared_cores = -1;              // -1: the calibration's
  double busy_factor = 0;             // 0: the calibration's
  // What to predict.
  std::string hosts = "1,2,4,8,16,32,64,128,256,512,1024";
  std::string ranks_per_host = "1";
  std::string paths = "flat,hier";
  std::string compression = "none,fp16";
  bool servers_on_own_hosts = false;
  double efficiency_bound = 0.8;
  int max_hosts = 4096;
  bool json = false;
  std::string plot;
  std::string save;  // write the effective calibration here
};

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
  BenchHosts hosts;
  int cores = 0;         // 0: this machine's
  int shared_cores = 0;  // hosts that share this many cores (namespace hosts)
  std::string save;
  double timeout_s = 600;
};

std::vector<int> parse_int_list(const std::string& text, const std::string& flag) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size() || v < 1) {
      throw_invalid_argument(flag + " " + text + ": '" + item +
                             "' is not a whole number >= 1 (e.g. " + flag + " 1,2,4)");
    }
    out.push_back(v);
  }
  if (out.empty())
    throw_invalid_argument(flag + ": give at least one number (e.g. " + flag + " 1,2,4)");
  return out;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// "80M", "1.5G", "4096", "64K" -> bytes (binary multiples, as bench comm's sizes).
double parse_bytes(const std::string& text, const std::string& flag) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  double f = 0;
  if (unit.empty() || unit == "B")
    f = 1;
  else if (unit == "K")
    f = 1024;
  else if (unit == "M")
    f = 1024.0 * 1024;
  else if (unit == "G")
    f = 1024.0 * 1024 * 1024;
  if (used == 0 || f == 0 || !(v > 0)) {
    throw_invalid_argument(flag + " '" + text +
                           "' is not a byte count; give e.g. 80M, 1.5G or 4096");
  }
  return v * f;
}

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
      std::fprintf(stderr, "plan calibrate: bench comm, %s\n", what.c_str());
      const std::string out = dir + "/comm." + std::to_string(lines.size()) + ".jsonl";
      run_to_file(argv, env, out, a.timeout_s);
      auto more = read_json_lines(out);
      lines.insert(lines.end(), more.begin(), more.end());
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

plan::Calibration effective_calibration(const PlanArgs& a) {
  plan::Calibration cal;
  const bool have_file = !a.calibration.empty();
  if (have_file) cal = plan::load_calibration(a.calibration);
  if (!have_file && (a.compute_per_sample.empty() || a.gradient_bytes.empty())) {
    throw_invalid_argument(
        "plan: give --calibration FILE (from hpctrain plan calibrate), or --compute-per-sample and "
        "--gradient-bytes with --link and --latency");
  }
  if (a.batch > 0) {
    // Compute scales with the batch; the gradients do not.
    const double f = static_cast<double>(a.batch) / cal.profile.batch;
    if (have_file) {
      cal.profile.forward_s *= f, cal.profile.backward_s *= f, cal.profile.data_s *= f;
      for (auto& g : cal.profile.gradients) g.ready_s *= f;
    }
    cal.profile.batch = a.batch;
  }
  if (!a.compute_per_sample.empty()) {
    // Given: backward takes two thirds of forward + backward, and the
    // gradients come out in ten equal parts evenly over backward.
    const double step = plan::parse_seconds(a.compute_per_sample) * cal.profile.batch;
    cal.profile.forward_s = step / 3;
    cal.profile.backward_s = step * 2 / 3;
    if (!have_file) cal.profile.model = "given";
    if (cal.profile.gradients.empty() || !a.gradient_bytes.empty()) {
      const double total = a.gradient_bytes.empty()
                               ? cal.profile.gradient_bytes()
                               : parse_bytes(a.gradient_bytes, "--gradient-bytes");
      cal.profile.gradients.clear();
      for (int i = 0; i < 10; ++i) {
        cal.profile.gradients.push_back(
            {"part" + std::to_string(i), total / 10, cal.profile.backward_s * (i + 1) / 10});
      }
    } else {
      const double f =
          cal.profile.backward_s / std::max(1e-12, cal.profile.gradients.back().ready_s);
      for (auto& g : cal.profile.gradients)
        g.ready_s = std::min(g.ready_s * f, cal.profile.backward_s);
    }
  } else if (!a.gradient_bytes.empty()) {
    const double f = parse_bytes(a.gradient_bytes, "--gradient-bytes") /
                     std::max(1.0, cal.profile.gradient_bytes());
    for (auto& g : cal.profile.gradients) g.bytes *= f;
  }
  if (!a.link.empty() || !a.latency.empty()) {
    if (a.link.empty() || a.latency.empty())
      throw_invalid_argument(
          "plan: --link and --latency go together (e.g. --link 25gbit --latency 20us)");
    const plan::AlphaBeta ab{plan::parse_seconds(a.latency),
                             1.0 / plan::parse_rate_bytes_per_s(a.link), 2,
                             "given: " + a.link + ", " + a.latency};
    cal.algorithms["direct"] = ab;
    cal.algorithms["ring"] = ab;
  }
  if (!a.shm_link.empty() || !a.shm_latency.empty()) {
    if (a.shm_link.empty() || a.shm_latency.empty())
      throw_invalid_argument(
          "plan: --shm-link and --shm-latency go together (e.g. --shm-link 5GB/s --shm-latency "
          "10us)");
    cal.algorithms["shm"] = {plan::parse_seconds(a.shm_latency),
                             1.0 / plan::parse_rate_bytes_per_s(a.shm_link), 2,
                             "given: " + a.shm_link + ", " + a.shm_latency};
  }
  if (a.cores > 0) cal.host.cores = a.cores;
  if (a.shared_cores >= 0) cal.host.shared_cores = a.shared_cores;
  if (a.busy_factor != 0) {
    if (!(a.busy_factor > 0))
      throw_invalid_argument(
          "plan: --busy-factor must be above 0 (1: all cores busy is no slower)");
    cal.host.busy_factor = a.busy_factor;
  }
  return cal;
}

json prediction_json(const plan::Calibration& cal, const plan::Prediction& p) {
  const auto& s = p.scenario;
  return {{"plan", "prediction"},
          {"model", cal.profile.model},
          {"batch_per_rank", cal.profile.batch},
          {"path", plan::path_name(s)},
          {"compression", s.compression},
          {"hosts", s.hosts},
          {"ranks_per_host", s.ranks_per_host},
          {"np", s.hosts * s.ranks_per_host},
          {"algorithm", p.algorithm},
          {"overlap", p.overlap},
          {"buckets", p.buckets},
          {"step_ms", p.step_s * 1e3},
          {"compute_ms", p.compute_s * 1e3},
          {"sync_ms", p.sync_s * 1e3},
          {"exposed_sync_ms", p.exposed_sync_s * 1e3},
          {"samples_per_s", p.samples_per_s},
          {"scaling_efficiency", p.efficiency},
          {"wire_bytes_per_host", p.wire_bytes_per_host}};
}

int run_plan(const PlanArgs& a) {
  const plan::Calibration cal = effective_calibration(a);
  if (!a.save.empty()) plan::save_calibration(cal, a.save);
  const auto hosts = parse_int_list(a.hosts, "--hosts");
  const auto locals = parse_int_list(a.ranks_per_host, "--ranks-per-host");
  const auto paths = split(a.paths);
  const auto comps = split(a.compression);
  if (paths.empty() || comps.empty())
    throw_invalid_argument("plan: --paths and --compression need at least one entry");
  if (a.max_hosts < 1) throw_invalid_argument("plan: --max-hosts must be at least 1");
  std::vector<plan::Scenario> series;
  for (const auto& p : paths) {
    plan::Scenario s;
    s.path = plan::parse_path(p, &s.servers);
    s.servers_on_own_hosts = a.servers_on_own_hosts;
    for (const auto& c : comps) {
      plan::compression_ratio(c);  // refuse an unknown one before printing anything
      s.compression = c;
      for (int l : locals) {
        s.ranks_per_host = l;
        series.push_back(s);
      }
    }
  }
  plan::hosts_within_efficiency(cal, series.front(), a.efficiency_bound, 1);  // checks the bound

  if (!a.json) {
    std::printf(
        "model %s, batch %d per rank; one rank alone: %.1f ms a step, %.0f samples/s, %.1f MB of "
        "gradients in %zu tensors\n",
        cal.profile.model.c_str(), cal.profile.batch, cal.profile.step_s() * 1e3,
        cal.profile.batch / cal.profile.step_s(), cal.profile.gradient_bytes() / 1e6,
        cal.profile.gradients.size());
    if (cal.host.shared_cores > 0) {
      std::printf("cores: %d shared by all hosts", cal.host.shared_cores);
    } else {
      std::printf("cores: %d per host", cal.host.cores);
    }
    std::printf(", %d thread per rank; all cores busy: compute x %.3f\n", cal.host.threads_per_rank,
                cal.host.busy_factor);
    std::printf("%-6s %-10s %6s %5s %7s %-7s %9s %9s %9s %11s %6s %12s\n", "path", "compress",
                "hosts", "L", "ranks", "alg", "step_ms", "comp_ms", "sync_ms", "samples/s", "eff",
                "wire_MB/host");
  }
  std::vector<json> plot_runs;
  std::vector<json> bounds;
  for (const auto& base : series) {
    for (int h : hosts) {
      plan::Scenario s = base;
      s.hosts = h;
      const plan::Prediction p = plan::predict(cal, s);
      const json j = prediction_json(cal, p);
      if (a.json) {
        std::cout << j.dump() << '\n';
      } else {
        std::printf("%-6s %-10s %6d %5d %7d %-7s %9.1f %9.1f %9.1f %11.0f %6.3f %12.1f\n",
                    plan::path_name(s).c_str(), s.compression.c_str(), h, s.ranks_per_host,
                    h * s.ranks_per_host, p.algorithm.c_str(), p.step_s * 1e3, p.compute_s * 1e3,
                    p.exposed_sync_s * 1e3, p.samples_per_s, p.efficiency,
                    p.wire_bytes_per_host / 1e6);
      }
      if (&base == &series.front()) plot_runs.push_back(j);
    }
    const int within = plan::hosts_within_efficiency(cal, base, a.efficiency_bound, a.max_hosts);
    bounds.push_back({{"plan", "bound"},
                      {"model", cal.profile.model},
                      {"path", plan::path_name(base)},
                      {"compression", base.compression},
                      {"ranks_per_host", base.ranks_per_host},
                      {"efficiency_bound", a.efficiency_bound},
                      {"hosts_within_bound", within},
                      {"searched_up_to_hosts", a.max_hosts}});
  }
  for (const auto& b : bounds) {
    if (a.json) {
      std::cout << b.dump() << '\n';
    } else {
      const int w = b["hosts_within_bound"];
      std::printf(
          "%s %s, %d per host: efficiency >= %.2f %s\n", b["path"].get<std::string>().c_str(),
          b["compression"].get<std::string>().c_str(), b["ranks_per_host"].get<int>(),
          a.efficiency_bound,
          w == 0 ? "not even on one host"
          : w >= a.max_hosts
              ? ("up to " + std::to_string(w) + " hosts and beyond (--max-hosts)").c_str()
              : ("up to " + std::to_string(w) + " hosts, below it from " + std::to_string(w + 1))
                    .c_str());
    }
  }
  std::cout.flush();
  if (!a.plot.empty()) {
    bench::write_scaling_plot(a.plot, plot_runs);
    std::fprintf(stderr, "plan: plotted %s %s, %d per host, to %s\n", paths.front().c_str(),
                 comps.front().c_str(), locals.front(), a.plot.c_str());
  }
  return 0;
}

}  // namespace

void add_plan_command(CLI::App& app, Cli& cli) {
  auto a = std::make_shared<PlanArgs>();
  auto* c = app.add_subcommand("plan",
                               "Predict step time, samples/s and scaling per hosts, sync path and "
                               "compression (alpha-beta model)");
  const char* cg = "Calibration";
  c->add_option("--calibration", a->calibration,
                "A calibration file (hpctrain plan calibrate --save)")
      ->group(cg);
  c->add_option("--link", a->link, "Given link rate between hosts: 25gbit, 10Gbit/s, 1.25GB/s")
      ->group(cg);
  c->add_option("--latency", a->latency, "Given latency of one message between hosts: 20us")
      ->group(cg);
  c->add_option("--shm-link", a->shm_link, "Given shared-memory allreduce rate on one host: 5GB/s")
      ->group(cg);
  c->add_option("--shm-latency", a->shm_latency, "Given shared-memory allreduce latency: 10us")
      ->group(cg);
  c->add_option("--compute-per-sample", a->compute_per_sample,
                "Given forward + backward time per sample: 2ms")
      ->group(cg);
  c->add_option("--gradient-bytes", a->gradient_bytes, "Given gradient bytes per step: 80M")
      ->group(cg);
  c->add_option("--batch", a->batch,
                "Samples per rank and step (default: the calibration's, or 64)")
      ->group(cg);
  c->add_option("--cores", a->cores,
                "Cores per host (overlap is off when a host's ranks fill them)")
      ->group(cg);
  c->add_option(
       "--shared-cores", a->shared_cores,
       "All hosts share this many cores (namespace hosts on one machine); 0: each host has its own")
      ->group(cg);
  c->add_option("--busy-factor", a->busy_factor,
                "Given slowdown of a rank's compute once a host's ranks fill its cores: 1.1")
      ->group(cg);
  c->add_option("--save", a->save, "Write the effective calibration (file plus given values) here")
      ->group(cg);
  c->add_option("--hosts", a->hosts, "Host counts: 1,2,4,...")->capture_default_str();
  c->add_option("--ranks-per-host", a->ranks_per_host, "Ranks per host: 1,2,8")
      ->capture_default_str();
  c->add_option("--paths", a->paths, "Sync paths: flat, hier, ps:K (K parameter servers)")
      ->capture_default_str();
  c->add_option("--compression", a->compression,
                "none, fp16, bf16, auto, ratio:R (a lossy mode sending R of the bytes)")
      ->capture_default_str();
  c->add_flag("--servers-on-own-hosts", a->servers_on_own_hosts,
              "ps:K: servers on hosts of their own (default: on the workers' hosts)");
  c->add_option("--efficiency-bound", a->efficiency_bound,
                "Report the host count up to which efficiency stays at or above this")
      ->capture_default_str();
  c->add_option("--max-hosts", a->max_hosts, "Search the bound up to this many hosts")
      ->capture_default_str();
  c->add_flag("--json", a->json, "JSON lines instead of a table");
  c->add_option("--plot", a->plot,
                "SVG of samples/s and efficiency against ranks (the first path, compression and "
                "ranks per host)");
  c->callback([&cli, a, c] {
    if (c->got_subcommand("calibrate")) return;
    cli.run = [a] { return run_plan(*a); };
  });

  auto k = std::make_shared<CalibrateArgs>();
  auto* cal = c->add_subcommand(
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
