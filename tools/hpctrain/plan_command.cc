// `hpctrain plan`: how fast a data-parallel job would train on H hosts of L
// ranks, per sync path and compression, from the alpha-beta cost model
// (src/plan/cost_model.h); `hpctrain plan calibrate` (plan_calibrate_command.cc) measures
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
#include "plan/memory_model.h"

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
  // Memory per rank per shard stage (plan/memory_model.h).
  std::string optimizer = "adam";
  std::string precision = "fp32";
  double parameters = 0;     // 0: the calibration's gradient bytes / 4
  double largest_layer = -1; // elements; -1: from the calibration's gradient names
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

plan::MemoryModel effective_memory_model(const PlanArgs& a, const plan::Calibration& cal) {
  plan::MemoryModel m = plan::memory_model_of(cal.profile, a.optimizer, a.precision);
  if (a.parameters > 0 || a.largest_layer >= 0) {
    const double psi = a.parameters > 0 ? a.parameters : m.parameters;
    // Given parameters with no given layer: the profile's share of its largest layer.
    const double layer = a.largest_layer >= 0 ? a.largest_layer
                         : m.parameters > 0   ? m.largest_layer / m.parameters * psi
                                              : 0;
    m = plan::memory_model(psi, layer, a.optimizer, a.precision);
  }
  return m;
}

// Bytes per rank at each shard stage, as the prediction line's memory_stageK_bytes.
void add_memory(json* j, const plan::MemoryModel& m, int ranks) {
  for (int stage = 0; stage <= 3; ++stage) {
    const plan::MemoryPerRank r = plan::memory_per_rank(m, stage, ranks);
    (*j)["memory_stage" + std::to_string(stage) + "_bytes"] = r.total();
  }
}

void print_table_header(const plan::Calibration& cal, const plan::MemoryModel& mem) {
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
  std::printf(
      "memory per rank (GB) at shard stage 0..3: %.4g parameters, %g bytes each and per gradient, "
      "%g bytes of state per parameter (%s, %s), largest layer %.4g parameters\n",
      mem.parameters, mem.bytes_per_element, mem.state_bytes_per_parameter, mem.optimizer.c_str(),
      mem.precision.c_str(), mem.largest_layer);
  std::printf("%-6s %-10s %6s %5s %7s %-7s %9s %9s %9s %11s %6s %12s %8s %8s %8s %8s\n", "path",
              "compress", "hosts", "L", "ranks", "alg", "step_ms", "comp_ms", "sync_ms",
              "samples/s", "eff", "wire_MB/host", "mem0_GB", "mem1_GB", "mem2_GB", "mem3_GB");
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
  const plan::MemoryModel mem = effective_memory_model(a, cal);
  if (!a.json) print_table_header(cal, mem);
  std::vector<json> plot_runs;
  std::vector<json> bounds;
  for (const auto& base : series) {
    for (int h : hosts) {
      plan::Scenario s = base;
      s.hosts = h;
      const plan::Prediction p = plan::predict(cal, s);
      json j = prediction_json(cal, p);
      add_memory(&j, mem, h * s.ranks_per_host);
      if (a.json) {
        std::cout << j.dump() << '\n';
      } else {
        std::printf(
            "%-6s %-10s %6d %5d %7d %-7s %9.1f %9.1f %9.1f %11.0f %6.3f %12.1f %8.3f %8.3f %8.3f "
            "%8.3f\n",
            plan::path_name(s).c_str(), s.compression.c_str(), h, s.ranks_per_host,
            h * s.ranks_per_host, p.algorithm.c_str(), p.step_s * 1e3, p.compute_s * 1e3,
            p.exposed_sync_s * 1e3, p.samples_per_s, p.efficiency, p.wire_bytes_per_host / 1e6,
            j["memory_stage0_bytes"].get<double>() / 1e9, j["memory_stage1_bytes"].get<double>() / 1e9,
            j["memory_stage2_bytes"].get<double>() / 1e9, j["memory_stage3_bytes"].get<double>() / 1e9);
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
  const char* mg = "Memory per rank (shard stages 0-3)";
  c->add_option("--optimizer", a->optimizer, "adam, sgd-momentum or sgd: its state per parameter")
      ->capture_default_str()
      ->group(mg);
  c->add_option("--precision", a->precision,
                "fp32, or mixed (fp16 parameters and gradients, an fp32 master copy in the state)")
      ->capture_default_str()
      ->group(mg);
  c->add_option("--parameters", a->parameters,
                "Parameter count (default: the calibration's gradient bytes / 4): 7.5e9")
      ->group(mg);
  c->add_option("--largest-layer", a->largest_layer,
                "Parameters of the largest layer, gathered whole at stage 3 (default: from the "
                "calibration's parameter names)")
      ->group(mg);
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

  add_plan_calibrate_command(c, cli);
}

}  // namespace hpct::cli
