#include "report/run_inputs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "core/error.h"
#include "launch/output.h"

namespace hpct::report {
namespace {

namespace fs = std::filesystem;

// The metrics of a run restarted once by the launcher, as trainer.cc writes them.
const char kMetrics[] =
    R"({"type":"start","model":"cnn","np":2,"restart":0,"step":0,"resumed_from_step":-1,"time":1000.0}
{"type":"step","step":10,"loss":2.0,"samples_per_s":500.0,"time":1010.0}
{"type":"step","step":20,"loss":1.5,"samples_per_s":520.0,"time":1020.0}
{"type":"start","model":"cnn","np":2,"restart":1,"step":10,"resumed_from_step":10,"time":1030.0}
{"type":"step","step":20,"loss":1.4,"samples_per_s":510.0,"time":1040.0}
{"type":"epoch","step":20,"val_loss":1.2,"val_accuracy":0.6,"time":1041.0}
{"type":"elastic","generation":2,"reason":"failure: worker 1","old_size":2,"new_size":1,"rollback_steps":3,"step":17,"time":1035.0}
{"type":"summary","steps":20,"np":2,"time":1042.0}
)";

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  return "(no error)";
}

class RunInputsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("hpct-report-inputs-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name) << text;
  }
  fs::path dir_;
};

TEST_F(RunInputsTest, MetricsLinesBySortAndTheirEvents) {
  RunInputs in;
  read_run_text("m.jsonl", kMetrics, &in);
  EXPECT_EQ(in.starts.size(), 2u);
  EXPECT_EQ(in.steps.size(), 3u);
  EXPECT_EQ(in.epochs.size(), 1u);
  EXPECT_EQ(in.elastic.size(), 1u);
  EXPECT_EQ(in.summaries.size(), 1u);
  ASSERT_EQ(in.events.size(),
            2u);  // the restart and the membership change; the first start is none
  EXPECT_EQ(in.events[0].kind, "restart");
  EXPECT_EQ(in.events[0].step, 10);
  EXPECT_NE(in.events[0].text.find("resumed from step 10"), std::string::npos) << in.events[0].text;
  EXPECT_EQ(in.events[1].kind, "membership");
  EXPECT_NE(in.events[1].text.find("2 -> 1 ranks (failure: worker 1), 3 steps rolled back"),
            std::string::npos)
      << in.events[1].text;
}

TEST_F(RunInputsTest, BenchTrainLinesAmongOtherOutput) {
  RunInputs in;
  read_run_text(
      "bench.out",
      "hpctrain: starting\n"
      R"({"bench":"train","impl":"hpctrain","model":"cnn","np":1,"samples_per_s":900.5,"scaling_efficiency":1.0})"
      "\n"
      R"({"bench":"train","impl":"hpctrain","model":"cnn","np":2,"samples_per_s":1500,"scaling_efficiency":0.83})"
      "\n",
      &in);
  ASSERT_EQ(in.bench_train.size(), 2u);
  EXPECT_EQ(in.bench_train[1]["np"], 2);
  EXPECT_TRUE(in.steps.empty());
}

TEST_F(RunInputsTest, BadInputIsOneLineNamingTheProblemAndTheFix) {
  RunInputs in;
  std::string e = error_of([&] { read_run_input((dir_ / "nope.jsonl").string(), &in); });
  EXPECT_NE(e.find("nope.jsonl: no such file or directory"), std::string::npos) << e;
  EXPECT_NE(e.find("train --metrics"), std::string::npos) << e;
  write("empty.jsonl", "");
  e = error_of([&] { read_run_input((dir_ / "empty.jsonl").string(), &in); });
  EXPECT_NE(e.find("empty.jsonl is empty"), std::string::npos) << e;
  write("notes.txt", "hello world\nsecond line\n");
  e = error_of([&] { read_run_input((dir_ / "notes.txt").string(), &in); });
  EXPECT_NE(e.find("notes.txt: unknown format (first line: 'hello world')"), std::string::npos)
      << e;
  EXPECT_NE(e.find("bench train"), std::string::npos) << e;
  write("other.jsonl", "{\"a\":1}\n");
  e = error_of([&] { read_run_input((dir_ / "other.jsonl").string(), &in); });
  EXPECT_NE(e.find("unknown format"), std::string::npos) << e;
  fs::create_directories(dir_ / "blank");
  e = error_of([&] { read_run_input((dir_ / "blank").string(), &in); });
  EXPECT_NE(e.find("blank: no metrics file"), std::string::npos) << e;
  EXPECT_NE(e.find("--metrics"), std::string::npos) << e;
  for (const std::string& line : {e}) EXPECT_EQ(line.find('\n'), std::string::npos) << line;
}

