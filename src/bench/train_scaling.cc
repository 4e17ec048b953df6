#include "bench/train_scaling.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "bench/pacer.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "data/formats/idx.h"

namespace hpct::bench {

int accuracy_steps(const TrainBenchOptions& o, int epochs, int np) {
  auto [images, labels] =
      data::fashion_mnist_files(o.data_dir.empty() ? data::kFashionMnistDir : o.data_dir, "train");
  std::int64_t n = static_cast<std::int64_t>(data::read_idx(labels).items());
  if (o.max_samples > 0) n = std::min<std::int64_t>(n, o.max_samples);
  const std::int64_t per_epoch = n / np / o.batch;
  const std::int64_t steps = per_epoch * epochs - o.warmup;
  if (steps < 2) {
    throw_invalid_argument("--accuracy: " + std::to_string(epochs) + " epoch(s) of " + std::to_string(n) +
                           " images are " + std::to_string(per_epoch * epochs) + " steps of --batch " +
                           std::to_string(o.batch) + " on " + std::to_string(np) +
                           " ranks, too few after --warmup " + std::to_string(o.warmup) +
                           ": give more --epochs or --max-samples, or less --warmup");
  }
  return static_cast<int>(std::min<std::int64_t>(steps, 1 << 30));
}

namespace {

// One job of the run: np local ranks under mpirun, paced (bench/pacer.h).
enum class Mode { kSync, kAlone, kLockstep };

struct Job {
  int np = 1;
  Mode mode = Mode::kSync;
  std::string dir;  // its temp directory: pace page, step logs, result
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::unique_ptr<bench::PaceParent> pace;
  std::thread thread;
  std::atomic<bool> ended{false};
  SubprocessResult result;
  std::exception_ptr error;
  std::vector<int> turn_start;  // the timed step each round's turn began at

