// `hpctrain train --shard N` checkpoints resumed at another world size
// (label integration): 3 ranks train the cnn with Adam under --shard 2 and
// --data-split global (global batch 12) and save sharded checkpoints at
// steps 6 and 12. From the step-6 checkpoint, 2 ranks (batch 6, --shard 2)
// and 4 ranks (batch 3, --shard 3) go on to step 12: every step's loss
// matches the run that never stopped within float rounding (the sums run
// in another order on another world size); 3 ranks match it bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "fashion_shards.h"

namespace {

namespace fs = std::filesystem;

struct TrainRun {
  int exit_code = -1;
  std::string out;
  std::map<std::int64_t, double> loss;  // step -> the job's mean loss
  nlohmann::json summary;
};

TrainRun train(const std::string& data, const std::string& dir, int np, int batch, int shard,
               const std::string& extra) {
  const std::string metrics =
      dir + "/metrics-" + std::to_string(np) + "-" + std::to_string(shard) + ".jsonl";
  auto r = hpct::test::run_shell(
      "timeout 300 " + std::string(HPCT_BINARY) + " launch -np " + std::to_string(np) + " -- " +
      HPCT_BINARY + " train --model cnn --optimizer adam --lr 0.01 --data '" + data +
      "' --epochs 1 --batch " + std::to_string(batch) + " --shard " + std::to_string(shard) +
      " --data-split global --threads 1 --seed 3 --log-every 1 " +
      "--progress lines --max-steps 12 --metrics " + metrics + " " + extra + " 2>&1");
  TrainRun run{r.exit_code, r.out, {}, nullptr};
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.value("type", "") == "step")
      run.loss[j["step"].get<std::int64_t>()] = j["loss"].get<double>();
    if (j.value("type", "") == "summary") run.summary = j;
  }
  return run;
}

TEST(TrainShardResume, SavedAtThreeRanksResumesAtTwoAndFour) {
  auto data = hpct::test::FashionShards::in_temp_dir("hpct-shard-resume", 500);
  ASSERT_TRUE(data.ok()) << data.output();
  const std::string d = data.dir();
  const std::string shards = data.range(0, 2);
  TrainRun ref = train(shards, d, 3, 4, 2, "--checkpoint-every 6 --checkpoint-dir " + d + "/ref");
  ASSERT_EQ(ref.exit_code, 0) << ref.out;
  ASSERT_EQ(ref.loss.size(), 12u) << ref.out;
  const std::string step6 = d + "/ref/sharded-0000000006";
  ASSERT_TRUE(fs::exists(step6 + "/index.json")) << ref.out;
  ASSERT_TRUE(fs::exists(step6 + "/shard-00002-of-00003.bin")) << ref.out;

  // What --shard wrote consolidates into one file for torch.
  auto whole =
      hpct::test::run_shell("timeout 120 " + std::string(HPCT_BINARY) + " checkpoint consolidate " +
                            d + "/ref -o " + d + "/whole.pt 2>&1");
  EXPECT_EQ(whole.exit_code, 0) << whole.out;
  EXPECT_NE(whole.out.find("\"step\":12"), std::string::npos) << whole.out;

  // The same world size: bit for bit.
  TrainRun same = train(shards, d, 3, 4, 2, "--resume " + step6 + " --checkpoint-dir " + d + "/r3");
  ASSERT_EQ(same.exit_code, 0) << same.out;
  EXPECT_EQ(same.summary["resumed_from_step"], 6) << same.out;
  EXPECT_EQ(same.summary["params_crc32c"], ref.summary["params_crc32c"]) << same.out;
  for (std::int64_t s = 7; s <= 12; ++s) EXPECT_EQ(same.loss[s], ref.loss[s]) << "step " << s;

  // 2 and 4 ranks, the same global batch; stage 3 on 4 ranks.
  for (auto [np, batch, shard] : {std::tuple{2, 6, 2}, std::tuple{4, 3, 3}}) {
    TrainRun other =
        train(shards, d, np, batch, shard,
              "--resume " + step6 + " --checkpoint-dir " + d + "/r" + std::to_string(np));
    ASSERT_EQ(other.exit_code, 0) << other.out;
    EXPECT_EQ(other.summary["resumed_from_step"], 6) << other.out;
    EXPECT_NE(other.out.find("written by 3 ranks, loaded by " + std::to_string(np)),
              std::string::npos)
        << other.out;
    ASSERT_EQ(other.loss.size(), 6u) << other.out;
    double worst = 0;
    for (std::int64_t s = 7; s <= 12; ++s) {
      // float32 sums in another order: a few units in the last place per
      // step, which Adam carries into the next steps' parameters.
      EXPECT_NEAR(other.loss[s], ref.loss[s], 1e-5 * std::fabs(ref.loss[s]))
          << np << " ranks, step " << s;
      worst = std::max(worst, std::fabs(other.loss[s] - ref.loss[s]) / std::fabs(ref.loss[s]));
    }
    std::printf(
        "resumed at %d ranks (--shard %d): steps 7-12, largest relative loss difference %.3g\n", np,
        shard, worst);
  }

  // Mid-epoch, a checkpoint of the global split does not resume under the per-rank one.
  auto refused =
      hpct::test::run_shell("timeout 120 " + std::string(HPCT_BINARY) + " launch -np 2 -- " +
                            HPCT_BINARY + " train --model cnn --optimizer adam --data '" + shards +
                            "' --batch 6 --shard 1 --threads 1 --resume " + step6 +
                            " --checkpoint-dir " + d + "/rx 2>&1");
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  EXPECT_NE(refused.out.find("resume with --data-split global"), std::string::npos) << refused.out;
  // Without --shard, --resume auto does not start from scratch beside sharded checkpoints.
  auto whole_resume =
      hpct::test::run_shell("timeout 120 " + std::string(HPCT_BINARY) + " launch -np 2 -- " +
                            HPCT_BINARY + " train --model cnn --data '" + shards +
                            "' --threads 1 --resume auto --checkpoint-dir " + d + "/ref 2>&1");
  EXPECT_NE(whole_resume.exit_code, 0) << whole_resume.out;
  EXPECT_NE(whole_resume.out.find("holds sharded checkpoints (written with --shard)"),
            std::string::npos)
      << whole_resume.out;
}

}  // namespace
