// The straggler rule on made-up timings (no processes), the exchange over a
// real Gloo world of threads, and a whole engine whose rank 2 works 40%
// longer per step than the others.
#include "engine/straggler.h"

#include <gtest/gtest.h>

#include <mutex>
#include <random>
#include <thread>

#include "comm/testing/thread_world.h"
#include "core/config.h"
#include "core/error.h"
#include "engine/engine.h"

namespace hpct::engine {
namespace {

// One interval of `steps` lock-step steps: rank r works work[r] s a step
// (data[r] of it waiting for batches) and every rank's step lasts as long
// as the slowest rank's work plus the collective (comm).
std::vector<StragglerSample> interval(const std::vector<double>& work,
                                      const std::vector<double>& data, int steps = 20,
                                      double comm = 0.005) {
  double step = 0;
  for (double w : work) step = std::max(step, w + comm);
  std::vector<StragglerSample> out;
  for (std::size_t r = 0; r < work.size(); ++r) {
    StragglerSample s;
    s.elapsed_s = steps * step;
    s.blocked_s = steps * (step - work[r]);
    s.waits = steps;
    s.comm_s = steps * comm;
    s.data_s = steps * data[r];
    s.compute_s = steps * (work[r] - data[r]);
    s.steps = steps;
    s.host = "h" + std::to_string(r);
    out.push_back(s);
  }
  return out;
}

// Feeds intervals until a rank is named; returns the seconds it took
// (-1: never, within `limit_s`) and the line.
double seconds_to_name(StragglerDetector& d, const std::vector<double>& work,
                       const std::vector<double>& data, double limit_s, std::string* line) {
  double t = 0;
  while (t < limit_s) {
    auto in = interval(work, data);
    t += in[0].elapsed_s;
    for (const auto& c : d.add(in)) {
      if (c.named) {
        *line = c.line;
        return t;
      }
    }
  }
  return -1;
}

TEST(StragglerRule, NamesARank30PercentSlowerWithItsHostAndCauseWithin30Seconds) {
  StragglerOptions o;  // the defaults: a 20 s window, a 20% margin
  StragglerDetector d(o, 3);
  std::string line;
  // A minute undisturbed: nobody.
  EXPECT_EQ(seconds_to_name(d, {0.070, 0.070, 0.070}, {0.005, 0.005, 0.005}, 60, &line), -1)
      << line;
  // Rank 2's compute becomes 30% longer.
  const double t = seconds_to_name(d, {0.070, 0.070, 0.091}, {0.005, 0.005, 0.005}, 60, &line);
  EXPECT_GT(t, 0);
  EXPECT_LE(t, 30) << line;
  EXPECT_NE(line.find("rank 2 on host h2 is the slowest for the last 2"), std::string::npos)
      << line;
  EXPECT_NE(line.find("% slower than the median, the time goes to compute"), std::string::npos)
      << line;
  ASSERT_TRUE(d.ranks()[2].named);
  EXPECT_FALSE(d.ranks()[0].named || d.ranks()[1].named);
  EXPECT_NEAR(d.ranks()[2].slowdown, 0.30, 0.02);
  // The others waited for it: 21 ms a step.
  EXPECT_GT(d.ranks()[2].late_s, 0);
  EXPECT_GT(d.ranks()[0].waited_s, d.ranks()[2].waited_s);
}

TEST(StragglerRule, SaysDataWhenTheRankWaitsForItsBatches) {
  StragglerDetector d(StragglerOptions{}, 4);
  std::string line;
  EXPECT_GT(seconds_to_name(d, {0.05, 0.08, 0.05, 0.05}, {0.002, 0.032, 0.002, 0.002}, 60, &line),
            0);
  EXPECT_NE(line.find("rank 1 on host h1"), std::string::npos) << line;
  EXPECT_NE(line.find("60% slower than the median, the time goes to data"), std::string::npos)
      << line;
}

TEST(StragglerRule, SaysNetworkWhenItsCollectivesTakeLonger) {
  StragglerDetector d(StragglerOptions{}, 2);
  std::string line;
  bool named = false;
  for (int i = 0; i < 60 && !named; ++i) {
    auto in = interval({0.05, 0.05}, {0.001, 0.001});
    // Rank 1's sends take 20 ms longer a step, outside its blocking waits.
    in[1].comm_s += 20 * 0.02;
    in[1].blocked_s -= 20 * 0.02;
    in[0].blocked_s += 20 * 0.02;
    for (const auto& c : d.add(in)) named = named || (c.named && (line = c.line, true));
  }
  EXPECT_TRUE(named);
  EXPECT_NE(line.find("rank 1 on host h1"), std::string::npos) << line;
  EXPECT_NE(line.find("the time goes to network"), std::string::npos) << line;
}

TEST(StragglerRule, NamesNobodyUnderNoiseNorBelowTheMargin) {
  // Each rank's work varies by up to +-25% from one 2 s interval to the
  // next (a loaded machine), independently: over a 20 s window this
  // averages out, and nobody stays above 20% for 3 evaluations.
  StragglerDetector d(StragglerOptions{}, 3);
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(0.75, 1.25);
  for (int i = 0; i < 3000; ++i) {  // 100 minutes
    for (const auto& c : d.add(interval({0.07 * noise(rng), 0.07 * noise(rng), 0.07 * noise(rng)},
                                        {0.005, 0.005, 0.005})))
      ADD_FAILURE() << c.line;
  }
  // 15% slower, steadily: below the margin.
  for (int i = 0; i < 100; ++i) {
    for (const auto& c : d.add(interval({0.07, 0.0805, 0.07}, {0.005, 0.005, 0.005})))
      ADD_FAILURE() << c.line;
  }
  EXPECT_NEAR(d.ranks()[1].slowdown, 0.15, 0.01);
}

TEST(StragglerRule, ClearsARankThatCaughtUpAndJudgesOnlyWithEnoughWaits) {
  StragglerDetector d(StragglerOptions{}, 2);
  std::string line;
  ASSERT_GT(seconds_to_name(d, {0.05, 0.08}, {0.001, 0.001}, 60, &line), 0);
  bool cleared = false;
  for (int i = 0; i < 30 && !cleared; ++i) {
    for (const auto& c : d.add(interval({0.05, 0.05}, {0.001, 0.001}))) {
      cleared = !c.named;
      line = c.line;
    }
  }
  EXPECT_TRUE(cleared);
  EXPECT_NE(line.find("rank 1 on host h1 is no longer the slowest"), std::string::npos) << line;
  // A job that synchronises rarely (1 wait per 2 s interval: 10 per window)
  // is judged; with fewer waits nothing is said.
  StragglerOptions rare;
  rare.min_waits = 11;
  StragglerDetector quiet(rare, 2);
  for (int i = 0; i < 50; ++i) EXPECT_TRUE(quiet.add(interval({0.05, 2}, {0, 0}, 1)).empty());
}

TEST(StragglerExchange, EveryRankGetsEveryRanksFiguresInRankOrder) {
  comm::testing::run_gloo_world(3, Millis(20000), [](comm::GlooCommunicator& c) {
    StragglerSample mine;
    mine.elapsed_s = 2;
    mine.blocked_s = 0.5 * c.rank();
    mine.steps = 10 + c.rank();
    mine.host = c.rank() == 2 ? std::string(100, 'x') : "10.0.0." + std::to_string(c.rank());
    auto all = exchange_straggler_samples(c, mine);
    ASSERT_EQ(all.size(), 3u);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(all[r].blocked_s, 0.5 * r);
      EXPECT_EQ(all[r].steps, 10 + r);
    }
    EXPECT_EQ(all[1].host, "10.0.0.1");
    EXPECT_EQ(all[2].host, std::string(63, 'x'));  // a long name is cut, not lost
  });
}

// A whole engine: 3 ranks allreduce every step; rank 2's step work is 40%
// longer (a sleep standing for its compute). Rank 0 logs the warning.
TEST(StragglerEngine, RankZeroNamesTheSlowRankWithItsHost) {
  std::mutex mu;
  std::vector<std::string> warnings;
  comm::testing::run_gloo_world(3, Millis(20000), [&](comm::GlooCommunicator& c) {
    EngineOptions o;
    o.cycle_ms = 1;
    o.straggler.window_s = 2;  // exchanges every 0.5 s
    o.host = "host-" + std::to_string(c.rank());
    Logger log(LogLevel::kWarn, "all", c.rank(), [&](const std::string& l) {
      std::lock_guard<std::mutex> lk(mu);
      warnings.push_back(l);
    });
    Engine e(c, o, log);
    const auto work = std::chrono::milliseconds(c.rank() == 2 ? 28 : 20);
    std::vector<float> g(1000, 1.0f);
    const auto end = SteadyClock::now() + std::chrono::seconds(8);
    while (true) {
      std::this_thread::sleep_for(work);
      e.note_work(0, std::chrono::duration<double>(work).count());
      e.allreduce_async("g", {g.data(), comm::DataType::kFloat32, {1000}}, comm::ReduceOp::kSum)
          .wait();
      // Every rank ends at the same step.
      double more = SteadyClock::now() < end ? 1 : 0;
      e.allreduce_async("more", {&more, comm::DataType::kFloat64, {1}}, comm::ReduceOp::kMin)
          .wait();
      if (more == 0) break;
    }
    auto status = e.straggler_status();
    ASSERT_EQ(status.size(), 3u);
    EXPECT_TRUE(status[2].named) << "rank " << c.rank() << " sees rank 2 at " << status[2].slowdown;
    EXPECT_FALSE(status[0].named || status[1].named);
    EXPECT_EQ(status[2].host, "host-2");
    EXPECT_GT(status[2].late_s, 0.5);
  });
  std::string named;
  for (const auto& w : warnings) {
    if (w.find("is the slowest") != std::string::npos) named += w + "\n";
  }
  EXPECT_NE(named.find("rank 2 on host host-2 is the slowest for the last "), std::string::npos)
      << named;
  EXPECT_NE(named.find("the time goes to compute"), std::string::npos) << named;
  EXPECT_EQ(named.find("rank 0 on"), std::string::npos) << named;
}

}  // namespace
}  // namespace hpct::engine

