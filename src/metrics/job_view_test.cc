// The rows of `hpctrain top` from made-up scrapes on a made-up clock:
// rates over the window, the step split, the slowest rank, and the marks
// and events for a rank that stalls, stops answering, comes back, or
// restarts.
#include "metrics/job_view.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace hpct::metrics {
namespace {

// A rank's /metrics after `steps` steps of batch 10, each with the given
// parts in seconds, and `bytes` allreduced on `path`.
ScrapeResult scrape(const std::string& target, int rank, double steps, double data, double compute,
                    double sync, double opt, const std::string& path = "ring", double bytes = 0,
                    double restarts = 0) {
  char b[2048];
  const std::string l = "host=\"h" + std::to_string(rank) + "\",launch_id=\"j\",rank=\"" +
                        std::to_string(rank) + "\"";
  std::snprintf(b, sizeof b,
                "# TYPE hpctrain_samples_total counter\n"
                "hpctrain_samples_total{%s} %g\n"
                "hpctrain_steps_total{%s} %g\n"
                "hpctrain_step_phase_seconds_sum{%s,phase=\"data\"} %g\n"
                "hpctrain_step_phase_seconds_sum{%s,phase=\"compute\"} %g\n"
                "hpctrain_step_phase_seconds_sum{%s,phase=\"sync\"} %g\n"
                "hpctrain_step_phase_seconds_sum{%s,phase=\"optimizer\"} %g\n"
                "hpctrain_allreduce_bytes_total{%s,path=\"%s\"} %g\n"
                "hpctrain_allreduce_bytes_total{%s,path=\"shm\"} 5\n"
                "hpctrain_restarts_total{%s} %g\n",
                l.c_str(), steps * 10, l.c_str(), steps, l.c_str(), steps * data, l.c_str(),
                steps * compute, l.c_str(), steps * sync, l.c_str(), steps * opt, l.c_str(),
                path.c_str(), bytes, l.c_str(), l.c_str(), restarts);
  ScrapeResult r;
  r.target = target;
  r.ok = true;
  r.body = b;
  return r;
}

ScrapeResult silent(const std::string& target) {
  ScrapeResult r;
  r.target = target;
  r.timed_out = true;
  r.error = "no answer within 1.0 s";
  return r;
}

TEST(JobView, RatesStepSplitPathAndTheSlowestRank) {
  JobView v;
  // Rank 1 does 30 ms of its own work per step, rank 0 20 ms: rank 0 waits for it in sync.
  v.update({scrape("a:1", 0, 0, 0, 0, 0, 0), scrape("b:1", 1, 0, 0, 0, 0, 0)}, 100.0);
  auto rows = v.rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].state, "starting");
  EXPECT_EQ(rows[0].samples_per_s, -1);
  v.update({scrape("b:1", 1, 20, 0.002, 0.025, 0.001, 0.003, "ring", 4000),
            scrape("a:1", 0, 20, 0.001, 0.017, 0.011, 0.002, "ring", 4000)},
           101.0);
  rows = v.rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].rank, "0");  // rank order, whatever the target order
  EXPECT_EQ(rows[0].host, "h0");
  EXPECT_EQ(rows[1].target, "b:1");
  EXPECT_DOUBLE_EQ(rows[0].samples_per_s, 200);
  EXPECT_NEAR(rows[0].data_ms, 1, 1e-9);
  EXPECT_NEAR(rows[0].compute_ms, 17, 1e-9);
  EXPECT_NEAR(rows[0].sync_ms, 11, 1e-9);
  EXPECT_NEAR(rows[0].optimizer_ms, 2, 1e-9);
  EXPECT_EQ(rows[0].sync_path, "ring");  // the path whose bytes grew, not shm's 5 idle bytes
  EXPECT_EQ(rows[0].state, "ok");
  EXPECT_EQ(rows[1].state, "slowest");
  EXPECT_NE(rows[1].note.find("own work 30.0 ms/step (fastest rank 20.0)"), std::string::npos)
      << rows[1].note;

  const std::string table = format_table(rows, false);
  EXPECT_NE(table.find("SAMPLES/S"), std::string::npos);
  EXPECT_NE(table.find("slowest"), std::string::npos);
  EXPECT_EQ(table.find("\x1b["), std::string::npos);
  EXPECT_NE(format_table(rows, true).find("\x1b[33m"), std::string::npos);
  const std::string lines = format_lines(rows, "12:00:01");
  EXPECT_NE(lines.find("12:00:01 rank=0 host=h0 state=ok samples_per_s=200.0 data_ms=1.00"),
            std::string::npos)
      << lines;
}

