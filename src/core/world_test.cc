#include "core/world.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct {
namespace {

TEST(World, SingleRankWithoutLauncher) {
  WorldInfo w = discover_world(MapEnv());
  EXPECT_EQ(w.rank, 0);
  EXPECT_EQ(w.size, 1);
  EXPECT_EQ(w.launcher, Launcher::kNone);
  EXPECT_FALSE(w.mpi_runtime);
}

TEST(World, HpctrainLauncherWins) {
  WorldInfo w = discover_world(MapEnv({{"HPCT_RANK", "3"}, {"HPCT_SIZE", "4"},
                                       {"HPCT_LOCAL_RANK", "1"}, {"HPCT_LOCAL_SIZE", "2"},
                                       {"HPCT_RESTART", "1"},
                                       {"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "9"}}));
  EXPECT_EQ(w.launcher, Launcher::kHpctrain);
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.size, 4);
  EXPECT_EQ(w.local_rank, 1);
  EXPECT_EQ(w.local_size, 2);
  EXPECT_EQ(w.restart, 1);
  EXPECT_TRUE(w.mpi_runtime);
}

TEST(World, OpenMpi) {
  WorldInfo w = discover_world(MapEnv({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "3"},
                                       {"OMPI_COMM_WORLD_LOCAL_RANK", "2"},
                                       {"OMPI_COMM_WORLD_LOCAL_SIZE", "3"}}));
  EXPECT_EQ(w.launcher, Launcher::kOpenMpi);
  EXPECT_EQ(w.rank, 2);
  EXPECT_EQ(w.size, 3);
  EXPECT_EQ(w.local_size, 3);
  EXPECT_TRUE(w.mpi_runtime);
}

TEST(World, MpichPmi) {
  WorldInfo w = discover_world(MapEnv({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}));
  EXPECT_EQ(w.launcher, Launcher::kPmi);
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.size, 2);
}

TEST(World, SlurmWithTaskCountsPerNode) {
  WorldInfo w = discover_world(MapEnv({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "7"},
                                       {"SLURM_LOCALID", "1"}, {"SLURM_NODEID", "2"},
                                       {"SLURM_NNODES", "3"},
                                       {"SLURM_STEP_TASKS_PER_NODE", "2(x2),3"}}));
  EXPECT_EQ(w.launcher, Launcher::kSlurm);
  EXPECT_EQ(w.rank, 5);
  EXPECT_EQ(w.size, 7);
  EXPECT_EQ(w.local_size, 3);
  EXPECT_EQ(w.cross_rank, 2);
  EXPECT_FALSE(w.mpi_runtime);
}

TEST(World, KubernetesIndexedJobTakesThePodIndex) {
  WorldInfo w = discover_world(MapEnv({{"JOB_COMPLETION_INDEX", "3"}, {"HPCT_SIZE", "4"}}));
  EXPECT_EQ(w.launcher, Launcher::kKubernetes);
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.size, 4);
  EXPECT_EQ(w.local_rank, 0);
  EXPECT_EQ(w.local_size, 1);
  EXPECT_EQ(w.cross_rank, 3);
  EXPECT_EQ(w.cross_size, 4);
  EXPECT_FALSE(w.mpi_runtime);
}

TEST(World, KubernetesIndexedJobNeedsTheSize) {
  try {
    discover_world(MapEnv({{"JOB_COMPLETION_INDEX", "1"}}));
    FAIL() << "no error without HPCT_SIZE";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("HPCT_SIZE"), std::string::npos) << e.what();
  }
  EXPECT_THROW(discover_world(MapEnv({{"JOB_COMPLETION_INDEX", "4"}, {"HPCT_SIZE", "4"}})), Error);
}

TEST(World, MpirunInsideAnIndexedJobPodIsMpirun) {
  WorldInfo w = discover_world(MapEnv({{"JOB_COMPLETION_INDEX", "0"}, {"HPCT_SIZE", "2"},
                                       {"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "3"}}));
  EXPECT_EQ(w.launcher, Launcher::kOpenMpi);
  EXPECT_EQ(w.rank, 1);
}

TEST(World, RankNotBelowSizeIsRefused) {
  EXPECT_THROW(discover_world(MapEnv({{"HPCT_RANK", "4"}, {"HPCT_SIZE", "4"}})), Error);
  EXPECT_THROW(discover_world(MapEnv({{"HPCT_RANK", "x"}, {"HPCT_SIZE", "4"}})), Error);
}

}  // namespace
}  // namespace hpct
