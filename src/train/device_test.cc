// train/device.h on any machine (label unit): device and --amp parsing, the
// no-GPU line, autocast on the CPU, fp16 loss scaling, and the optimizer's
// state following its parameters.
#include "train/device.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/error.h"

namespace hpct::train {
namespace {

TEST(Device, ParsesCpuCudaAndAnIndex) {
  EXPECT_TRUE(parse_device("cpu").is_cpu());
  EXPECT_EQ(parse_device("cuda"), torch::Device(torch::kCUDA, 0));
  EXPECT_EQ(parse_device("cuda:3"), torch::Device(torch::kCUDA, 3));
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1234567", ""}) {
    EXPECT_THROW(parse_device(bad), Error) << bad;
  }
}

TEST(Device, NoGpuMessageNamesTheFix) {
  GpuProbe none;
  none.error = "cudaErrorInsufficientDriver (35): CUDA driver version is insufficient for CUDA runtime version";
  EXPECT_EQ(no_gpu_message("--device", parse_device("cuda"), none),
            "--device cuda:0: no GPU found (cudaGetDeviceCount: cudaErrorInsufficientDriver (35): CUDA driver "
            "version is insufficient for CUDA runtime version); run on a host with an NVIDIA GPU and driver, or "
            "use --device cpu");
  GpuProbe one;
  one.count = 1;
  EXPECT_EQ(no_gpu_message("--device", parse_device("cuda"), one), "");
  EXPECT_EQ(no_gpu_message("--device", parse_device("cuda:1"), one),
            "--device cuda:1: this host has 1 GPU(s), numbered from 0; use --device cuda:0");
  GpuProbe zero;
  EXPECT_NE(no_gpu_message("--device", parse_device("cuda"), zero).find("0 devices"), std::string::npos);
}

TEST(Device, CpuNeedsNothing) { EXPECT_NO_THROW(use_device(torch::Device(torch::kCPU))); }

TEST(GpuPlugin, AMissingPluginIsOneLineNamingTheFileAndTheFix) {
  try {
    load_gpu_plugin("--device cuda:0", {"/nonexistent/hpct/libhpctrain_cuda.so"});
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    EXPECT_NE(m.find("--device cuda:0: the CUDA plugin libhpctrain_cuda.so is missing"), std::string::npos) << m;
    EXPECT_NE(m.find("/nonexistent/hpct/libhpctrain_cuda.so"), std::string::npos) << m;
    EXPECT_NE(m.find("--target hpctrain_cuda"), std::string::npos) << m;
    EXPECT_NE(m.find("or use --device cpu"), std::string::npos) << m;
  }
  EXPECT_EQ(loaded_gpu_plugin(), nullptr);
}

TEST(GpuPlugin, IsLookedForBesideTheExecutableFirst) {
  const auto c = gpu_plugin_candidates();
  ASSERT_FALSE(c.empty());
  EXPECT_NE(c.front().find("/libhpctrain_cuda.so"), std::string::npos);
}

TEST(Amp, ParsesTheDtypes) {
  EXPECT_EQ(parse_amp(""), c10::kFloat);
  EXPECT_EQ(parse_amp("none"), c10::kFloat);
  EXPECT_EQ(parse_amp("bf16"), c10::kBFloat16);
  EXPECT_EQ(parse_amp("fp16"), c10::kHalf);
  EXPECT_THROW(parse_amp("fp8"), Error);
}

TEST(Amp, AutocastOnTheCpuRunsALinearInBf16AndRestores) {
  auto lin = torch::nn::Linear(8, 4);
  auto x = torch::randn({2, 8});
  {
    AutocastScope scope(c10::DeviceType::CPU, c10::kBFloat16);
    EXPECT_EQ(lin->forward(x).scalar_type(), c10::kBFloat16);
  }
  EXPECT_EQ(lin->forward(x).scalar_type(), c10::kFloat);
  {
    AutocastScope off(c10::DeviceType::CPU, c10::kFloat);
    EXPECT_EQ(lin->forward(x).scalar_type(), c10::kFloat);
  }
}

TEST(LossScaler, SkipsOverflowHalvesAndGrows) {
  LossScaler s(true, 1024.0, 2);
  auto p = torch::ones({3}, torch::requires_grad());
  p.mutable_grad() = torch::full({3}, 2048.0);
  EXPECT_TRUE(s.unscale_and_check({p}));
  EXPECT_TRUE(torch::allclose(p.grad(), torch::full({3}, 2.0)));
  s.update(true);
  EXPECT_EQ(s.scale(), 1024.0);
  s.update(true);
  EXPECT_EQ(s.scale(), 2048.0);  // two good steps in a row
  p.mutable_grad() = torch::tensor({1.0f, std::numeric_limits<float>::infinity(), 0.0f});
  EXPECT_FALSE(s.unscale_and_check({p}));
  s.update(false);
  EXPECT_EQ(s.scale(), 1024.0);
  EXPECT_EQ(s.skipped_steps(), 1);
  LossScaler off(false);
  auto loss = torch::tensor(3.0);
  EXPECT_TRUE(torch::equal(off.scale_loss(loss), loss));
  EXPECT_TRUE(off.unscale_and_check({p}));  // disabled: never skips
}

TEST(OptimizerState, FollowsItsParameters) {
  auto w = torch::ones({4}, torch::requires_grad());
  torch::optim::SGD sgd({w}, torch::optim::SGDOptions(0.1).momentum(0.9));
  w.mutable_grad() = torch::ones({4});
  sgd.step();
  ASSERT_EQ(sgd.state().size(), 1u);
  move_optimizer_state(sgd, torch::Device(torch::kCPU));  // the CPU to the CPU: unchanged, no error
  auto* st = dynamic_cast<torch::optim::SGDParamState*>(sgd.state().begin()->second.get());
  ASSERT_NE(st, nullptr);
  EXPECT_TRUE(st->momentum_buffer().device().is_cpu());
}

}  // namespace
}  // namespace hpct::train