// Memory columns: a rank that exports its peak resident memory and its
// optimizer state shows them in megabytes; one that does not shows "-".
TEST(JobView, MemoryColumnsShowWhatARankExports) {
  JobView v;
  ScrapeResult with = scrape("a:1", 0, 10, 0.001, 0.01, 0.001, 0.001);
  with.body += "hpctrain_process_peak_resident_memory_bytes{host=\"h0\",job=\"j\",rank=\"0\"} 812000000\n"
               "hpctrain_optimizer_state_bytes{host=\"h0\",job=\"j\",rank=\"0\"} 53400000\n";
  v.update({with, scrape("b:1", 1, 10, 0.001, 0.01, 0.001, 0.001)}, 1.0);
  const auto rows = v.rows();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_DOUBLE_EQ(rows[0].peak_rss_bytes, 812e6);
  EXPECT_DOUBLE_EQ(rows[0].optimizer_state_bytes, 53.4e6);
  EXPECT_EQ(rows[1].peak_rss_bytes, -1);
  const std::string table = format_table(rows, false);
  EXPECT_NE(table.find("PEAK MB"), std::string::npos) << table;
  const std::string lines = format_lines(rows, "t");
  EXPECT_NE(lines.find("peak_rss_mb=812 optimizer_state_mb=53 "), std::string::npos) << lines;
  EXPECT_NE(lines.find("rank=1 host=h1"), std::string::npos);
  EXPECT_NE(lines.find("peak_rss_mb=- optimizer_state_mb=- "), std::string::npos) << lines;
}

TEST(JobView, StalledAndUnreachableAreMarkedWithEventsAndClearedWhenTheyRecover) {
  JobViewOptions o;
  o.stall_after_s = 5;
  JobView v(o);
  double t = 0;
  v.update({scrape("a:1", 0, 10, 0, 0.01, 0, 0), scrape("b:1", 1, 10, 0, 0.01, 0, 0)}, t);
  v.update({scrape("a:1", 0, 20, 0, 0.01, 0, 0), scrape("b:1", 1, 20, 0, 0.01, 0, 0)}, t += 1);
  // Rank 1 stops answering (SIGSTOP); rank 0 answers but waits for it in sync.
  auto events = v.update({scrape("a:1", 0, 21, 0, 0.01, 0, 0), silent("b:1")}, t += 1);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], "rank 1 (h1) UNREACHABLE: no answer within 1.0 s");
  EXPECT_EQ(v.rows()[1].state, "UNREACHABLE");
  EXPECT_EQ(v.rows()[1].samples_per_s, -1);
  std::vector<std::string> all;
  for (int i = 0; i < 6; ++i) {
    for (auto& e : v.update({scrape("a:1", 0, 21, 0, 0.01, 0, 0), silent("b:1")}, t += 1))
      all.push_back(e);
  }
  ASSERT_EQ(all.size(), 1u) << "one event per change, not one per round";
  EXPECT_EQ(all[0], "rank 0 (h0) STALLED: no step for 5 s (at step 21)");
  EXPECT_EQ(v.rows()[0].state, "STALLED");
  EXPECT_EQ(v.rows()[0].samples_per_s, 0);
  EXPECT_NE(format_table(v.rows(), true).find("\x1b[1;31m"), std::string::npos);

  // SIGCONT: both step again.
  events =
      v.update({scrape("a:1", 0, 30, 0, 0.01, 0, 0), scrape("b:1", 1, 30, 0, 0.01, 0, 0)}, t += 1);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0], "rank 0 (h0) ok again (was STALLED)");
  EXPECT_EQ(events[1], "rank 1 (h1) ok again (was UNREACHABLE)");
}

