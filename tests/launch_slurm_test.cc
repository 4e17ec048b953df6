// hpctrain launch inside a real single-node Slurm (label slurm;
// scripts/slurm-local.sh, started by the CTest fixture slurm_up): the srun
// spawner inside an allocation, a failing rank under srun, and ranks that
// srun starts without hpctrain launch.
#include <gtest/gtest.h>

#include "launch_test_util.h"

namespace {

using namespace launch_test;
const std::string H = HPCT_BINARY;  // hpctrain
const std::string L = H + " launch";

class LaunchSlurm : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string dir = HPCT_SLURM_DIR;
    if (!slurp(dir + "/skip").empty()) GTEST_SKIP() << "no test Slurm: " << slurp(dir + "/skip");
    ASSERT_FALSE(slurp(dir + "/slurm.conf").empty()) << "test Slurm not up (" << dir << ")";
    env_ = "SLURM_CONF=" + dir + "/slurm.conf ";
  }
  std::string env_;
};

TEST_F(LaunchSlurm, SrunSpawnerInsideAnAllocation) {
  Outcome r = run(env_ + "salloc -n 4 --overcommit " + L + " -np 4 --spawner srun -- " + H + " rank-check");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(count(r.out, "backend=gloo allreduce=ok"), 4) << r.out;
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(count(r.out, "[" + std::to_string(i) + "] rank-check rank=" + std::to_string(i) + " size=4 local=" +
                               std::to_string(i) + "/4"), 1) << r.out;
  }
}

TEST_F(LaunchSlurm, FailingRankUnderSrun) {
  Outcome r = run(env_ + "salloc -n 2 --overcommit " + L + " -np 2 --spawner srun -- " + H +
              " rank-check --fail-rank 1 --fail-code 3 --sleep-s 60");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("rank 1 on host"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 20.0);
}

TEST_F(LaunchSlurm, RanksStartedBySrunDirectly) {
  Outcome r = run(env_ + "srun -n 2 --overcommit " + H + " rank-check --no-comm");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("rank-check rank=0 size=2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank-check rank=1 size=2"), std::string::npos) << r.out;
}

}  // namespace