// The time of day as the log writes it (UTC), e.g. 12:00:01.123.
std::string clock_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::snprintf(b, sizeof b, "%02d:%02d:%02d.000", tm.tm_hour, tm.tm_min, tm.tm_sec);
  return b;
}

// A run directory as launch --output-dir and train leave it: the launcher's
// own log (written by the real OutputMux), rank logs, metrics, a trace and
// checkpoints.
TEST_F(RunInputsTest, RunDirectoryEveryKindAndEventsPlacedOnSteps) {
  {
    int devnull = ::open("/dev/null", O_WRONLY);
    launch::OutputMux mux(launch::OutputPrefix::kRank, {"h", "h"}, dir_.string(), devnull, devnull);
    mux.rank_line(0, false, "epoch 1 step 10 loss 2.0");
    mux.rank_line(1, false, "fault: worker 1 ends itself at step 12 (kill)");
    mux.rank_line(0, true,
                  "[hpctrain rank 0 " + clock_now() +
                      " W straggler] rank 1 on host h is the slowest "
                      "for the last 20 s: 31% slower than the median, the time goes to compute");
    mux.launcher_line(
        "rank 1 on host h was killed by signal 9 (Killed); stopped the other ranks in 5 ms");
    mux.launcher_line("restarting the job (restart 1 of 1); ranks see HPCT_RESTART=1");
    mux.launcher_line("parameter server 0 on host h was killed by signal 9");
    mux.launcher_line("an unrelated line");
    ::close(devnull);
  }
  write("metrics.jsonl", kMetrics);
  write("timeline.json", "{\"traceEvents\":[\n{\"name\":\"x\"}]}");
  write("ckpt/ckpt-0000000010.json", "{}");
  write("ckpt/ckpt-0000000010.pt", "binary");
  write("README.md", "# not a run file\n");
  RunInputs in;
  read_run_input(dir_.string(), &in);
  EXPECT_EQ(in.steps.size(), 3u);
  ASSERT_EQ(in.traces.size(), 1u);
  EXPECT_EQ(fs::path(in.traces[0]).filename(), "timeline.json");
  std::map<std::string, int> kinds;
  for (const auto& e : in.events) ++kinds[e.kind];
  EXPECT_EQ(kinds["checkpoint"], 1);
  EXPECT_EQ(kinds["fault"], 3);    // the rank's own line and the launcher's two
  EXPECT_EQ(kinds["restart"], 2);  // the launcher's line and the restarted run's start line
  EXPECT_EQ(kinds["membership"], 1);
  EXPECT_EQ(kinds["straggler"], 1);
  // The launcher's lines have times of now, after every metrics line: they
  // fall on the last step known.
  place_events(&in);
  for (const auto& e : in.events) {
    EXPECT_TRUE(std::isfinite(e.step)) << e.kind << ": " << e.text;
    if (e.source.find("launcher.log") != std::string::npos) {
      EXPECT_EQ(e.step, 20) << e.text;
    }
    if (e.kind == "straggler") {
      // Logged now, after every metrics line: the last step known.
      EXPECT_EQ(e.step, 20) << e.text;
      EXPECT_EQ(e.text.rfind("rank 1 on host h is the slowest for the last 20 s", 0), 0u) << e.text;
    }
    if (e.kind == "checkpoint") {
      EXPECT_EQ(e.step, 10);
    }
    if (e.text.find("worker 1 ends itself") != std::string::npos) {
      EXPECT_EQ(e.step, 12);
    }
  }
}

TEST_F(RunInputsTest, EventTimesMapToTheStepOfTheirMoment) {
  RunInputs in;
  read_run_text("m.jsonl", kMetrics, &in);
  read_run_text("launcher.log",
                "1015.5 restarting the job (restart 1 of 1)\n999 job failed; exit code 9\n", &in);
  place_events(&in);
  ASSERT_EQ(in.events.size(), 4u);
  EXPECT_EQ(in.events[2].kind, "restart");
  EXPECT_EQ(in.events[2].step, 10);  // the step line at 1010 is the last before 1015.5
  EXPECT_EQ(in.events[3].kind, "fault");
  EXPECT_EQ(in.events[3].step, 0);  // before every line: the first line's step
}

}  // namespace
}  // namespace hpct::report
