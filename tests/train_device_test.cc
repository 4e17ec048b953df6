// `hpctrain train --device/--amp` as users run it, on any machine (label
// integration): without a GPU, --device cuda ends within a second with one
// line naming the fix; --amp bf16 and fp16 train on the CPU (autocast for
// the CPU, fp16 with loss scaling), so the AMP path is tested where CI runs.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "cli_summary_run.h"
#include "fashion_shards.h"

namespace {

bool host_has_gpu() { return hpct::test::run_shell("timeout 10 nvidia-smi -L >/dev/null 2>&1").exit_code == 0; }

TEST(TrainDevice, CudaWithoutAGpuFailsWithinASecondInOneLine) {
  if (host_has_gpu()) GTEST_SKIP() << "this host has a GPU: the no-GPU message cannot show";
  // No --data shards exist: the GPU check must come first. hpctrain checks
  // before it execs hpctrain-torch (whose start, loading libtorch_cpu, is
  // 0.3 s on a quiet 2-core machine and over 1 s on a loaded one).
  const auto r = hpct::test::run_shell(std::string("timeout 20 ") + HPCT_BINARY +
                                       " train --device cuda --model cnn --data /nonexistent/x.tar 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;  // InvalidArgument's exit code
  EXPECT_LT(r.seconds, 1.0) << r.out;
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "more than one line: " << r.out;
  EXPECT_NE(r.out.find("--device cuda:0: no GPU found ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("run on a host with an NVIDIA GPU and driver, or use --device cpu"), std::string::npos)
      << r.out;
}

TEST(TrainDevice, BadDeviceAndAmpAreOneLine) {
  auto r = hpct::test::run_shell(std::string("timeout 20 ") + HPCT_BINARY +
                                 " train --device tpu --data /nonexistent/x.tar 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--device tpu: choose cpu, cuda or cuda:N"), std::string::npos) << r.out;
  r = hpct::test::run_shell(std::string("timeout 20 ") + HPCT_BINARY +
                            " train --amp fp8 --data /nonexistent/x.tar 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--amp fp8: choose bf16 or fp16"), std::string::npos) << r.out;
}

class TrainAmpCpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shards_ = std::make_unique<hpct::test::FashionShards>(
        hpct::test::FashionShards::in_temp_dir("hpct-amp-test", 1000));
    ASSERT_TRUE(shards_->ok()) << shards_->output();
  }
  static void TearDownTestSuite() { shards_.reset(); }
  static hpct::test::CliRun train(const std::string& extra) {
    // The CNN: autocast's bf16/fp16 matrix products have no fast kernel on
    // a CPU without AVX-512 BF16/FP16 (the MLP's 4096x4096 layers take 100x
    // their float32 time there); its convolutions go through oneDNN.
    return hpct::test::run_hpctrain("train --model cnn --data '" + shards_->range(0, 1) + "' --val " +
                                    shards_->shard(2) + " --batch 32 --lr 0.05 --threads 1 --seed 3 " +
                                    "--max-steps 40 --log-every 20 --progress lines " + extra);
  }
  static std::unique_ptr<hpct::test::FashionShards> shards_;
};
std::unique_ptr<hpct::test::FashionShards> TrainAmpCpu::shards_;

TEST_F(TrainAmpCpu, Bf16AndFp16TrainOnTheCpu) {
  const auto plain = train("");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_EQ(plain.summary["amp"], "none");
  EXPECT_EQ(plain.summary["device"], "cpu");
  for (const char* amp : {"bf16", "fp16"}) {
    const auto r = train(std::string("--amp ") + amp);
    ASSERT_EQ(r.exit_code, 0) << amp << ": " << r.out;
    EXPECT_EQ(r.summary["amp"], amp);
    EXPECT_EQ(r.summary["steps"], 40);
    const double loss = r.summary["train_loss"].get<double>();
    EXPECT_TRUE(std::isfinite(loss) && loss < 2.0) << amp << " loss " << loss;
    // Lower precision, same steps: close to float32's accuracy (40 steps on
    // 2000 images; the GPU bound of 0.5 points is for the device check's
    // longer runs).
    EXPECT_NEAR(r.summary["val_accuracy"].get<double>(), plain.summary["val_accuracy"].get<double>(), 0.05)
        << amp;
    if (std::string(amp) == "fp16") {
      EXPECT_TRUE(r.summary.contains("loss_scale")) << r.out;
    } else {
      EXPECT_FALSE(r.summary.contains("loss_scale"));
    }
  }
}

}  // namespace
