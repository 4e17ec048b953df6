#include "launch/placement.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct::launch {
namespace {

TEST(Placement, FillsHostsBySlotsInOrder) {
  auto ranks = place_ranks(parse_host_list("a:2,b:2,c:2"), 5);
  ASSERT_EQ(ranks.size(), 5u);
  EXPECT_EQ(ranks[0].host, "a");
  EXPECT_EQ(ranks[1].host, "a");
  EXPECT_EQ(ranks[2].host, "b");
  EXPECT_EQ(ranks[4].host, "c");
  EXPECT_EQ(ranks[4].local_rank, 0);
  EXPECT_EQ(ranks[4].local_size, 1);  // only one rank landed on c
  EXPECT_EQ(ranks[3].local_rank, 1);
  EXPECT_EQ(ranks[3].local_size, 2);
  EXPECT_EQ(ranks[2].cross_rank, 1);
  for (const auto& r : ranks) EXPECT_EQ(r.cross_size, 3);
}

TEST(Placement, UnusedHostsDoNotCount) {
  auto ranks = place_ranks(parse_host_list("a:4,b:4"), 3);
  for (const auto& r : ranks) {
    EXPECT_EQ(r.host, "a");
    EXPECT_EQ(r.cross_size, 1);
    EXPECT_EQ(r.local_size, 3);
  }
  auto used = used_hosts(ranks);
  ASSERT_EQ(used.size(), 1u);
  EXPECT_EQ(used[0].slots, 3);
}

TEST(Placement, TooManyRanksNamesTheSlots) {
  try {
    place_ranks(parse_hostfile_text("a:1\nb:2\n", "hosts.txt"), 4);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("3 slots"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hosts.txt:1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(place_ranks(parse_host_list("a"), 0), Error);
}

}  // namespace
}  // namespace hpct::launch
