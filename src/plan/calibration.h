// What `hpctrain plan` predicts from: a 1-rank profile of the model and the
// alpha-beta costs of the links, measured (`hpctrain plan calibrate`: the
// profile and `hpctrain bench comm`) or given (--link 25gbit --latency 20us),
// saved as one JSON file so that a prediction needs no re-measuring.
//
// The file (version 1):
//   {"hpctrain_plan_calibration": 1,
//    "profile": {"model", "batch", "forward_s", "backward_s", "optimizer_s",
//                "data_s", "gradients": [{"name", "bytes", "ready_s"}, ...]},
//    "algorithms": {"direct": {"alpha_s", "beta_s_per_byte", "ranks", "source"},
//                   "ring": {...}, "shm": {...}},
//    "engine": {"fusion_bytes", "cycle_s", "direct_bytes", "ps_piece_bytes",
//               "cast_s_per_byte"},
//    "host": {"cores", "threads_per_rank", "shared_cores", "busy_factor"}}
// (busy_factor may be absent: 1, as files written before it was measured).
// gradients are in backward order; ready_s is when backward produced each,
// from the start of backward. An algorithm's ranks is the rank count it was
// measured at: for ring alpha and beta are per step as in cost_model.h, fitted
// from its 2-rank time 2 * alpha + S * beta.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace hpct::plan {

struct Gradient {
  std::string name;
  double bytes = 0;
  double ready_s = 0;  // from the start of backward
};

struct Profile {
  std::string model;
  int batch = 64;  // per rank
  double forward_s = 0;
  double backward_s = 0;
  double optimizer_s = 0;
  double data_s = 0;
  std::vector<Gradient> gradients;  // backward order

  double step_s() const { return data_s + forward_s + backward_s + optimizer_s; }
  double gradient_bytes() const;
};

// The profile's step parts replaced by what `hpctrain bench train` measured
// for one rank (its JSON line with "np": 1): data, optimizer, and forward +
// backward ("compute"), the means per timed step of its split_ms_mean. That
// is the trainer's own loop (DistributedOptimizer, its hooks and engine,
// the sampler), and a mean is what samples/s is made of. Forward and
// backward keep the profile's ratio and the gradients' ready times scale with
// backward, so the overlap keeps the profile's shape. InvalidArgument naming
// the problem when the line is not a 1-rank bench train line with a split.
Profile with_measured_step(Profile p, const nlohmann::json& bench_train_line);

// The 1-rank line among `hpctrain bench train` output lines (--np 1 or a list
// such as 1,4); InvalidArgument saying how to get one when there is none.
const nlohmann::json& one_rank_bench_train_line(const std::vector<nlohmann::json>& lines,
                                                const std::string& where);

// The busy-cores factor from `hpctrain bench train --np 1,N` output whose N
// ranks ran on one host and fill its cores (N x threads >= cores; N = the
// cores is the plain case): the N-rank job's mean step per rank (data +
// compute + optimizer of split_ms_mean) over the 1-rank job's of the same
// run (the jobs take turns, so both see the same minutes of the machine),
// divided by N x threads / cores when the ranks outnumber the cores (each
// then has that share of a core). The result is what a core's compute
// slows by when all cores are busy. InvalidArgument naming `where` and the
// fix when there is no 1-rank line or no line that fills the cores.
double all_cores_factor(const std::vector<nlohmann::json>& lines, int cores, int threads_per_rank,
                        const std::string& where);

// t(S) = alpha + S * beta for one message step of the algorithm.
struct AlphaBeta {
  double alpha_s = 0;
  double beta_s_per_byte = 0;
  int ranks = 2;       // measured at (shm: the host's ranks)
  std::string source;  // "bench comm ..." or "given"
};

struct EngineSettings {
  double fusion_bytes = 64.0 * 1024 * 1024;   // HPCT_FUSION_BYTES
  double cycle_s = 0.005;                     // HPCT_CYCLE_MS
  double direct_bytes = 64.0 * 1024;          // HPCT_DIRECT_ALLREDUCE_BYTES
  double ps_piece_bytes = 4.0 * 1024 * 1024;  // HPCT_PS_PIECE_BYTES
  // float32 -> float16 and back, per float32 byte, on one core (docs/comm.md:
  // 2.0 ms for 8M elements with F16C).
  double cast_s_per_byte = 2.0e-3 / (8.0 * 1024 * 1024 * 4);
};

struct HostSettings {
  int cores = 2;             // per host: overlap is off when ranks x threads fill them
  int threads_per_rank = 1;  // intra-op threads
  // > 0: every host shares this many cores (hosts made of network namespaces
  // on one machine); compute then slows by ranks x threads / shared_cores.
  int shared_cores = 0;
  // A rank's step when every core runs ranks, over its step alone (1: not
  // measured): all_cores_factor below. cost_model.h applies it once the
  // ranks fill the cores.
  double busy_factor = 1.0;
};

struct Calibration {
  Profile profile;
  std::map<std::string, AlphaBeta> algorithms;  // "direct", "ring", "shm"
  EngineSettings engine;
  HostSettings host;

  // The named algorithm; InvalidArgument naming the missing one and how to
  // get it (calibrate with bench comm on that path, or --link/--latency).
  const AlphaBeta& algorithm(const std::string& name) const;
};

nlohmann::json to_json(const Calibration& c);
// InvalidArgument naming the field when one is missing or of the wrong type.
Calibration calibration_from_json(const nlohmann::json& j);
void save_calibration(const Calibration& c, const std::string& path);
Calibration load_calibration(const std::string& path);

// Fit of t = alpha + bytes * beta to (bytes, seconds) points: beta by least
// squares over the large sizes (from 1/16 of the largest up, at least the
// two largest: the bandwidth regime gradient buckets live in), alpha from
// the smallest size (what it takes beyond its bytes, at least 0). Needs two
// distinct sizes. Measured links are not straight lines (a 1 MiB message
// fits a shaper's burst and the caches); this keeps both ends honest.
AlphaBeta fit_alpha_beta(const std::vector<std::pair<double, double>>& bytes_seconds);

// From `hpctrain bench comm` JSON lines (allreduce, float32): fits "direct"
// from lines whose algorithm starts with direct: (one exchange: alpha + S beta),
// "ring" from the raw gloo::allreduce beside 2-rank lines (2 alpha + S beta),
// and "shm" from lines whose algorithm starts with shm: (alpha + S beta at
// their np). Lines of several runs (bench comm repeated, or --comm files of
// the same link) count once per size: the median of their times, so one
// run that caught a stall does not set the link's figures. Adds to `into`
// what the lines hold; returns the names fitted.
std::vector<std::string> fit_bench_comm(const std::vector<nlohmann::json>& lines,
                                        std::map<std::string, AlphaBeta>* into);

// "25gbit", "10Gbit/s", "1.25GB/s", "100mbit" -> bytes per second;
// "20us", "1.5ms", "0.002s", "500ns" -> seconds; "2ms" per sample alike.
// InvalidArgument naming the text and an example otherwise.
double parse_rate_bytes_per_s(const std::string& text);
double parse_seconds(const std::string& text);

}  // namespace hpct::plan