TEST(JobView, NewProcessAfterARestartStartsItsRatesAfresh) {
  JobView v;
  v.update({scrape("a:1", 0, 100, 0, 0.01, 0, 0)}, 0);
  v.update({scrape("a:1", 0, 200, 0, 0.01, 0, 0)}, 1);
  auto events = v.update({scrape("a:1", 0, 5, 0, 0.02, 0, 0, "ring", 0, 1)}, 2);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], "rank 0 (h0) restarted: 1 restarts of the job so far");
  auto r = v.rows()[0];
  EXPECT_EQ(r.steps, 5);
  EXPECT_NEAR(r.compute_ms, 20, 1e-9);  // averages of the new process, not a negative rate
  EXPECT_EQ(r.samples_per_s, -1);
}

TEST(JobView, TextThatIsNotTheFormatMarksTheRowBad) {
  JobView v;
  ScrapeResult r;
  r.target = "a:1";
  r.ok = true;
  r.body = "<html>proxy error</html>\n";
  auto events = v.update({r}, 0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].find("BAD: metrics text, line 1: no metric name"), std::string::npos)
      << events[0];
}

TEST(JobView, RowsFollowTheTargetList) {
  JobView v;
  v.update({scrape("a:1", 0, 1, 0, 0.01, 0, 0), scrape("b:1", 1, 1, 0, 0.01, 0, 0)}, 0);
  v.update({scrape("b:1", 1, 2, 0, 0.01, 0, 0)}, 1);
  ASSERT_EQ(v.rows().size(), 1u);
  EXPECT_EQ(v.rows()[0].rank, "1");
}

}  // namespace
}  // namespace hpct::metrics

namespace hpct::metrics {
namespace {

// The ranks' own straggler judgement (hpctrain_straggler{cause}) marks the
// row, says how much slower and why, and its start and end are events.
TEST(JobView, MarksTheRankTheRanksNamedStraggler) {
  auto with_straggler = [](ScrapeResult r, int rank, double slowdown, const char* cause) {
    const std::string l = "host=\"h" + std::to_string(rank) + "\",launch_id=\"j\",rank=\"" +
                          std::to_string(rank) + "\"";
    r.body += "hpctrain_straggler_slowdown_ratio{" + l + "} " + std::to_string(slowdown) + "\n";
    for (const char* c : {"data", "compute", "network"}) {
      r.body += "hpctrain_straggler{" + l + ",cause=\"" + c + "\"} " +
                (cause != nullptr && std::string(cause) == c ? "1" : "0") + "\n";
    }
    return r;
  };
  JobView v;
  v.update({with_straggler(scrape("a:1", 0, 10, 0.001, 0.02, 0.01, 0.001), 0, 0, nullptr),
            with_straggler(scrape("b:1", 1, 10, 0.001, 0.026, 0.004, 0.001), 1, 0.31, nullptr)},
           10.0);
  auto events = v.update(
      {with_straggler(scrape("a:1", 0, 20, 0.001, 0.02, 0.01, 0.001), 0, -0.2, nullptr),
       with_straggler(scrape("b:1", 1, 20, 0.001, 0.026, 0.004, 0.001), 1, 0.31, "compute")},
      11.0);
  auto rows = v.rows();
  EXPECT_EQ(rows[0].state, "ok");  // not "slowest" either: the ranks said who
  EXPECT_EQ(rows[1].state, "STRAGGLER");
  EXPECT_EQ(rows[1].note, "31% slower than the median rank, the time goes to compute");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0],
            "rank 1 (h1) STRAGGLER: 31% slower than the median rank, the time goes to compute");
  EXPECT_NE(format_table(rows, true).find("\x1b[1;33m1 "), std::string::npos);
  events =
      v.update({with_straggler(scrape("a:1", 0, 30, 0.001, 0.02, 0.01, 0.001), 0, 0, nullptr),
                with_straggler(scrape("b:1", 1, 30, 0.001, 0.02, 0.01, 0.001), 1, 0.02, nullptr)},
               12.0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0], "rank 1 (h1) ok again (was STRAGGLER)");
}

}  // namespace
}  // namespace hpct::metrics