  std::string name() const {
    return std::to_string(np) + "-rank job" +
           (mode == Mode::kAlone      ? " (ranks alone)"
            : mode == Mode::kLockstep ? " (lockstep, no gradients)"
                                      : "");
  }
};

void prepare(const TrainScalingOptions& a, const Config& config, Job* job) {
  namespace fs = std::filesystem;
  const fs::path base = a.tmp_dir.empty() ? fs::temp_directory_path() : fs::path(a.tmp_dir);
  std::string tmpl = (base / "hpctrain-bench-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw_io("mkdtemp " + tmpl, errno);
  job->dir = tmpl;
  if (a.hosts_prefix) {
    // hpctrain launch brings its own store; the settings go as --env.
    std::map<std::string, std::string> env = {
        {"OMP_NUM_THREADS", std::to_string(a.o.threads)},
        {"OPENBLAS_NUM_THREADS", std::to_string(a.o.threads)}};
    for (const auto& e : config.describe()) {
      if (e.source != ConfigSource::kDefault) env[e.env_name] = e.value;
    }
    job->argv = a.hosts_prefix(job->np, env);
  } else {
    job->argv = a.mpirun_prefix(job->np);
    job->env = {{"HPCT_BACKEND", a.backend},
                {"HPCT_STORE_DIR", tmpl},
                {"OMP_NUM_THREADS", std::to_string(a.o.threads)},
                {"OPENBLAS_NUM_THREADS", std::to_string(a.o.threads)}};
    for (const auto& [k, v] : job->env) job->argv.insert(job->argv.end(), {"-x", k});
    // Settings given in the environment or with --set reach every rank.
    for (const auto& e : config.describe()) {
      if (e.source != ConfigSource::kDefault) {
        job->argv.insert(job->argv.end(), {"-x", e.env_name + "=" + e.value});
      }
    }
  }
  auto& argv = job->argv;
  argv.insert(argv.end(), {self_executable(), "bench",
                           "train",           "--worker",
                           "--model",         a.o.model,
                           "--steps",         std::to_string(a.o.steps),
                           "--batch",         std::to_string(a.o.batch),
                           "--threads",       std::to_string(a.o.threads),
                           "--warmup",        std::to_string(a.o.warmup),
                           "--result-file",   tmpl + "/result.json",
                           "--pace-file",     tmpl + "/pace",
                           "--step-log",      tmpl + "/steps",
                           "--timeout-s",     std::to_string(a.timeout_s)});
  if (a.o.synthetic) argv.push_back("--synthetic");
  if (a.no_overlap) argv.push_back("--no-overlap");
  if (!a.o.compression.empty()) argv.insert(argv.end(), {"--compression", a.o.compression});
  if (a.o.optimizer != "sgd") argv.insert(argv.end(), {"--optimizer", a.o.optimizer});
  if (a.o.shard != 0) argv.insert(argv.end(), {"--shard", std::to_string(a.o.shard)});
  if (!a.o.shard_prefetch) argv.insert(argv.end(), {"--shard-prefetch", "false"});
  if (a.o.max_samples > 0) argv.insert(argv.end(), {"--max-samples", std::to_string(a.o.max_samples)});
  if (a.accuracy && job->mode == Mode::kSync) argv.push_back("--evaluate");
  if (job->mode != Mode::kSync || !a.o.sync) argv.push_back("--no-sync");
  if (job->mode == Mode::kLockstep || (job->mode == Mode::kSync && a.o.lockstep))
    argv.push_back("--lockstep");
  if (!a.o.data_dir.empty()) argv.insert(argv.end(), {"--data-dir", a.o.data_dir});
  for (const auto& s : a.o.shards) argv.insert(argv.end(), {"--data", s});
  if (!a.o.shards.empty())
    argv.insert(argv.end(), {"--data-threads", std::to_string(a.o.data_threads)});
  job->pace = std::make_unique<bench::PaceParent>(tmpl + "/pace", job->np);
}

void start(Job* job, Millis timeout) {
  std::fflush(stdout);
  job->thread = std::thread([job, timeout] {
    try {
      job->result = run_subprocess(job->argv, job->env, timeout);
    } catch (...) {
      job->error = std::current_exception();
    }
    job->ended = true;
  });
}

// A job whose ranks failed; they printed why. The run exits with its code.
struct JobFailed {
  int exit_code;
  std::string command;
};

[[noreturn]] void job_failed(const Job& job) {
  if (job.error) std::rethrow_exception(job.error);
  if (job.result.timed_out)
    throw_timeout("bench train: the " + job.name() + " did not finish: " + join_command(job.argv));
  const int code = job.result.signal != 0 ? 128 + job.result.signal : job.result.exit_code;
  throw JobFailed{code != 0 ? code : 1, join_command(job.argv)};
}

// One rank's timed steps from its step log.
struct Step {
  double seconds = 0;
  double parts[4] = {};  // data, compute, sync, optimizer (s)
};

std::vector<Step> read_steps(const std::string& path, int steps) {
  std::ifstream in(path);
  std::vector<Step> out;
  long long i, start_ns, end_ns, p[4];
  while (in >> i >> start_ns >> end_ns >> p[0] >> p[1] >> p[2] >> p[3]) {
    Step st;
    st.seconds = (end_ns - start_ns) * 1e-9;
    for (int k = 0; k < 4; ++k) st.parts[k] = p[k] * 1e-9;
    out.push_back(st);
  }
  if (static_cast<int>(out.size()) != steps) {
    throw_data_corrupt("bench train: " + path + " holds " + std::to_string(out.size()) + " of " +
                       std::to_string(steps) + " timed steps");
  }
  return out;
}

// The job's speed over its turns, from every rank's step log. The first step
// of each turn is left out (its rank woke from a pause: cold caches, and a
// synced rank waits there for its peers to wake).
nlohmann::json measure(const TrainScalingOptions& a, const Job& job, std::vector<double>* per_round) {
  const int rounds = static_cast<int>(job.turn_start.size());
  std::vector<std::vector<double>> secs(rounds, std::vector<double>(job.np, 0.0));
  std::vector<std::vector<int>> counts(rounds, std::vector<int>(job.np, 0));
  const char* part_names[4] = {"data", "compute", "sync", "optimizer"};
  std::vector<double> rank_secs(job.np, 0.0);
  std::vector<int> rank_count(job.np, 0);
  std::vector<std::array<double, 4>> parts(job.np, std::array<double, 4>{});
  for (int r = 0; r < job.np; ++r) {
    auto steps = read_steps(job.dir + "/steps." + std::to_string(r), a.o.steps);
    int round = 0;
    for (int i = 0; i < a.o.steps; ++i) {
      while (round + 1 < rounds && job.turn_start[round + 1] <= i) ++round;
      if (i == job.turn_start[round]) continue;
      secs[round][r] += steps[i].seconds;
      ++counts[round][r];
      rank_secs[r] += steps[i].seconds;
      ++rank_count[r];
      for (int k = 0; k < 4; ++k) parts[r][k] += steps[i].parts[k];
    }
  }
  auto samples_per_s = [&](const std::vector<double>& s, const std::vector<int>& c) {
    double total = 0;
    for (int r = 0; r < job.np; ++r) {
      if (c[r] > 0 && s[r] > 0) total += a.o.batch * c[r] / s[r];
    }
    return total;
  };
  per_round->clear();
  for (int k = 0; k < rounds; ++k) per_round->push_back(samples_per_s(secs[k], counts[k]));
  nlohmann::json j;
  j["samples_per_s"] = samples_per_s(rank_secs, rank_count);
  j["samples_per_s_rounds"] = *per_round;
  int slowest = 0;
  std::vector<double> compute_by_rank;
  for (int r = 0; r < job.np; ++r) {
    if (rank_secs[r] / rank_count[r] > rank_secs[slowest] / rank_count[slowest]) slowest = r;
    compute_by_rank.push_back(parts[r][1] / rank_count[r] * 1e3);
  }
  j["step_ms"] = rank_secs[slowest] / rank_count[slowest] * 1e3;
  nlohmann::json slow_split, mean_split;
  for (int k = 0; k < 4; ++k) {
    double mean = 0;
    for (int r = 0; r < job.np; ++r) mean += parts[r][k] / rank_count[r] / job.np;
    slow_split[part_names[k]] = parts[slowest][k] / rank_count[slowest] * 1e3;
    mean_split[part_names[k]] = mean * 1e3;
  }
  j["slowest_rank"] = slowest;
  j["split_ms_slowest"] = slow_split;
  j["split_ms_mean"] = mean_split;
  j["compute_ms_by_rank"] = compute_by_rank;
  j["timed_steps_per_rank"] = rank_count[0];
  return j;
}

// One job per rank count; with contention, its twins (alone, lockstep)
// right after it.
std::vector<std::unique_ptr<Job>> make_jobs(const TrainScalingOptions& a, const std::vector<int>& nps) {
  std::vector<std::unique_ptr<Job>> jobs;
  auto add = [&](int np, Mode mode) {
    jobs.push_back(std::make_unique<Job>());
    jobs.back()->np = np;
    jobs.back()->mode = mode;
  };
  for (int np : nps) {
    add(np, Mode::kSync);  // with --no-sync, ranks alone all the same
    if (a.contention && np > 1 && a.o.sync) {
      // The same ranks training alone side by side (the host's own ceiling),
      // and in lockstep without gradients (any synchronous job's ceiling).
      add(np, Mode::kAlone);
      add(np, Mode::kLockstep);
    }
  }
  return jobs;
}

// Stops what still runs and removes every job's directory.
void cleanup(std::vector<std::unique_ptr<Job>>& jobs) {
  for (auto& job : jobs) {
    if (job->thread.joinable()) {
      // Its ranks stop at their next step boundary; a stuck job ends with
      // its own timeout.
      if (job->pace) job->pace->cancel();
      job->thread.join();
    }
    std::error_code ec;
    if (!job->dir.empty()) std::filesystem::remove_all(job->dir, ec);
  }
}

// Starts every job (each parks before its first timed step), then runs the
// turns, round after round, to the last step. Throws JobFailed.
void run_turns(const TrainScalingOptions& a, const Config& config, std::vector<std::unique_ptr<Job>>& jobs,
               const Deadline& deadline) {
  for (auto& job : jobs) {
    prepare(a, config, job.get());
    start(job.get(), deadline.remaining());
    if (!job->pace->wait_parked(0, deadline.remaining(), [&] { return job->ended.load(); }))
      job_failed(*job);
  }
  for (int done = 0; done < a.o.steps;) {
    int next = std::min(a.o.steps, done + a.phase_steps);
    if (a.o.steps - next < 2) next = a.o.steps;  // no turn of a single, untimed step
    for (auto& job : jobs) {
      job->turn_start.push_back(done);
      job->pace->run_until(next);
      if (next < a.o.steps) {
        if (!job->pace->wait_parked(next, deadline.remaining(),
                                    [&] { return job->ended.load(); })) {
          job_failed(*job);
        }
      } else {
        job->thread.join();  // its last turn: it ends before the next job's
        if (job->error || job->result.timed_out || job->result.signal != 0 ||
            job->result.exit_code != 0) {
          job_failed(*job);
        }
      }
    }
    done = next;
  }
}

// One line per synchronous job, with its --contention twins' figures.
void report_lines(const TrainScalingOptions& a, const std::vector<std::unique_ptr<Job>>& jobs,
                  const std::vector<nlohmann::json>& measured, const std::vector<std::vector<double>>& rounds,
                  int repeat, std::vector<nlohmann::json>* lines) {
  // The base: the smallest rank count's per-rank speed, overall and per round.
  size_t base = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i]->mode == Mode::kSync && jobs[i]->np < jobs[base]->np) base = i;
  }
  const double base_per_rank = measured[base]["samples_per_s"].get<double>() / jobs[base]->np;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i]->mode != Mode::kSync) continue;  // a --contention twin: reported with its job
    nlohmann::json j = measured[i];
    const double sps = j["samples_per_s"].get<double>();
    std::vector<double> paired;
    for (size_t k = 0; k < rounds[i].size(); ++k) {
      paired.push_back(rounds[i][k] / (rounds[base][k] / jobs[base]->np * jobs[i]->np));
    }
    j["scaling_efficiency"] = sps / (base_per_rank * jobs[i]->np);
    j["scaling_efficiency_rounds"] = paired;
    j["efficiency_base_np"] = jobs[base]->np;
    j["rounds"] = rounds[i].size();
    j["phase_steps"] = a.phase_steps;
    for (size_t t = i + 1; t < jobs.size() && jobs[t]->mode != Mode::kSync; ++t) {
      const double twin = measured[t]["samples_per_s"].get<double>();
      std::vector<double> ratio;
      for (size_t k = 0; k < rounds[i].size(); ++k) ratio.push_back(rounds[i][k] / rounds[t][k]);
      if (jobs[t]->mode == Mode::kAlone) {
        j["independent_samples_per_s"] = twin;
        j["independent_samples_per_s_rounds"] = rounds[t];
        j["independent_split_ms_mean"] = measured[t]["split_ms_mean"];
        j["sync_efficiency"] = sps / twin;
        j["sync_efficiency_rounds"] = ratio;
      } else {
        j["lockstep_samples_per_s"] = twin;
        j["lockstep_samples_per_s_rounds"] = rounds[t];
        j["lockstep_split_ms_mean"] = measured[t]["split_ms_mean"];
        j["lockstep_scaling_efficiency"] = twin / (base_per_rank * jobs[i]->np);
        j["gradient_sync_efficiency"] = sps / twin;
        j["gradient_sync_efficiency_rounds"] = ratio;
      }
    }
    if (a.repeats > 1) j["repeat"] = repeat;
    if (a.accuracy) j["epochs"] = a.epochs;
    std::cout << j.dump() << std::endl;
    lines->push_back(j);
  }
}

}  // namespace

