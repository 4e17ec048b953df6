// What `hpctrain top` shows: one row per rank of a running job, made from
// successive scrapes of the ranks' /metrics (scrape.h, exposition.h).
//
// Rates are over a sliding window (default 5 s) of scrapes: samples/s, and
// the step split (data wait, forward and backward, gradient sync,
// optimizer) as milliseconds per step from the histograms' _sum and _count.
// A rank's state:
//   starting     answers, has not finished a step yet
//   ok           steps move
//   slowest      steps move, and its own work (data + compute + optimizer
//                per step) is the largest of the job's ranks: the others
//                wait for it in sync (marked when 5% or more above the
//                fastest rank's)
//   STRAGGLER    steps move, and the ranks themselves name it the straggler
//                (hpctrain_straggler: persistently slower than the median by
//                HPCT_STRAGGLER_MARGIN over HPCT_STRAGGLER_WINDOW_S;
//                engine/straggler.h); the note says by how much and where
//                its time goes (data, compute or network)
//   STALLED      answers, but its step counter has not moved for stall_after
//   UNREACHABLE  its endpoint did not answer (refused, unreachable, or no
//                whole answer within the scrape's bound: a stopped process)
//   BAD          it answered with text that is not Prometheus's format
// A change of state is an event (a line with the time, rank and reason).
//
// Not thread-safe; the caller passes the time, so tests drive it with
// made-up clocks and texts.
#pragma once

#include <deque>
#include <map>
#include <string>
#include <vector>

#include "metrics/exposition.h"
#include "metrics/scrape.h"

namespace hpct::metrics {

struct RankRow {
  std::string target;      // host:port scraped
  std::string rank = "?";  // the rank label, once seen
  std::string host = "?";  // the host label, once seen
  std::string state = "starting";
  std::string note;           // why a row is marked, the last error
  double samples_per_s = -1;  // -1: not known yet
  // Milliseconds per step over the window (-1: not known yet).
  double data_ms = -1, compute_ms = -1, sync_ms = -1, optimizer_ms = -1;
  std::string sync_path = "-";  // the allreduce path that carried the most bytes lately
  double steps = 0;
  double restarts = 0;
  double stall_warnings = 0;
  // Memory (-1: not exported by this rank): the process's peak resident
  // memory, and the optimizer state it holds (its part when sharded).
  double peak_rss_bytes = -1;
  double optimizer_state_bytes = -1;
  double slowdown = 0;          // hpctrain_straggler_slowdown_ratio
  std::string straggler_cause;  // the cause while named, else empty
};

struct JobViewOptions {
  double window_s = 5;       // rates over the scrapes of the last window_s seconds
  double stall_after_s = 5;  // STALLED when the step counter has not moved for this long
};

class JobView {
 public:
  explicit JobView(JobViewOptions options = {}) : options_(options) {}

  // One round of scrapes taken at `now` (seconds, any monotonic origin).
  // Targets not seen before get a row; rows of targets no longer listed are
  // dropped. Returns the events of this round, e.g.
  // "rank 1 (10.0.0.2) UNREACHABLE: no answer within 1.0 s".
  std::vector<std::string> update(const std::vector<ScrapeResult>& round, double now);

  // Rows in rank order (unknown ranks last, by target).
  std::vector<RankRow> rows() const;

 private:
  struct Snapshot {
    double t = 0;
    double samples = 0, steps = 0;
    double phase_sum[4] = {0, 0, 0, 0};
    std::map<std::string, double> path_bytes;
  };
  struct Track {
    RankRow row;
    std::deque<Snapshot> history;
    double last_step_change = 0;
    bool seen_ok = false;
  };
  void apply(Track& tr, const ScrapeResult& r, double now);
  void mark_slowest();

  JobViewOptions options_;
  std::map<std::string, Track> tracks_;  // by target
};

// The rows as a table with a header line, each line ending in '\n'.
// ansi: marked rows in colour (red: STALLED, UNREACHABLE, BAD; yellow:
// STRAGGLER, slowest).
std::string format_table(const std::vector<RankRow>& rows, bool ansi);
// One plain line per rank, each prefixed with `stamp` (for logs and pipes).
std::string format_lines(const std::vector<RankRow>& rows, const std::string& stamp);

}  // namespace hpct::metrics
