// Stragglers: the rank that the others keep waiting for, named with its host
// and where its time goes.
//
// The protocol. Each rank measures itself, with timestamps only:
//   - blocked: the time its callers spent in Handle::wait() (waiting for
//     the other ranks to submit the same tensors, and for the collective);
//   - comm: the time its engine spent running collectives;
//   - data and compute: the training loop's step parts, when the loop
//     reports them (Engine::note_work; hpctrain train does).
// Every few seconds (window / 10, at least 0.5 s) the ranks exchange these
// figures in one allgather of a fixed 128-byte record each, run by whoever
// runs the engine's round. Rounds are collective, so every rank exchanges
// at the same round; the number of rounds to the next exchange is computed
// from the exchanged figures alone, the same on every rank.
//
// Who waited for whom needs no common clock. In lock-step training every
// rank's steps take the same wall time; a rank's own work is that time less
// what it spent blocked. A slow rank blocks little (the others are already
// there when it submits), the others block for it. So over a window:
//   work(r)     = elapsed(r) - blocked(r)
//   slowdown(r) = work(r) / median over the other ranks of work - 1
//   late(r)     = median over the others of blocked - blocked(r)  (>= 0):
//                 the time the others waited for r beyond what r waited.
// The rule (StragglerDetector): after the job's first half window (its
// start is not its pace), once the window (HPCT_STRAGGLER_WINDOW_S)
// is covered and every rank has blocked at least min_waits times in it, the
// rank with the largest slowdown is a candidate when that slowdown is at
// least HPCT_STRAGGLER_MARGIN; a candidate in `persist` evaluations in a row
// is named (a warning on rank 0), and a named rank below half the margin in
// `persist` evaluations in a row is cleared. The cause is the part of its
// time that exceeds the others' median most: data (waiting for batches),
// compute (forward, backward, optimizer) or network (its collectives took
// longer); without the loop's parts, compute (work outside collectives) or
// network.
//
// Threads: StragglerMeter is thread-safe (one uncontended mutex per call).
// StragglerDetector is not thread-safe. StragglerWatch::after_round runs
// under the engine's round lock; its status() may be read from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/clock.h"
#include "core/log.h"

namespace hpct::engine {

struct StragglerOptions {
  double window_s = 20;  // HPCT_STRAGGLER_WINDOW_S (0: off, nothing exchanged)
  double margin = 0.2;   // HPCT_STRAGGLER_MARGIN: slower than the median by at least this
  int min_waits = 10;    // HPCT_STRAGGLER_MIN_WAITS: blocking waits per rank per window
  int persist = 3;       // evaluations in a row to name (and to clear) a rank
};

// One rank's figures over one interval between exchanges (seconds).
struct StragglerSample {
  double elapsed_s = 0;
  double blocked_s = 0;
  double waits = 0;  // Handle::wait calls that blocked
  double comm_s = 0;
  double data_s = 0, compute_s = 0;
  double steps = 0;  // steps the training loop reported (0: no parts known)
  std::string host;  // at most 63 bytes travel
};

enum class StragglerCause { kData, kCompute, kNetwork };
const char* straggler_cause_name(StragglerCause c);

// A rank's standing: the last evaluated window, and totals since the start.
struct StragglerRank {
  int rank = 0;
  std::string host;
  double slowdown = 0;  // over the last window (0 until the window is covered)
  double late_s = 0;    // total: the others waited for it
  double waited_s = 0;  // total: it was blocked
  bool named = false;
  StragglerCause cause = StragglerCause::kCompute;
};

class StragglerDetector {
 public:
  StragglerDetector(const StragglerOptions& options, int size);

  // A rank named or cleared by the last add(), with the line to log.
  struct Change {
    int rank = 0;
    bool named = false;
    std::string line;
  };
  // One interval's samples, in rank order (size() of them).
  std::vector<Change> add(const std::vector<StragglerSample>& interval);

  const std::vector<StragglerRank>& ranks() const { return ranks_; }
  double covered_s() const { return covered_s_; }

 private:
  // The window's sums of one rank.
  struct Sums {
    double elapsed = 0, blocked = 0, waits = 0, comm = 0, data = 0, compute = 0, steps = 0;
  };
  std::vector<Sums> window_sums() const;
  StragglerCause cause_of(int r, const std::vector<Sums>& s) const;
  std::vector<Change> judge(const std::vector<Sums>& s);

  StragglerOptions options_;
  std::vector<StragglerRank> ranks_;
  std::deque<std::vector<StragglerSample>> intervals_;
  std::deque<double> durations_;
  double warmup_left_s_;  // the first half window of the job is not judged
  double covered_s_ = 0;
  std::vector<int> over_;   // evaluations in a row as the candidate over the margin
  std::vector<int> under_;  // named ranks: evaluations in a row below half the margin
};

// The median of v (the mean of the middle two for an even count); 0 if empty.
double straggler_median(std::vector<double> v);

// This rank's figures since the last take(). Thread-safe.
class StragglerMeter {
 public:
  StragglerMeter() : since_(SteadyClock::now()) {}
  // A caller starts and ends waiting for a handle. Blocked time is the time
  // during which at least one caller waits, so threads that wait at once
  // (a Python backend's) count it once.
  void begin_wait(SteadyClock::time_point now);
  void end_wait(SteadyClock::time_point now);
  void add_comm(double s);
  void add_work(double data_s, double compute_s);
  StragglerSample take(SteadyClock::time_point now);

 private:
  std::mutex mu_;
  StragglerSample s_;                        // GUARDED_BY(mu_)
  SteadyClock::time_point since_;            // GUARDED_BY(mu_)
  int waiting_ = 0;                          // GUARDED_BY(mu_): callers in a wait now
  SteadyClock::time_point waiting_since_{};  // GUARDED_BY(mu_)
};

// Every rank's sample, in rank order (one allgather).
std::vector<StragglerSample> exchange_straggler_samples(comm::Communicator& comm,
                                                        const StragglerSample& mine);

// The engine's part: the meter, the exchange's cadence, the detector and
// rank 0's warning lines.
class StragglerWatch {
 public:
  StragglerWatch(const StragglerOptions& options, int rank, int size, std::string host,
                 Logger logger);
  bool enabled() const { return enabled_; }
  // Shared with the handles, which may outlive the engine.
  const std::shared_ptr<StragglerMeter>& meter() const { return meter_; }
  // After every round, by whoever ran it (the engine's round lock held).
  void after_round(comm::Communicator& comm);
  // Every rank's standing, in rank order (empty until the first exchange).
  std::vector<StragglerRank> status() const;

 private:
  const bool enabled_;
  const StragglerOptions options_;
  const int rank_;
  const std::string host_;
  Logger logger_;
  std::shared_ptr<StragglerMeter> meter_ = std::make_shared<StragglerMeter>();
  StragglerDetector detector_;
  std::int64_t rounds_left_ = 16;
  std::int64_t every_ = 16;
  mutable std::mutex mu_;
  std::vector<StragglerRank> status_;  // GUARDED_BY(mu_)
};

}  // namespace hpct::engine
