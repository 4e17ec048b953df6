// Parameter servers end to end, as users run them: `hpctrain launch
// --servers K -- hpctrain train --sync ps|ps-async` on real Fashion-MNIST
// shards (the test split, packed once). Sync PS ends where allreduce ends
// (within rounding); async with a staleness bound learns and ends with the
// same parameters on every worker; a killed server fails the job within a
// bound, named; --max-restarts resumes from the last checkpoint and ends
// bit-identical to an uninterrupted run; a killed async worker fails the job,
// named, without a hang. Short runs (--max-steps) keep this file to a few
// minutes on 2 cores.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_summary_run.h"
#include "fashion_shards.h"

namespace {

namespace fs = std::filesystem;
using hpct::test::CliRun;
using Clock = std::chrono::steady_clock;

CliRun run(const std::string& args) { return hpct::test::run_hpctrain(args); }

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

class PsCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shards_ = std::make_unique<hpct::test::FashionShards>(hpct::test::FashionShards::in_temp_dir("hpct-ps-test", 2500));
    dir_ = shards_->dir();
    ASSERT_TRUE(shards_->ok()) << shards_->output();
  }
  static void TearDownTestSuite() { shards_.reset(); }

  // 2 workers (and `servers` servers), the cnn, 7500 training samples.
  static std::string train(int servers, const std::string& extra, int epochs = 1) {
    std::string launch = "launch -np 2 --env PS_CLI_TEST_MARK=" + dir_;
    if (servers > 0) launch += " --servers " + std::to_string(servers);
    return launch + " -- " + HPCT_BINARY + " train --model cnn --data '" + dir_ +
           "/fm-{000000..000002}.tar' --val " + dir_ + "/fm-000003.tar --epochs " + std::to_string(epochs) + " --batch 32 --lr 0.05 " +
           "--threads 1 --seed 7 --log-every 10 --progress lines " + extra;
  }

  // The pid of this test's own job process whose environment holds every
  // one of vars (the job gets PS_CLI_TEST_MARK=<dir> through launch --env),
  // or -1.
  static pid_t find_job_process(const std::vector<std::string>& vars) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      std::string env = slurp(e.path() / "environ");
      std::string cmd = slurp(e.path() / "cmdline");
      if (cmd.rfind("launch-rank") != std::string::npos) continue;  // the wrapper, not the program
      std::vector<std::string> items;
      std::string item;
      for (char c : env) {
        if (c == '\0') {
          items.push_back(item);
          item.clear();
        } else {
          item += c;
        }
      }
      auto has = [&](const std::string& v) { return std::find(items.begin(), items.end(), v) != items.end(); };
      if (!has("PS_CLI_TEST_MARK=" + dir_)) continue;
      if (std::all_of(vars.begin(), vars.end(), has)) return static_cast<pid_t>(std::stol(name));
    }
    return -1;
  }

  // Runs args (a launch command line) in the background; once ready()
  // holds, SIGKILLs the job's process with the environment vars.
  static CliRun run_and_kill(const std::string& args, const std::vector<std::string>& vars,
                             const std::function<bool()>& ready, double* kill_to_end_s, bool* killed,
                             int signal = SIGKILL) {
    CliRun result;
    std::atomic<bool> done{false};
    std::thread t([&] {
      result = run(args);
      done = true;
    });
    *killed = false;
    const auto give_up = Clock::now() + std::chrono::seconds(240);
    Clock::time_point killed_at{};
    while (!done && Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (*killed || !ready()) continue;
      pid_t pid = find_job_process(vars);
      if (pid <= 0) continue;
      ::kill(pid, signal);
      killed_at = Clock::now();
      *killed = true;
    }
    t.join();
    *kill_to_end_s = *killed ? std::chrono::duration<double>(Clock::now() - killed_at).count() : -1;
    return result;
  }

  static std::unique_ptr<hpct::test::FashionShards> shards_;  // 4 shards of 2500 (the test split)
  static std::string dir_;
};
std::unique_ptr<hpct::test::FashionShards> PsCli::shards_;
std::string PsCli::dir_;

TEST_F(PsCli, SyncPsEndsWhereAllreduceEndsWithinRounding) {
  CliRun ar = run(train(0, "--max-steps 30"));
  ASSERT_EQ(ar.exit_code, 0) << ar.out;
  CliRun ps = run(train(2, "--max-steps 30 --sync ps"));
  ASSERT_EQ(ps.exit_code, 0) << ps.out;
  ASSERT_TRUE(ps.summary.is_object()) << ps.out;
  EXPECT_EQ(ps.summary["steps"], 30);
  EXPECT_TRUE(ps.summary["params_identical_across_ranks"].get<bool>()) << ps.out;
  // The two servers were started and served: their closing lines.
  EXPECT_NE(ps.out.find("parameter server 0 on"), std::string::npos) << ps.out;
  EXPECT_NE(ps.out.find("parameter server 1 on"), std::string::npos) << ps.out;
  // Sums in another order: not the same bits, but the same model within
  // float rounding after 30 steps.
  const double a = ar.summary["val_loss"].get<double>(), p = ps.summary["val_loss"].get<double>();
  EXPECT_NEAR(a, p, 2e-3 * std::max(1.0, a)) << ar.out << ps.out;
  EXPECT_NEAR(ar.summary["val_accuracy"].get<double>(), ps.summary["val_accuracy"].get<double>(), 0.01);
}

