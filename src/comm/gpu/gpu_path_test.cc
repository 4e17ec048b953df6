// The choice of path for CUDA buffers (gpu_path.h), and the host layout it
// and the hierarchy share, as pure functions.
#include "comm/gpu/gpu_path.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct::comm {
namespace {

// Ranks placed as {host, device}; a device is its own GPU identity.
GpuPathInputs placed(std::vector<std::pair<int, int>> ranks, GpuPath requested = GpuPath::kAuto,
                     bool nccl = true, bool store = true) {
  GpuPathInputs in;
  for (auto [host, device] : ranks) in.ranks.push_back({1000 + host, 7 * device + 3, device});
  in.requested = requested;
  in.nccl_built = nccl;
  in.have_store = store;
  return in;
}

std::string refusal(const GpuPathInputs& in) {
  try {
    choose_gpu_path(in);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(GpuPathTest, ParsesTheSettingAndNamesTheVariableWhenWrong) {
  EXPECT_EQ(parse_gpu_path("auto"), GpuPath::kAuto);
  EXPECT_EQ(parse_gpu_path("nccl"), GpuPath::kNccl);
  EXPECT_EQ(parse_gpu_path("hierarchical"), GpuPath::kHierarchical);
  EXPECT_EQ(parse_gpu_path("staged"), GpuPath::kStaged);
  for (GpuPath p : {GpuPath::kAuto, GpuPath::kNccl, GpuPath::kHierarchical, GpuPath::kStaged}) {
    EXPECT_EQ(parse_gpu_path(gpu_path_name(p)), p);
  }
  try {
    parse_gpu_path("NCCL");
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "HPCT_GPU_PATH=NCCL is not one of auto, nccl, hierarchical, staged");
  }
}

TEST(GpuPathTest, HostLayoutNumbersHostsByFirstRankAndLocalRanksInRankOrder) {
  // Ranks 0..5 on hosts A B B A C C... uneven: A 2, B 2, C 2 -> uniform.
  const std::vector<std::int64_t> hosts = {5, 9, 9, 5, 2, 2};
  HostLayout l = host_layout(hosts, 3);
  EXPECT_EQ(l.host_count, 3);
  EXPECT_TRUE(l.uniform);
  EXPECT_EQ(l.host_index, 0);
  EXPECT_EQ(l.local_rank, 1);
  EXPECT_EQ(l.local_world_ranks, (std::vector<int>{0, 3}));
  EXPECT_EQ(l.across_world_ranks, (std::vector<int>{3, 2, 5}));  // local rank 1 of hosts 0, 1, 2
  l = host_layout(hosts, 1);
  EXPECT_EQ(l.host_index, 1);
  EXPECT_EQ(l.local_rank, 0);
  EXPECT_EQ(l.across_world_ranks, (std::vector<int>{0, 1, 4}));
  l = host_layout({5, 5, 9}, 2);
  EXPECT_FALSE(l.uniform);
  EXPECT_EQ(l.ranks_per_host, (std::vector<int>{2, 1}));
  EXPECT_TRUE(l.across_world_ranks.empty());
}

TEST(GpuPathTest, AutoTakesNcclOnOneHostWithAGpuPerRank) {
  const auto c = choose_gpu_path(placed({{0, 0}, {0, 1}, {0, 2}, {0, 3}}));
  EXPECT_EQ(c.path, GpuPath::kNccl);
  EXPECT_EQ(c.reason, "one host, one GPU per rank");
  EXPECT_EQ(choose_gpu_path(placed({{0, 0}})).path, GpuPath::kNccl);
}

TEST(GpuPathTest, AutoTakesTheHierarchyWhereTheGlooBackendDoes) {
  // Several hosts with the same L >= 2 ranks each, in any rank order.
  auto c = choose_gpu_path(placed({{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  EXPECT_EQ(c.path, GpuPath::kHierarchical);
  EXPECT_EQ(c.reason, "2 hosts x 2 ranks: NCCL inside each host, the host communicator across");
  EXPECT_EQ(choose_gpu_path(placed({{0, 0}, {1, 0}, {2, 0}, {0, 1}, {1, 1}, {2, 1}})).path,
            GpuPath::kHierarchical);
  // One rank per host, or uneven hosts: NCCL's own transport across hosts.
  c = choose_gpu_path(placed({{0, 0}, {1, 0}, {2, 0}}));
  EXPECT_EQ(c.path, GpuPath::kNccl);
  EXPECT_EQ(c.reason, "one rank per host: NCCL across hosts");
  c = choose_gpu_path(placed({{0, 0}, {0, 1}, {1, 0}}));
  EXPECT_EQ(c.path, GpuPath::kNccl);
  EXPECT_EQ(c.reason,
            "hosts have different numbers of ranks (host 0: 2, host 1: 1): NCCL across hosts");
}

TEST(GpuPathTest, AutoStagesWhereNcclCannotServe) {
  auto c = choose_gpu_path(placed({{0, 0}, {0, 0}}));
  EXPECT_EQ(c.path, GpuPath::kStaged);
  EXPECT_EQ(c.reason, "NCCL refuses two ranks on one GPU (ranks 0 and 1 on GPU 0)");
  // Sharing on one host of several is enough; the same device index on two
  // hosts is two GPUs.
  c = choose_gpu_path(placed({{0, 0}, {0, 1}, {1, 1}, {1, 1}}));
  EXPECT_EQ(c.path, GpuPath::kStaged);
  EXPECT_EQ(c.reason, "NCCL refuses two ranks on one GPU (ranks 2 and 3 on GPU 1 of host 1)");
  EXPECT_EQ(choose_gpu_path(placed({{0, 0}, {1, 0}})).path, GpuPath::kNccl);
  c = choose_gpu_path(placed({{0, 0}, {0, 1}}, GpuPath::kAuto, /*nccl=*/false));
  EXPECT_EQ(c.path, GpuPath::kStaged);
  EXPECT_EQ(c.reason, "this build has no NCCL backend");
  c = choose_gpu_path(placed({{0, 0}, {0, 1}}, GpuPath::kAuto, true, /*store=*/false));
  EXPECT_EQ(c.path, GpuPath::kStaged);
}

TEST(GpuPathTest, ExplicitNcclThatCannotRunNamesTheProblemAndTheFix) {
  EXPECT_EQ(refusal(placed({{0, 0}, {0, 0}}, GpuPath::kNccl)),
            "NCCL refuses two ranks on one GPU (ranks 0 and 1 on GPU 0); use HPCT_GPU_PATH=staged "
            "or auto");
  EXPECT_NE(refusal(placed({{0, 0}, {0, 1}}, GpuPath::kNccl, false))
                .find("HPCT_GPU_PATH=nccl, but this build of hpctrain has no NCCL backend"),
            std::string::npos);
  EXPECT_NE(refusal(placed({{0, 0}, {0, 1}}, GpuPath::kNccl, true, false))
                .find("start the job with hpctrain launch"),
            std::string::npos);
  // Explicit nccl on several hosts of several ranks: flat NCCL, as asked.
  EXPECT_EQ(choose_gpu_path(placed({{0, 0}, {0, 1}, {1, 0}, {1, 1}}, GpuPath::kNccl)).path,
            GpuPath::kNccl);
}

TEST(GpuPathTest, ExplicitHierarchyNeedsSeveralEvenHosts) {
  EXPECT_EQ(refusal(placed({{0, 0}, {0, 1}}, GpuPath::kHierarchical)),
            "HPCT_GPU_PATH=hierarchical needs ranks on several hosts, and all 2 are on one; use "
            "HPCT_GPU_PATH=nccl or auto");
  EXPECT_EQ(refusal(placed({{0, 0}, {0, 1}, {1, 0}}, GpuPath::kHierarchical)),
            "HPCT_GPU_PATH=hierarchical needs the same number of ranks on every host, and they "
            "differ (host 0: 2, host 1: 1); start as many on each, or use HPCT_GPU_PATH=nccl or "
            "auto");
  EXPECT_NE(refusal(placed({{0, 0}, {0, 0}, {1, 0}, {1, 1}}, GpuPath::kHierarchical))
                .find("NCCL refuses two ranks on one GPU (ranks 0 and 1 on GPU 0 of host 0)"),
            std::string::npos);
  // One rank per host is allowed when asked for: hpctrain's transport across hosts.
  EXPECT_EQ(choose_gpu_path(placed({{0, 0}, {1, 0}}, GpuPath::kHierarchical)).path,
            GpuPath::kHierarchical);
}

TEST(GpuPathTest, StagedRunsAnywhere) {
  EXPECT_EQ(choose_gpu_path(placed({{0, 0}, {0, 0}, {1, 3}}, GpuPath::kStaged, false, false)).path,
            GpuPath::kStaged);
}

}  // namespace
}  // namespace hpct::comm
