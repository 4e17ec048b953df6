// The memory per rank against the ZeRO paper's worked example and cases
// computed by hand from the formulas in memory_model.h.
#include "plan/memory_model.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct::plan {
namespace {

// Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion
// Parameter Models", figure 1: Psi = 7.5B, N_d = 64, K = 12 (Adam, mixed
// precision): 120 GB, 31.4 GB, 16.6 GB, 1.9 GB (1 GB = 1e9 bytes there).
TEST(MemoryModel, ReproducesTheZeroPapersExample) {
  const MemoryModel m = memory_model(7.5e9, 0, "adam", "mixed");
  EXPECT_EQ(m.bytes_per_element, 2);
  EXPECT_EQ(m.state_bytes_per_parameter, 12);
  const double gb = 1e9;
  EXPECT_NEAR(memory_per_rank(m, 0, 64).total() / gb, 120.0, 0.05);
  EXPECT_NEAR(memory_per_rank(m, 1, 64).total() / gb, 31.4, 0.05);
  EXPECT_NEAR(memory_per_rank(m, 2, 64).total() / gb, 16.6, 0.05);
  EXPECT_NEAR(memory_per_rank(m, 3, 64).total() / gb, 1.9, 0.05);
  // Stage 1: 2 Psi + 2 Psi + 12 Psi / 64 = 15 + 15 + 1.40625 GB.
  const MemoryPerRank s1 = memory_per_rank(m, 1, 64);
  EXPECT_DOUBLE_EQ(s1.parameters, 15e9);
  EXPECT_DOUBLE_EQ(s1.gradients, 15e9);
  EXPECT_DOUBLE_EQ(s1.optimizer_state, 1.40625e9);
}

// The MLP of bench train in fp32 with Adam on 3 and 8 ranks: 784-4096-4096-10,
// 20,037,642 parameters, the largest layer 4096 x 4096 + 4096.
TEST(MemoryModel, Fp32AdamOnThreeRanksWithTheLargestLayerGathered) {
  const double psi = 784.0 * 4096 + 4096 + 4096.0 * 4096 + 4096 + 4096.0 * 10 + 10;
  const double layer = 4096.0 * 4096 + 4096;
  const MemoryModel m = memory_model(psi, layer, "adam", "fp32");
  const MemoryPerRank s0 = memory_per_rank(m, 0, 3);
  EXPECT_DOUBLE_EQ(s0.total(), 16 * psi);  // 4 + 4 + 8 bytes per parameter
  EXPECT_DOUBLE_EQ(memory_per_rank(m, 1, 3).optimizer_state, 8 * psi / 3);
  EXPECT_DOUBLE_EQ(memory_per_rank(m, 2, 3).gradients, 4 * psi / 3);
  // Stage 3 on 3 ranks: a third of 80 MB plus the 67 MB layer would pass
  // the whole model's 80 MB; a rank never holds more than the whole.
  EXPECT_DOUBLE_EQ(memory_per_rank(m, 3, 3).parameters, 4 * psi);
  EXPECT_DOUBLE_EQ(memory_per_rank(m, 3, 3).total(), 4 * psi + 12 * psi / 3);
  // On 8 ranks: 10 MB of shard and the 67 MB layer gathered.
  const MemoryPerRank s3 = memory_per_rank(m, 3, 8);
  EXPECT_DOUBLE_EQ(s3.parameters, 4 * psi / 8 + 4 * layer);
  EXPECT_DOUBLE_EQ(s3.total(), 16 * psi / 8 + 4 * layer);
  // One rank: sharding changes nothing but the gathered layer, which is
  // never counted beyond the whole model.
  EXPECT_DOUBLE_EQ(memory_per_rank(m, 3, 1).total(), s0.total());
}

TEST(MemoryModel, OptimizerStateBytesPerParameter) {
  EXPECT_EQ(memory_model(1, 0, "sgd", "fp32").state_bytes_per_parameter, 0);
  EXPECT_EQ(memory_model(1, 0, "sgd-momentum", "fp32").state_bytes_per_parameter, 4);
  EXPECT_EQ(memory_model(1, 0, "sgd-momentum", "mixed").state_bytes_per_parameter, 8);
  EXPECT_EQ(memory_model(1, 0, "sgd", "mixed").state_bytes_per_parameter, 4);
}

TEST(MemoryModel, LayersFromTheProfilesNames) {
  Profile p;
  p.gradients = {{"2.weight", 400, 0}, {"2.bias", 40, 0}, {"0.weight", 300, 0}, {"0.bias", 30, 0}};
  const MemoryModel m = memory_model_of(p, "sgd", "fp32");
  EXPECT_DOUBLE_EQ(m.parameters, 770.0 / 4);
  EXPECT_DOUBLE_EQ(m.largest_layer, 440.0 / 4);
}

TEST(MemoryModel, RefusesUnknownChoices) {
  EXPECT_THROW(memory_model(1, 0, "lamb", "fp32"), Error);
  EXPECT_THROW(memory_model(1, 0, "adam", "fp8"), Error);
  EXPECT_THROW(memory_model(1, 2, "adam", "fp32"), Error);
  const MemoryModel m = memory_model(10, 1, "adam", "fp32");
  EXPECT_THROW(memory_per_rank(m, 4, 2), Error);
  EXPECT_THROW(memory_per_rank(m, 1, 0), Error);
  try {
    memory_model(1, 0, "lamb", "fp32");
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("adam, sgd-momentum, sgd"), std::string::npos);
  }
}

}  // namespace
}  // namespace hpct::plan
