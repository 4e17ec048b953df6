#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "launch/launcher.h"

namespace hpct::launch {
namespace {

// What Prometheus's file_sd_configs reads: one target per rank, the local
// rank's offset from the base port, the launch id in a label of its own.
TEST(PrometheusTargets, OnePerRankAtBasePlusLocalRank) {
  std::vector<RankPlacement> ranks = {{0, "10.7.0.2", 0, 2, 0, 2}, {1, "10.7.0.2", 1, 2, 0, 2},
                                      {2, "10.7.0.3", 0, 1, 1, 2}};
  auto doc = nlohmann::json::parse(prometheus_targets(ranks, 9400, false, "job-7"));
  ASSERT_EQ(doc.size(), 1u);
  EXPECT_EQ(doc[0]["targets"], nlohmann::json({"10.7.0.2:9400", "10.7.0.2:9401", "10.7.0.3:9400"}));
  EXPECT_EQ(doc[0]["labels"], nlohmann::json({{"launch_id", "job-7"}}));  // job stays the scrape config's
  auto local = nlohmann::json::parse(prometheus_targets({{0, "vm", 0, 2, 0, 1}, {1, "vm", 1, 2, 0, 1}},
                                                        9400, true, "j"));
  EXPECT_EQ(local[0]["targets"], nlohmann::json({"127.0.0.1:9400", "127.0.0.1:9401"}));
}

}  // namespace
}  // namespace hpct::launch