namespace hpct::engine {
namespace {

// Two callers waiting at once block the rank once; a wait across an
// exchange is split between the intervals.
TEST(StragglerMeter, OverlappingWaitsCountOnceAndSplitAtTheExchange) {
  StragglerMeter m;
  const auto t0 = SteadyClock::now();
  auto at = [&](double s) {
    return t0 + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
  };
  m.begin_wait(at(1));
  m.begin_wait(at(1.5));
  m.end_wait(at(2));
  m.end_wait(at(3));  // blocked 1..3: 2 s
  m.begin_wait(at(4));
  auto a = m.take(at(5));  // 1 s of the wait so far
  EXPECT_NEAR(a.blocked_s, 3, 1e-9);
  EXPECT_EQ(a.waits, 3);
  m.end_wait(at(5.5));
  m.add_work(0.1, 0.2);
  auto b = m.take(at(6));
  EXPECT_NEAR(b.blocked_s, 0.5, 1e-9);
  EXPECT_NEAR(b.elapsed_s, 1, 1e-9);
  EXPECT_EQ(b.steps, 1);
  EXPECT_NEAR(b.compute_s, 0.2, 1e-9);
}

}  // namespace
}  // namespace hpct::engine

namespace hpct::engine {
namespace {

// The settings as the registry reads them, and the one-line errors.
TEST(StragglerOptions, FromTheConfigRegistryAndBadValuesNamed) {
  Config c;
  EXPECT_EQ(EngineOptions::from_config(c).straggler.window_s, 20);
  c.set("HPCT_STRAGGLER_WINDOW_S", "0", ConfigSource::kEnv);
  c.set("HPCT_STRAGGLER_MARGIN", "0.3", ConfigSource::kEnv);
  c.set("HPCT_STRAGGLER_MIN_WAITS", "4", ConfigSource::kEnv);
  const auto o = EngineOptions::from_config(c).straggler;
  EXPECT_EQ(o.window_s, 0);
  EXPECT_EQ(o.margin, 0.3);
  EXPECT_EQ(o.min_waits, 4);
  c.set("HPCT_STRAGGLER_WINDOW_S", "-1", ConfigSource::kEnv);
  try {
    EngineOptions::from_config(c);
    ADD_FAILURE() << "a negative window was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HPCT_STRAGGLER_WINDOW_S must be >= 0 (0: off)"),
              std::string::npos)
        << e.what();
  }
  c.set("HPCT_STRAGGLER_WINDOW_S", "20", ConfigSource::kEnv);
  c.set("HPCT_STRAGGLER_MARGIN", "0", ConfigSource::kEnv);
  EXPECT_THROW(EngineOptions::from_config(c), Error);
}

}  // namespace
}  // namespace hpct::engine
