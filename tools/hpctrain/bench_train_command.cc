// `hpctrain bench train`: data-parallel training speed of a built-in model,
// one JSON line per rank count (--np 1,2,4), each with its scaling
// efficiency (samples/s over np times the smallest count's per-rank
// samples/s); every count runs --repeats times, interleaved, and the line
// gives the median and every run. --plot FILE.svg draws samples/s and
// efficiency against ranks.
//
// Starts N local ranks itself with `mpirun -np N <this binary> bench train
// --worker ...` (MPI backend by default: shared memory between local ranks;
// --backend gloo meets through a file store in a temp directory), with
// OMP_NUM_THREADS and OPENBLAS_NUM_THREADS set to --threads. Rank 0 writes
// its result to a file in the run's temp directory; the parent prints it
// (bench/train_bench.h lists its fields).
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

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
  std::string np = "2";     // one rank count, or a list: 1,2,4
  std::string plot;         // SVG of samples/s and efficiency against ranks
  std::string result_file;  // worker: rank 0 writes its JSON line here instead of stdout
  double timeout_s = 3600;
  bool no_overlap = false;
  bool contention = false;  // also run each np > 1 without gradient sync
  int repeats = 3;          // runs per rank count, interleaved; the median is reported
  bool worker = false;
};

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
      throw_invalid_argument("--np " + list + ": '" + item + "' is not a rank count (e.g. --np 1,2,4)");
    }
  }
  if (out.empty()) throw_invalid_argument("--np: no rank count given");
  return out;
}

// Samples/s (left axis) and scaling efficiency (right axis, %) against ranks.
void write_plot(const std::string& path, const std::vector<nlohmann::json>& runs) {
  const double w = 640, h = 400, l = 70, r = 70, t = 40, b = 50;
  double max_np = 1, max_sps = 1;
  for (const auto& j : runs) {
    max_np = std::max(max_np, j["np"].get<double>());
    max_sps = std::max(max_sps, j["samples_per_s"].get<double>());
  }
  max_sps *= 1.15;
  auto x = [&](double np) { return l + (max_np > 1 ? (np - 1) / (max_np - 1) : 0.5) * (w - l - r); };
  auto ys = [&](double v) { return h - b - v / max_sps * (h - t - b); };
  auto ye = [&](double e) { return h - b - e / 1.2 * (h - t - b); };
  std::ostringstream o;
  o << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h << "' font-family='sans-serif' font-size='12'>\n"
    << "<rect width='100%' height='100%' fill='white'/>\n"
    << "<text x='" << w / 2 << "' y='20' text-anchor='middle'>hpctrain bench train: "
    << runs[0]["model"].get<std::string>() << ", batch " << runs[0]["batch_per_rank"] << " per rank</text>\n"
    << "<line x1='" << l << "' y1='" << h - b << "' x2='" << w - r << "' y2='" << h - b << "' stroke='black'/>\n"
    << "<line x1='" << l << "' y1='" << t << "' x2='" << l << "' y2='" << h - b << "' stroke='black'/>\n"
    << "<line x1='" << w - r << "' y1='" << t << "' x2='" << w - r << "' y2='" << h - b << "' stroke='black'/>\n"
    << "<text x='" << w / 2 << "' y='" << h - 12 << "' text-anchor='middle'>ranks</text>\n"
    << "<text x='15' y='" << t - 10 << "' fill='steelblue'>samples/s</text>\n"
    << "<text x='" << w - r - 20 << "' y='" << t - 10 << "' fill='darkorange'>efficiency %</text>\n";
  for (int i = 0; i <= 4; ++i) {
    double v = max_sps * i / 4, e = 1.2 * i / 4;
    o << "<text x='" << l - 5 << "' y='" << ys(v) + 4 << "' text-anchor='end'>" << static_cast<long>(v) << "</text>\n"
      << "<text x='" << w - r + 5 << "' y='" << ye(e) + 4 << "'>" << static_cast<long>(e * 100) << "</text>\n";
  }
  std::string sps_pts, eff_pts;
  for (const auto& j : runs) {
    double np = j["np"].get<double>();
    sps_pts += std::to_string(x(np)) + "," + std::to_string(ys(j["samples_per_s"].get<double>())) + " ";
    eff_pts += std::to_string(x(np)) + "," + std::to_string(ye(j["scaling_efficiency"].get<double>())) + " ";
    o << "<text x='" << x(np) << "' y='" << h - b + 16 << "' text-anchor='middle'>" << j["np"] << "</text>\n"
      << "<circle cx='" << x(np) << "' cy='" << ys(j["samples_per_s"].get<double>()) << "' r='4' fill='steelblue'/>\n"
      << "<circle cx='" << x(np) << "' cy='" << ye(j["scaling_efficiency"].get<double>()) << "' r='4' fill='darkorange'/>\n";
  }
  o << "<polyline points='" << sps_pts << "' fill='none' stroke='steelblue' stroke-width='2'/>\n"
    << "<polyline points='" << eff_pts << "' fill='none' stroke='darkorange' stroke-width='2'/>\n</svg>\n";
  std::ofstream f(path);
  if (!(f << o.str())) throw_io("write " + path, errno ? errno : EIO);
}

