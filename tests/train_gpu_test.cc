// Training on a GPU (label gpu; every test skips with "no GPU" where the
// CUDA runtime finds none; scripts/device-check.sh runs them on a GPU
// machine): torch's CUDA library loaded at run time, the loader's pinned
// batches copied ahead to the device, bf16 and fp16 autocast, the CUDA
// plugin (libhpctrain_cuda.so: one rank's gradients through NCCL on the
// engine's stream, two ranks sharing one GPU staged by the engine through
// pinned host memory, ending identical), and a checkpoint written on the GPU
// resumed on the CPU and back.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>

#include "cli_summary_run.h"
#include "data/loader.h"
#include "fashion_shards.h"
#include "torch/context.h"
#include "train/device.h"

namespace {

namespace fs = std::filesystem;

#define SKIP_WITHOUT_GPU()                                                     \
  do {                                                                         \
    if (hpct::train::probe_gpus().count < 1) GTEST_SKIP() << "no GPU";         \
  } while (0)

class TrainGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (hpct::train::probe_gpus().count < 1) return;
    shards_ = std::make_unique<hpct::test::FashionShards>(
        hpct::test::FashionShards::in_temp_dir("hpct-gpu-test", 2500));
  }
  static void TearDownTestSuite() { shards_.reset(); }
  void SetUp() override {
    SKIP_WITHOUT_GPU();
    ASSERT_TRUE(shards_ && shards_->ok()) << (shards_ ? shards_->output() : "");
  }
  static std::string train_args(const std::string& extra) {
    return "train --model cnn --data '" + shards_->range(0, 2) + "' --val " + shards_->shard(3) +
           " --batch 64 --lr 0.05 --threads 1 --seed 5 --log-every 20 --progress lines " + extra;
  }
  static std::unique_ptr<hpct::test::FashionShards> shards_;
};
std::unique_ptr<hpct::test::FashionShards> TrainGpu::shards_;

TEST_F(TrainGpu, LoaderHandsOutPinnedBatchesOnTheDevice) {
  hpct::train::use_device(torch::Device(torch::kCUDA, 0));
  hpct::data::LoaderOptions lo;
  lo.shards = {shards_->shard(0)};
  lo.batch_size = 32;
  lo.normalize = true;
  lo.threads = 2;
  lo.pin_memory = true;
  lo.device = c10::Device(c10::kCUDA, 0);
  hpct::data::Loader on_gpu(lo);
  hpct::data::LoaderOptions host = lo;
  host.pin_memory = false;
  host.device = c10::Device(c10::kCPU);
  hpct::data::Loader on_cpu(host);
  hpct::data::Batch a, b;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(on_gpu.next(&a));
    ASSERT_TRUE(on_cpu.next(&b));
    EXPECT_TRUE(a.images.is_cuda());
    EXPECT_TRUE(a.labels.is_cuda());
    EXPECT_TRUE(torch::equal(a.images.cpu(), b.images));
    EXPECT_TRUE(torch::equal(a.labels.cpu(), b.labels));
    EXPECT_EQ(a.max_label, b.labels.max().item<std::int64_t>());
  }
  // Copying ahead does not count as delivered: the position is exact.
  EXPECT_EQ(on_gpu.save_state(), on_cpu.save_state());
}