// Every job is started once and parks before its first timed step; then, in
// each round, every job in turn runs --phase-steps timed steps while the
// others sleep. A drift in the host's speed thus reaches every rank count
// alike, and each round pairs turns a second or two apart.
int run_train_scaling(const TrainScalingOptions& a, const Config& config, const std::vector<int>& nps, int repeat,
                      const Deadline& deadline, std::vector<nlohmann::json>* lines) {
  auto jobs = make_jobs(a, nps);
  try {
    run_turns(a, config, jobs, deadline);
  } catch (const JobFailed& f) {
    cleanup(jobs);
    std::fprintf(stderr, "hpctrain: bench train failed: %s\n", f.command.c_str());
    return f.exit_code;
  } catch (...) {
    cleanup(jobs);
    throw;
  }

  std::vector<std::vector<double>> rounds(jobs.size());
  std::vector<nlohmann::json> measured(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    std::ifstream in(jobs[i]->dir + "/result.json");
    std::string line;
    if (!std::getline(in, line) ||
        !(measured[i] = nlohmann::json::parse(line, nullptr, false)).is_object()) {
      cleanup(jobs);
      throw_data_corrupt("bench train: rank 0 of the " + jobs[i]->name() + " wrote no result (" +
                         jobs[i]->dir + "/result.json)");
    }
    try {
      measured[i].update(measure(a, *jobs[i], &rounds[i]));
    } catch (...) {
      cleanup(jobs);
      throw;
    }
  }
  cleanup(jobs);
  report_lines(a, jobs, measured, rounds, repeat, lines);
  return 0;
}

}  // namespace hpct::bench
