#include "launch/torchrun_env.h"

#include <gtest/gtest.h>

namespace hpct::launch {
namespace {

std::vector<RankPlacement> two_hosts() {
  // 3 ranks: two on node-a, one on node-b
  return {{0, "node-a", 0, 2, 0, 2}, {1, "node-a", 1, 2, 0, 2}, {2, "node-b", 0, 1, 1, 2}};
}

TEST(TorchrunEnv, RanksGetTorchrunsNumbers) {
  auto ranks = two_hosts();
  std::map<std::string, std::string> env;
  add_torchrun_rank_env(env, ranks[2], 3);
  EXPECT_EQ(env["RANK"], "2");
  EXPECT_EQ(env["WORLD_SIZE"], "3");
  EXPECT_EQ(env["LOCAL_RANK"], "0");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "1");
  EXPECT_EQ(env["HOROVOD_RANK"], "2");
  EXPECT_EQ(env["HOROVOD_SIZE"], "3");
  EXPECT_EQ(env["HOROVOD_LOCAL_RANK"], "0");
  EXPECT_EQ(env["HOROVOD_LOCAL_SIZE"], "1");
  EXPECT_EQ(env["HOROVOD_CROSS_RANK"], "1");
  EXPECT_EQ(env["HOROVOD_CROSS_SIZE"], "2");
  EXPECT_EQ(env["HOROVOD_HOSTNAME"], "node-b");
  add_torchrun_rank_env(env, ranks[1], 3);
  EXPECT_EQ(env["RANK"], "1");
  EXPECT_EQ(env["LOCAL_RANK"], "1");
  EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
}

TEST(TorchrunEnv, MasterIsRankZerosHost) {
  std::map<std::string, std::string> env;
  add_torchrun_master_env(env, two_hosts(), /*all_local=*/false, 29511);
  EXPECT_EQ(env["MASTER_ADDR"], "node-a");
  EXPECT_EQ(env["MASTER_PORT"], "29511");
}

TEST(TorchrunEnv, LocalJobsUseLoopback) {
  std::map<std::string, std::string> env;
  add_torchrun_master_env(env, {{0, "vm", 0, 2, 0, 1}, {1, "vm", 1, 2, 0, 1}}, true, 40000);
  EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
}

TEST(TorchrunEnv, UsersOwnMasterIsKept) {
  std::map<std::string, std::string> env{{"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "1234"}};
  add_torchrun_master_env(env, two_hosts(), false, 29511);
  EXPECT_EQ(env["MASTER_ADDR"], "10.1.2.3");
  EXPECT_EQ(env["MASTER_PORT"], "1234");
}

TEST(TorchrunEnv, UnderSrunTheAddressIsLeftToTheRanks) {
  std::map<std::string, std::string> env;
  add_torchrun_master_env(env, {}, false, 29511);
  EXPECT_EQ(env.count("MASTER_ADDR"), 0u);
  EXPECT_EQ(env["MASTER_PORT"], "29511");
}

TEST(TorchrunEnv, PickedPortCanBeBound) {
  int port = pick_free_port();
  EXPECT_GT(port, 0);
  EXPECT_LT(port, 65536);
}

}  // namespace
}  // namespace hpct::launch
