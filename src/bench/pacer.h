// Jobs that take turns on one host, a few steps at a time, so that a drift
// in the host's speed reaches each of them alike.
//
// `bench train --np 1,2` compares a 1-rank job with a 2-rank job. Run one
// after the other, a shared VM's speed moves by 10-20% between them (the
// same 1-rank job measured 1676-2109 samples/s in runs a minute apart), and
// the ratio is mostly that noise. Instead every job is started once and
// paced: the parent lets one job run K timed steps while the others sleep
// at a step boundary, then the next job, round after round. Each job is an
// ordinary job of its own rank count; it only pauses between its steps.
//
// One page, a file in the run's temp directory mapped by the parent and by
// each of the job's ranks: `until` (ranks run timed steps below it; a
// futex the parent wakes) and one parked step per rank (the parent sleeps
// on a futex the ranks bump). Every wait is bounded, and a rank also stops
// waiting when the parent process is gone.
#pragma once

#include <functional>
#include <string>

#include "core/clock.h"

namespace hpct::bench {

struct PacePage;

// The parent's side, one per job.
class PaceParent {
 public:
  // Creates `path` (the job's ranks map it) for a job of `ranks` ranks, with
  // every rank held before timed step 0.
  PaceParent(const std::string& path, int ranks);
  ~PaceParent();
  PaceParent(const PaceParent&) = delete;
  PaceParent& operator=(const PaceParent&) = delete;

  // Lets the ranks run timed steps below `until`.
  void run_until(int until);
  // Waits, asleep, until every rank is parked before step `step`. False if
  // `ended()` turns true first (the job exited or failed); Timeout after
  // `timeout`, naming the ranks that never arrived.
  bool wait_parked(int step, Millis timeout, const std::function<bool()>& ended);
  // Another job failed: parked ranks (and any that park later) stop with
  // PeerFailure instead of running out their steps.
  void cancel();

 private:
  std::string path_;
  int ranks_;
  PacePage* page_ = nullptr;
};

// A rank's side.
class PaceRank {
 public:
  // Maps the parent's page. `bound`: the longest a rank waits for its turn.
  PaceRank(const std::string& path, int rank, Millis bound);
  ~PaceRank();
  PaceRank(const PaceRank&) = delete;
  PaceRank& operator=(const PaceRank&) = delete;

  // Returns when timed step `step` may run: at once while it is below the
  // parent's `until`, else after parking (asleep) until it is. Timeout after
  // the bound; PeerFailure when the parent process is gone or cancelled.
  void before_step(int step);

 private:
  PacePage* page_ = nullptr;
  int rank_;
  Millis bound_;
};

}  // namespace hpct::bench
