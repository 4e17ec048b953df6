#include "launch/placement.h"
#include "launch/rank_protocol.h"

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

TEST(Placement, ServersSpreadOverTheWorkersHostsOrOnTheirOwn) {
  auto workers = place_ranks(parse_host_list("a:2,b:2"), 4);
  auto spread = place_servers(workers, {}, 3);
  ASSERT_EQ(spread.size(), 3u);
  EXPECT_EQ(spread[0].rank, 4);
  EXPECT_EQ(spread[0].host, "a");
  EXPECT_EQ(spread[1].host, "b");
  EXPECT_EQ(spread[2].host, "a");
  EXPECT_EQ(spread[2].local_rank, 1);
  EXPECT_EQ(spread[0].local_size, 2);
  EXPECT_EQ(spread[1].local_size, 1);
  EXPECT_EQ(spread[1].cross_rank, 1);
  auto own = place_servers(workers, {"s1", "s2"}, 2);
  EXPECT_EQ(own[0].host, "s1");
  EXPECT_EQ(own[1].host, "s2");
  EXPECT_EQ(own[1].rank, 5);
  EXPECT_TRUE(place_servers(workers, {}, 0).empty());
  EXPECT_THROW(place_servers(workers, {}, -1), Error);
}

TEST(RankSpecWithServers, RoundTripsAndChecksThePlacement) {
  RankSpec s;
  s.size = 2;
  s.servers = 1;
  s.argv = {"train"};
  s.server_argv = {"/bin/hpctrain", "ps-server"};
  s.placement = place_ranks(parse_host_list("a:2"), 2);
  auto sp = place_servers(s.placement, {}, 1);
  s.placement.insert(s.placement.end(), sp.begin(), sp.end());
  s.rank = 2;
  RankSpec t = decode_spec(encode_spec(s));
  EXPECT_EQ(t.servers, 1);
  EXPECT_EQ(t.server_argv, s.server_argv);
  EXPECT_EQ(t.placement.size(), 3u);
  s.placement.pop_back();
  EXPECT_THROW(decode_spec(encode_spec(s)), Error);
}

}  // namespace
}  // namespace hpct::launch
