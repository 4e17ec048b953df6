// `hpctrain bench train`'s parent side: one job of local or launched ranks
// per rank count (each rank runs run_train_bench, train_bench.h), all of
// them started once and taking turns of phase_steps timed steps
// (bench/pacer.h), so the host's drift cancels out; then one JSON line per
// rank count with its samples/s, scaling efficiency (samples/s over np times
// the smallest count's per-rank samples/s) and every round's figures. The
// CLI (tools/hpctrain/bench_train_command.cc) parses the flags and calls
// this.
//
// Every job's temp directory (pace page, step logs, result) goes under
// tmp_dir, which must be on a file system every host sees when the ranks
// run elsewhere. Blocks for the run; not thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "bench/train_bench.h"
#include "core/clock.h"
#include "core/config.h"

namespace hpct::bench {

struct TrainScalingOptions {
  TrainBenchOptions o;      // every rank's settings (model, steps, batch, data, ...)
  std::string backend = "mpi";
  double timeout_s = 3600;  // each rank's bound on a pacing wait and the run
  bool no_overlap = false;
  bool contention = false;  // also run each np > 1 alone and in lockstep (no gradients)
  int phase_steps = 20;     // timed steps per job per turn
  std::string tmp_dir;      // empty: the system temp directory
  bool accuracy = false;    // the synchronous jobs evaluate the test set at the end
  int epochs = 5;           // with accuracy: written into every line
  int repeats = 1;          // > 1: every line says which repeat it is
  // The argv prefix that starts np ranks locally (mpirun), before the
  // binary; used when hosts_prefix is empty.
  std::function<std::vector<std::string>(int np)> mpirun_prefix;
  // Non-empty: the ranks start through this prefix on other hosts (hpctrain
  // launch), which passes `env` to every rank.
  std::function<std::vector<std::string>(int np, const std::map<std::string, std::string>& env)> hosts_prefix;
};

// With --accuracy: the timed steps (after o.warmup) that make `epochs`
// epochs of Fashion-MNIST's training set on np ranks (each epoch drops the
// last partial batch, as both sides' samplers do). InvalidArgument when
// fewer than 2.
int accuracy_steps(const TrainBenchOptions& o, int epochs, int np);

// One run of every rank count in nps, in turns; prints one line per rank
// count (into *lines too). `repeat` is written into the lines when
// repeats > 1. Returns 0, or the exit code of a job whose ranks failed
// (they printed why; the failed command goes to stderr).
int run_train_scaling(const TrainScalingOptions& a, const Config& config, const std::vector<int>& nps, int repeat,
                      const Deadline& deadline, std::vector<nlohmann::json>* lines);

}  // namespace hpct::bench