TEST_F(PsCli, SyncPsWithoutServersIsRefusedWithTheFix) {
  CliRun r = run(train(0, "--max-steps 2 --sync ps"));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("--servers"), std::string::npos) << r.out;
}

TEST_F(PsCli, AsyncWithStalenessLearnsAndEndsIdenticalOnEveryWorker) {
  CliRun r = run(train(2, "--max-steps 60 --sync ps-async --staleness 2"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.summary["steps"], 60);
  // After the epoch's turn every worker holds the servers' parameters.
  EXPECT_TRUE(r.summary["params_identical_across_ranks"].get<bool>()) << r.out;
  EXPECT_GT(r.summary["val_accuracy"].get<double>(), 0.5) << r.out;
}

TEST_F(PsCli, KilledServerFailsTheJobNamedAndBounded) {
  fs::path out = fs::path(dir_) / "kill-server";
  double took = 0;
  bool killed = false;
  // HPCT_TIMEOUT_S bounds the workers' own wait; the launcher sees the
  // server die first and stops the job.
  std::string args = train(1, "--sync ps", 50);
  args = std::regex_replace(args, std::regex("^launch "), "launch --output-dir " + out.string() + " ");
  CliRun r = run_and_kill("--set HPCT_TIMEOUT_S=20 " + args, {"HPCT_PS_ROLE=server", "HPCT_PS_SERVER_RANK=0"},
                          [&] { return slurp(out / "rank.0" / "stdout").find("step 10 ") != std::string::npos; },
                          &took, &killed);
  ASSERT_TRUE(killed) << r.out;
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_LT(took, 20.0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("parameter server 0 on host [^ ]+ was killed by signal 9")))
      << r.out;
}

TEST_F(PsCli, FrozenServerTimesOutOnTheWorkersNamingIt) {
  // SIGSTOP: the launcher sees nothing die; the workers' own bound
  // (HPCT_TIMEOUT_S=5) must end the step, naming the server and its host.
  fs::path out = fs::path(dir_) / "freeze-server";
  double took = 0;
  bool stopped = false;
  std::string args = train(1, "--sync ps", 50);
  args = std::regex_replace(args, std::regex("^launch "), "launch --output-dir " + out.string() + " ");
  CliRun r = run_and_kill("--set HPCT_TIMEOUT_S=5 " + args, {"HPCT_PS_ROLE=server", "HPCT_PS_SERVER_RANK=0"},
                          [&] { return slurp(out / "rank.0" / "stdout").find("step 10 ") != std::string::npos; },
                          &took, &stopped, SIGSTOP);
  ASSERT_TRUE(stopped) << r.out;
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_LT(took, 5.0 + 15.0) << r.out;  // the timeout, then the launcher's stop (grace 3 s)
  EXPECT_TRUE(std::regex_search(r.out, std::regex("parameter server 0 on [^ ]+ \\([0-9.]+:[0-9]+\\) moved no byte")))
      << r.out;
}

TEST_F(PsCli, MaxRestartsResumesWithNewServersBitExact) {
  // Uninterrupted: 40 steps, checkpoints every 10.
  CliRun full = run(train(2, "--sync ps --max-steps 40 --checkpoint-every 10 --checkpoint-dir " + dir_ + "/full"));
  ASSERT_EQ(full.exit_code, 0) << full.out;
  // Killed: server 1 dies after the step-20 checkpoint; the launcher restarts
  // the job (new servers), which resumes from the newest checkpoint.
  fs::path out = fs::path(dir_) / "restart";
  fs::path ckpt = fs::path(dir_) / "restarted";
  double took = 0;
  bool killed = false;
  std::string args = train(2, "--sync ps --max-steps 40 --checkpoint-every 10 --resume auto --checkpoint-dir " +
                                  ckpt.string());
  args = std::regex_replace(args, std::regex("^launch "),
                            "launch --max-restarts 1 --output-dir " + out.string() + " ");
  CliRun r = run_and_kill(args, {"HPCT_PS_ROLE=server", "HPCT_PS_SERVER_RANK=1"},
                          [&] { return fs::exists(ckpt / "ckpt-0000000020.json"); }, &took, &killed);
  ASSERT_TRUE(killed) << r.out;
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("parameter server 1 on host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("restarting the job"), std::string::npos) << r.out;
  EXPECT_GE(r.summary["resumed_from_step"].get<std::int64_t>(), 20) << r.out;
  EXPECT_EQ(r.summary["params_crc32c"], full.summary["params_crc32c"]) << r.out << full.out;
}

TEST_F(PsCli, KilledAsyncWorkerFailsTheJobNamedWithoutHang) {
  fs::path out = fs::path(dir_) / "kill-worker";
  double took = 0;
  bool killed = false;
  std::string args = train(2, "--sync ps-async --staleness 2", 50);
  args = std::regex_replace(args, std::regex("^launch "), "launch --output-dir " + out.string() + " ");
  CliRun r = run_and_kill("--set HPCT_TIMEOUT_S=20 " + args, {"HPCT_PS_ROLE=worker", "HPCT_RANK=1"},
                          [&] { return slurp(out / "rank.0" / "stdout").find("step 10 ") != std::string::npos; },
                          &took, &killed);
  ASSERT_TRUE(killed) << r.out;
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_LT(took, 20.0) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("rank 1 on host [^ ]+ was killed by signal 9"))) << r.out;
}

}  // namespace
