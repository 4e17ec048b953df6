// `hpctrain train` as users run it, on real Fashion-MNIST shards (the test
// split, packed once): 2 ranks under `hpctrain launch` end with identical
// parameters; a resumed run ends bit-identical to an uninterrupted one; a
// bit-flipped newest checkpoint is skipped for the previous one. Short runs
// (--max-steps) keep the whole file under a minute or two on 2 cores.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_summary_run.h"
#include "fashion_shards.h"
#include "rank_process.h"

namespace {

namespace fs = std::filesystem;

using hpct::test::CliRun;
CliRun run(const std::string& args) { return hpct::test::run_hpctrain(args); }

class TrainCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shards_ = std::make_unique<hpct::test::FashionShards>(hpct::test::FashionShards::in_temp_dir("hpct-train-test", 2500));
    dir_ = shards_->dir();
    ASSERT_TRUE(shards_->ok()) << shards_->output();
  }
  static void TearDownTestSuite() { shards_.reset(); }

  // 2 ranks, the cnn, 7500 training samples, 2500 for validation.
  static std::string train(const std::string& ckpt, const std::string& extra) {
    return std::string("launch -np 2 -- ") + HPCT_BINARY + " train --model cnn --data '" + dir_ +
           "/fm-{000000..000002}.tar' --val " + dir_ + "/fm-000003.tar --epochs 1 --batch 32 --lr 0.05 " +
           "--threads 1 --seed 7 --log-every 10 --progress lines --checkpoint-dir " + dir_ + "/" + ckpt +
           " " + extra;
  }

  // The job of train(ckpt, extra) under launch --max-restarts 1, with rank 1
  // SIGKILLed (once, within 240 s) as soon as the step-10 checkpoint exists in
  // ckpt: the launcher restarts it and it resumes by itself (--resume auto).
  static CliRun run_killed_after_step_10(const std::string& ckpt, const std::string& extra) {
    std::thread killer([&] {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
      while (std::chrono::steady_clock::now() < deadline) {
        if (fs::exists(dir_ + "/" + ckpt + "/ckpt-0000000010.json")) {
          if (pid_t pid = hpct::test::find_train_rank(dir_ + "/" + ckpt, 1)) {
            ::kill(pid, SIGKILL);
            return;
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    std::string args = train(ckpt, extra);
    args.replace(0, std::string("launch -np 2").size(), "launch -np 2 --max-restarts 1");
    CliRun killed = run(args);
    killer.join();
    return killed;
  }

  static std::unique_ptr<hpct::test::FashionShards> shards_;  // 4 shards of 2500 (the test split)
  static std::string dir_;
};
std::unique_ptr<hpct::test::FashionShards> TrainCli::shards_;
std::string TrainCli::dir_;

TEST_F(TrainCli, TwoRanksEndIdenticalAndResumeIsBitExact) {
  CliRun full = run(train("a", "--max-steps 40 --checkpoint-every 20 --metrics " + dir_ + "/a.jsonl"));
  ASSERT_EQ(full.exit_code, 0) << full.out;
  ASSERT_TRUE(full.summary.is_object()) << full.out;
  EXPECT_TRUE(full.summary["params_identical_across_ranks"].get<bool>()) << full.out;
  EXPECT_EQ(full.summary["steps"], 40);
  EXPECT_EQ(full.summary["np"], 2);
  EXPECT_GT(full.summary["val_accuracy"].get<double>(), 0.5) << full.out;  // 40 steps learn a lot
  // Metrics: step lines name the slowest rank and split the step's time.
  std::ifstream m(dir_ + "/a.jsonl");
  std::string line;
  int steps = 0;
  while (std::getline(m, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] != "step") continue;
    ++steps;
    for (const char* k : {"loss", "lr", "samples_per_s", "data_wait_ms", "forward_backward_ms",
                          "sync_wait_ms", "optimizer_ms", "slowest_rank"}) {
      EXPECT_TRUE(j.contains(k)) << k << " in " << line;
    }
  }
  EXPECT_EQ(steps, 4);

  // Resume from the step-20 checkpoint: the same 20 steps again give the
  // same bits.
  CliRun resumed = run(train("a", "--max-steps 40 --checkpoint-every 20 --resume " + dir_ +
                                      "/a/ckpt-0000000020.pt"));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_EQ(resumed.summary["resumed_from_step"], 20) << resumed.out;
  EXPECT_EQ(resumed.summary["params_crc32c"], full.summary["params_crc32c"]) << resumed.out;

  // A job requeued after its last checkpoint (step 40 of --max-steps 40)
  // resumes, trains no further step and reports the same parameters.
  CliRun again = run(train("a", "--max-steps 40 --checkpoint-every 20 --resume auto"));
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_EQ(again.summary["resumed_from_step"], 40) << again.out;
  EXPECT_EQ(again.summary["steps"], 40) << again.out;
  EXPECT_NE(again.out.find("nothing left to train"), std::string::npos) << again.out;
  EXPECT_EQ(again.summary["params_crc32c"], full.summary["params_crc32c"]) << again.out;
}

// Rank 1 SIGKILLed after the first checkpoint: launch restarts the job, it
// resumes by itself (--resume auto) and ends with the same parameters as
// the uninterrupted run of the first test's settings.
TEST_F(TrainCli, KilledRankResumesUnderLaunchAndEndsBitExact) {
  CliRun full = run(train("c-full", "--max-steps 40"));
  ASSERT_EQ(full.exit_code, 0) << full.out;
  CliRun killed = run_killed_after_step_10("c", "--max-steps 40 --checkpoint-every 10 --resume auto");
  ASSERT_EQ(killed.exit_code, 0) << killed.out;
  EXPECT_NE(killed.out.find("resumed from"), std::string::npos) << killed.out;
  EXPECT_GE(killed.summary["resumed_from_step"].get<int>(), 10) << killed.out;
  EXPECT_LT(killed.summary["resumed_from_step"].get<int>(), 40) << killed.out;
  EXPECT_EQ(killed.summary["params_crc32c"], full.summary["params_crc32c"]) << killed.out;
}

// Lossy compression keeps every rank's residuals (and powersgd's Q) in the
// checkpoint: with compression from step 5, rank 1 SIGKILLed after the
// step-10 checkpoint resumes under launch and ends with the parameters of
// an uninterrupted run, identical on both ranks.
TEST_F(TrainCli, LossyCompressionResumesBitExactAfterAKill) {
  for (const std::string mode : {"powersgd:4", "int8"}) {
    const std::string tag = mode == "int8" ? "l-int8" : "l-psgd";
    const std::string lossy = "--compression " + mode + " --compression-start-step 5 --max-steps 30";
    CliRun full = run(train(tag + "-full", lossy));
    ASSERT_EQ(full.exit_code, 0) << full.out;
    EXPECT_EQ(full.summary["compression"], mode) << full.out;
    EXPECT_TRUE(full.summary["params_identical_across_ranks"].get<bool>()) << full.out;
    EXPECT_GT(full.summary["val_accuracy"].get<double>(), 0.3) << full.out;  // it learns (chance: 0.1)
    CliRun killed = run_killed_after_step_10(tag, lossy + " --checkpoint-every 10 --resume auto");
    ASSERT_EQ(killed.exit_code, 0) << killed.out;
    EXPECT_NE(killed.out.find("resumed from"), std::string::npos) << killed.out;
    EXPECT_GE(killed.summary["resumed_from_step"].get<int>(), 10) << killed.out;
    EXPECT_LT(killed.summary["resumed_from_step"].get<int>(), 30) << killed.out;
    EXPECT_EQ(killed.summary["params_crc32c"], full.summary["params_crc32c"]) << mode << "\n" << killed.out;
    EXPECT_TRUE(killed.summary["params_identical_across_ranks"].get<bool>()) << killed.out;
  }
  // A checkpoint with a lossy state is not resumed without it.
  CliRun other = run(train("l-int8", "--compression none --max-steps 40 --resume auto"));
  EXPECT_NE(other.exit_code, 0) << other.out;
  EXPECT_NE(other.out.find("resume with the same --compression"), std::string::npos) << other.out;
}

TEST_F(TrainCli, BitFlippedNewestCheckpointIsSkipped) {
  CliRun first = run(train("b", "--max-steps 20 --checkpoint-every 10"));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  // Checkpoints at steps 10 and 20 (the last one where the run stopped).
  std::string newest = dir_ + "/b/ckpt-0000000020.pt";
  ASSERT_TRUE(fs::exists(newest)) << first.out;
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(1000);
    char c;
    f.read(&c, 1);
    c ^= 0x04;
    f.seekp(1000);
    f.write(&c, 1);
  }
  CliRun again = run(train("b", "--max-steps 30 --resume auto"));
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_NE(again.out.find("skipping damaged checkpoint"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("ckpt-0000000020.pt: CRC-32C"), std::string::npos) << again.out;
  EXPECT_EQ(again.summary["resumed_from_step"], 10) << again.out;
  EXPECT_EQ(again.summary["steps"], 30);
  EXPECT_TRUE(again.summary["params_identical_across_ranks"].get<bool>());

  // Truncated too: the newest (step 30, written at the end of the second
  // run) and the still bit-flipped step 20 are both skipped for step 10.
  fs::resize_file(dir_ + "/b/ckpt-0000000030.pt", 100);
  CliRun third = run(train("b", "--max-steps 30 --resume auto"));
  ASSERT_EQ(third.exit_code, 0) << third.out;
  EXPECT_NE(third.out.find("ckpt-0000000030.pt: 100 bytes, manifest says"), std::string::npos) << third.out;
  EXPECT_NE(third.out.find("ckpt-0000000020.pt: CRC-32C"), std::string::npos) << third.out;
  EXPECT_EQ(third.summary["resumed_from_step"], 10) << third.out;
  EXPECT_EQ(third.summary["params_crc32c"], again.summary["params_crc32c"]) << third.out;
}

// bench train streaming real shards through the Loader on 2 ranks: the
// JSON line says so, and the model learned something in 40 steps.
TEST_F(TrainCli, BenchTrainReadsShards) {
  CliRun r = run("bench train --model mlp --np 2 --steps 40 --warmup 2 --batch 32 --data '" + dir_ +
                 "/fm-{000000..000002}.tar'");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  auto pos = r.out.find("{\"");
  ASSERT_NE(pos, std::string::npos) << r.out;
  auto j = nlohmann::json::parse(r.out.substr(pos, r.out.find('\n', pos) - pos));
  EXPECT_EQ(j["data"], "shards");
  EXPECT_EQ(j["np"], 2);
  EXPECT_GT(j["samples_per_s"].get<double>(), 0.0);
  EXPECT_LT(j["final_loss"].get<double>(), 1.5) << "10 classes start near ln 10 = 2.3";
  CliRun both = run("bench train --model mlp --np 1 --steps 1 --synthetic --data '" + dir_ + "/fm-000000.tar'");
  EXPECT_EQ(both.exit_code, 2) << both.out;
  EXPECT_NE(both.out.find("exclude each other"), std::string::npos) << both.out;
}

}  // namespace

namespace {

// bench train over a list of rank counts: the jobs take turns (4 timed
// steps each, 2 rounds); one JSON line each with its scaling efficiency,
// every round's figures, the step's time split, the --contention twins,
// and the SVG plot.
TEST(BenchTrainCli, RankListGivesEfficiencyAndPlot) {
  std::string svg = (fs::temp_directory_path() / ("hpct-bench-train-" + std::to_string(::getpid()) + ".svg")).string();
  CliRun r = run("bench train --model cnn --synthetic --np 1,2 --steps 8 --phase-steps 4 --warmup 1 --batch 16 "
                 "--contention --plot " + svg);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<nlohmann::json> runs;
  while (std::getline(lines, line)) {
    if (line.rfind("{\"", 0) == 0) runs.push_back(nlohmann::json::parse(line));
  }
  ASSERT_EQ(runs.size(), 2u) << r.out;
  EXPECT_EQ(runs[0]["np"], 1);
  EXPECT_EQ(runs[1]["np"], 2);
  EXPECT_DOUBLE_EQ(runs[0]["scaling_efficiency"].get<double>(), 1.0);
  EXPECT_GT(runs[1]["scaling_efficiency"].get<double>(), 0.0);
  for (const auto& j : runs) {
    EXPECT_EQ(j["rounds"], 2) << j;
    ASSERT_EQ(j["samples_per_s_rounds"].size(), 2u) << j;
    ASSERT_EQ(j["scaling_efficiency_rounds"].size(), 2u) << j;
    for (const auto& v : j["samples_per_s_rounds"]) EXPECT_GT(v.get<double>(), 0.0) << j;
    // The first step of each turn (after a pause) is not timed.
    EXPECT_EQ(j["timed_steps_per_rank"], 6) << j;
    // The slowest rank's step, split into its parts: they add up to it.
    const auto& split = j["split_ms_slowest"];
    double parts = 0;
    for (const char* part : {"data", "compute", "sync", "optimizer"}) {
      ASSERT_TRUE(split.contains(part)) << j;
      EXPECT_GE(split[part].get<double>(), 0.0) << part;
      parts += split[part].get<double>();
    }
    EXPECT_GT(split["compute"].get<double>(), 0.0) << j;
    EXPECT_LE(parts, j["step_ms"].get<double>() * 1.0001) << j;
    EXPECT_GE(parts, j["step_ms"].get<double>() * 0.9) << j;
  }
  // --contention: the 2 ranks were also timed alone side by side and in
  // lockstep without gradients.
  EXPECT_FALSE(runs[0].contains("sync_efficiency")) << runs[0];
  EXPECT_GT(runs[1]["independent_samples_per_s"].get<double>(), 0.0) << runs[1];
  EXPECT_GT(runs[1]["sync_efficiency"].get<double>(), 0.0) << runs[1];
  EXPECT_GT(runs[1]["lockstep_samples_per_s"].get<double>(), 0.0) << runs[1];
  EXPECT_GT(runs[1]["gradient_sync_efficiency"].get<double>(), 0.0) << runs[1];
  EXPECT_EQ(runs[1]["sync_efficiency_rounds"].size(), 2u) << runs[1];
  std::ifstream f(svg);
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("<svg"), std::string::npos);
  EXPECT_NE(text.find("<polyline"), std::string::npos);
  fs::remove(svg);
}

}  // namespace