int run_one(const TrainArgs& a, const Config& config, int np, nlohmann::json* result) {
  if (a.o.steps < 1 || a.o.batch < 1 || a.o.threads < 1) {
    throw_invalid_argument("--steps, --batch and --threads must be at least 1");
  }
  if (a.o.synthetic && !a.o.shards.empty()) {
    throw_invalid_argument("--synthetic and --data exclude each other: pick random images or the shards");
  }
  if (a.o.data_threads < 1) throw_invalid_argument("--data-threads must be at least 1");
  train::make_model(a.o.model);  // refuse an unknown model before starting ranks
  comm::parse_backend(a.backend);
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "hpctrain-bench-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw_io("mkdtemp " + tmpl, errno);
  std::vector<std::string> argv = local_mpirun_prefix(np);
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
                           std::to_string(a.o.warmup), "--result-file", tmpl + "/result.json"});
  if (a.o.synthetic) argv.push_back("--synthetic");
  if (a.no_overlap) argv.push_back("--no-overlap");
  if (!a.o.sync) argv.push_back("--no-sync");
  if (!a.o.data_dir.empty()) argv.insert(argv.end(), {"--data-dir", a.o.data_dir});
  for (const auto& s : a.o.shards) argv.insert(argv.end(), {"--data", s});
  if (!a.o.shards.empty()) argv.insert(argv.end(), {"--data-threads", std::to_string(a.o.data_threads)});
  std::fflush(stdout);
  auto r = run_subprocess(argv, env, seconds_to_millis(a.timeout_s));
  {
    std::ifstream in(tmpl + "/result.json");
    std::string line;
    if (std::getline(in, line)) *result = nlohmann::json::parse(line, nullptr, false);
  }
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  if (r.timed_out) throw_timeout("bench train did not finish: " + join_command(argv));
  if (r.signal != 0 || r.exit_code != 0) {
    std::fprintf(stderr, "hpctrain: bench train failed: %s\n", join_command(argv).c_str());
    return r.exit_code ? r.exit_code : 1;
  }
  if (!result->is_object()) throw_data_corrupt("bench train: rank 0 wrote no result (" + tmpl + "/result.json)");
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