TEST_F(TrainGpu, OneRankBf16AndFp16Train) {
  for (const char* amp : {"none", "bf16", "fp16"}) {
    const auto r = hpct::test::run_hpctrain(train_args(std::string("--device cuda --max-steps 60 --amp ") + amp));
    ASSERT_EQ(r.exit_code, 0) << amp << ": " << r.out;
    EXPECT_EQ(r.summary["device"], "cuda");
    EXPECT_TRUE(std::isfinite(r.summary["train_loss"].get<double>())) << r.out;
    EXPECT_GT(r.summary["val_accuracy"].get<double>(), 0.5) << amp;
    // Through the plugin: one rank's NCCL (a store of the plugin's own).
    EXPECT_NE(r.out.find("take the nccl path"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("NCCL on the engine's stream"), std::string::npos) << r.out;
  }
}

TEST_F(TrainGpu, PluginLoadsAndMakesTheEngineDevice) {
  hpct::train::use_device(torch::Device(torch::kCUDA, 0));
  hpct::train::GpuPlugin* plugin = hpct::train::loaded_gpu_plugin();
  ASSERT_NE(plugin, nullptr);
  hpct::engine::Device& d = plugin->device(0);
  EXPECT_EQ(d.kind(), hpct::engine::DeviceKind::kCuda);
  EXPECT_EQ(d.index(), 0);
  // tensor_ref() takes CUDA tensors through the plugin's support.
  auto t = torch::ones({4}, torch::Device(torch::kCUDA, 0));
  const hpct::engine::TensorRef ref = hpct::tensor_ref(t, "t");
  EXPECT_EQ(ref.device, &d);
  ASSERT_NE(ref.ready, nullptr);
  EXPECT_TRUE(ref.ready->synchronize(hpct::Millis(10000)));
}

TEST_F(TrainGpu, LossyCompressionRunsOnTheDevice) {
  // PowerSGD and int8 with their error feedback on the GPU: two ranks
  // sharing it end identical, and the loss is a number.
  for (const char* c : {"powersgd:4", "int8"}) {
    const auto r = hpct::test::run_hpctrain("launch -np 2 -- " + std::string(HPCT_BINARY) + " " +
                                            train_args(std::string("--device cuda --max-steps 40 "
                                                                   "--compression-start-step 5 --compression ") + c));
    ASSERT_EQ(r.exit_code, 0) << c << ": " << r.out;
    EXPECT_TRUE(r.summary["params_identical_across_ranks"].get<bool>()) << c << ": " << r.out;
    EXPECT_TRUE(std::isfinite(r.summary["train_loss"].get<double>())) << c << ": " << r.out;
  }
}

TEST_F(TrainGpu, StagedPathIsChosenByName) {
  // HPCT_GPU_PATH=staged on one rank: the engine stages through the host.
  const auto r = hpct::test::run_with_summary("timeout 300 env OMP_NUM_THREADS=1 HPCT_GPU_PATH=staged " +
                                              std::string(HPCT_BINARY) + " " +
                                              train_args("--device cuda --max-steps 20"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("take the staged path"), std::string::npos) << r.out;
  EXPECT_TRUE(std::isfinite(r.summary["train_loss"].get<double>())) << r.out;
}

TEST_F(TrainGpu, TwoRanksSharingOneGpuEndIdentical) {
  const auto r = hpct::test::run_hpctrain("launch -np 2 -- " + std::string(HPCT_BINARY) + " " +
                                          train_args("--device cuda --amp bf16 --max-steps 40"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.summary["np"], 2);
  EXPECT_TRUE(r.summary["params_identical_across_ranks"].get<bool>()) << r.out;
  // NCCL refuses two ranks on one GPU: connect_gpu_world picks staged.
  EXPECT_NE(r.out.find("take the staged path"), std::string::npos) << r.out;
}

TEST_F(TrainGpu, CheckpointMovesBetweenGpuAndCpu) {
  const std::string ckpt = shards_->dir() + "/ckpt-gpu-cpu";
  auto r = hpct::test::run_hpctrain(train_args("--device cuda --max-steps 20 --checkpoint-every 10 "
                                               "--checkpoint-dir " + ckpt));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // Written on the GPU, resumed on the CPU...
  r = hpct::test::run_hpctrain(train_args("--device cpu --max-steps 30 --resume auto --checkpoint-dir " + ckpt));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.summary["resumed_from_step"], 20);
  EXPECT_EQ(r.summary["steps"], 30);
  // ...and that one (written on the CPU) resumed on the GPU, momentum included.
  r = hpct::test::run_hpctrain(train_args("--device cuda --max-steps 40 --resume auto --checkpoint-dir " + ckpt));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.summary["resumed_from_step"], 30);
  EXPECT_TRUE(std::isfinite(r.summary["train_loss"].get<double>()));
}

TEST(TrainGpuCli, AMissingGpuIndexIsOneLine) {
  SKIP_WITHOUT_GPU();
  const int n = hpct::train::probe_gpus().count;
  const auto r = hpct::test::run_shell(std::string("timeout 20 ") + HPCT_BINARY + " train --device cuda:" +
                                       std::to_string(n) + " --data /nonexistent/x.tar 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("this host has " + std::to_string(n) + " GPU(s)"), std::string::npos) << r.out;
}

}  // namespace