// Runs every rank count --repeats times, interleaved (1,2,1,2,...), so a
// drift in the host's speed (a shared VM moves by 20% over minutes) reaches
// every rank count alike; each line gives the median and every run.
int run_parent(const TrainArgs& a, const Config& config) {
  if (a.o.steps < 1 || a.o.batch < 1 || a.o.threads < 1) {
    throw_invalid_argument("--steps, --batch and --threads must be at least 1");
  }
  if (a.repeats < 1) throw_invalid_argument("--repeats must be at least 1");
  auto nps = parse_np_list(a.np);
  const int base_np = *std::min_element(nps.begin(), nps.end());
  // runs[i][r]: rank count nps[i], repeat r; alone[i][r] its --contention twin.
  std::vector<std::vector<nlohmann::json>> runs(nps.size()), alone(nps.size());
  for (int rep = 0; rep < a.repeats; ++rep) {
    for (size_t i = 0; i < nps.size(); ++i) {
      nlohmann::json j;
      if (int rc = run_one(a, config, nps[i], &j)) return rc;
      runs[i].push_back(j);
      if (a.contention && nps[i] > 1) {
        // The same ranks training alone side by side: the host's own ceiling.
        TrainArgs solo = a;
        solo.o.sync = false;
        nlohmann::json k;
        if (int rc = run_one(solo, config, nps[i], &k)) return rc;
        alone[i].push_back(k);
      }
    }
  }
  auto sps = [](const nlohmann::json& j) { return j["samples_per_s"].get<double>(); };
  const size_t base = static_cast<size_t>(std::find(nps.begin(), nps.end(), base_np) - nps.begin());
  std::vector<double> base_runs;
  for (const auto& j : runs[base]) base_runs.push_back(sps(j) / base_np);
  const double per_rank_base = median(base_runs);
  std::vector<nlohmann::json> lines;
  for (size_t i = 0; i < nps.size(); ++i) {
    std::vector<double> all, paired;
    for (int rep = 0; rep < a.repeats; ++rep) {
      all.push_back(sps(runs[i][rep]));
      // Against the base run of the same repeat: the neighbour in time.
      paired.push_back(all.back() / (base_runs[rep] * nps[i]));
    }
    const double mid = median(all);
    // The run nearest the median stands for the rest (its split, engine counts).
    size_t pick = 0;
    for (size_t r = 1; r < all.size(); ++r) {
      if (std::abs(all[r] - mid) < std::abs(all[pick] - mid)) pick = r;
    }
    nlohmann::json j = runs[i][pick];
    j["samples_per_s"] = mid;
    j["step_ms"] = nps[i] * a.o.batch * 1e3 / mid;
    j["repeats"] = a.repeats;
    j["samples_per_s_runs"] = all;
    j["scaling_efficiency"] = mid / (per_rank_base * nps[i]);
    j["scaling_efficiency_runs"] = paired;
    j["efficiency_base_np"] = base_np;
    if (!alone[i].empty()) {
      std::vector<double> solo;
      for (const auto& k : alone[i]) solo.push_back(sps(k));
      j["independent_samples_per_s"] = median(solo);
      j["independent_samples_per_s_runs"] = solo;
      j["sync_efficiency"] = mid / median(solo);
    }
    std::cout << j.dump() << std::endl;
    lines.push_back(j);
  }
  if (!a.plot.empty()) {
    write_plot(a.plot, lines);
    std::fprintf(stderr, "hpctrain: plot written to %s\n", a.plot.c_str());
  }
  return 0;
}

int run_worker(TrainArgs a, const Config& config) {
  auto ctx = init(config);
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
  auto* c = bench.add_subcommand("train", "Data-parallel training speed of a built-in model (JSON)");
  c->add_option("--model", a->o.model, "mlp, cnn or resnet20")->capture_default_str();
  c->add_option("--np", a->np, "Ranks to start on this host, or a list (1,2,4): one run each")
      ->capture_default_str();
  c->add_option("--plot", a->plot, "Write an SVG of samples/s and scaling efficiency against ranks");
  c->add_option("--steps", a->o.steps, "Timed steps")->capture_default_str();
  c->add_option("--batch", a->o.batch, "Batch per rank")->capture_default_str();
  c->add_option("--threads", a->o.threads, "Intra-op threads per rank")->capture_default_str();
  c->add_option("--warmup", a->o.warmup, "Untimed steps first")->capture_default_str();
  c->add_option("--repeats", a->repeats,
                "Runs per rank count, interleaved across counts; each line reports the median "
                "and lists every run")
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
              "For each np > 1 also time the same ranks training alone (no gradient sync): "
              "sync_efficiency separates the host's contention from the cost of syncing");
  c->add_flag("--no-sync", [a](std::int64_t) { a->o.sync = false; },
              "Every rank trains alone (no gradient allreduce)");
  c->add_flag("--no-overlap", a->no_overlap, "Allreduce all gradients in step(), not during backward (default: HPCT_OVERLAP, auto)");
  c->add_option("--timeout-s", a->timeout_s, "Bound on the whole run")->capture_default_str();
  c->add_flag("--worker", a->worker, "Internal: run as one rank of the benchmark")->group("");
  c->add_option("--result-file", a->result_file, "Internal: where rank 0 writes its result")->group("");
  c->callback([&cli, a] {
    cli.run = [&cli, a] { return a->worker ? run_worker(*a, cli.config) : run_parent(*a, cli.config); };
  });
}

}  // namespace hpct::cli
