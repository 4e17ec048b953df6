// Brace expansion and shard lists.
#include "data/source/shard_list.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "data/test_files.h"

namespace hpct::data {
namespace {

TEST(ShardList, ExpandsRangesAndAlternatives) {
  EXPECT_EQ(expand_braces("train-{000000..000002}.tar"),
            (std::vector<std::string>{"train-000000.tar", "train-000001.tar", "train-000002.tar"}));
  EXPECT_EQ(expand_braces("{a,b}-{8..10}"),
            (std::vector<std::string>{"a-8", "a-9", "a-10", "b-8", "b-9", "b-10"}));
  EXPECT_EQ(expand_braces("{3..1}"), (std::vector<std::string>{"3", "2", "1"}));
  EXPECT_EQ(expand_braces("plain.tar"), (std::vector<std::string>{"plain.tar"}));
  EXPECT_EQ(expand_braces("train-{000000..000099}.tar").size(), 100u);
  EXPECT_THROW(expand_braces("a-{1..2.tar"), Error);
  EXPECT_THROW(expand_braces("a-{1..x}.tar"), Error);
  EXPECT_THROW(expand_braces("a-}"), Error);
}

TEST(ShardList, ReadsListsFromFilesAndPassesServersThrough) {
  testing::TempDir dir;
  testing::write_file(dir / "list.txt", "# shards\n/d/a-{0..1}.tar\n\n  /d/b.tar  \n");
  PosixFileSystem fs;
  EXPECT_EQ(expand_shard_list({"@" + (dir / "list.txt"), "tcp://h:5"}, fs),
            (std::vector<std::string>{"/d/a-0.tar", "/d/a-1.tar", "/d/b.tar", "tcp://h:5"}));
  std::string host;
  int port = 0;
  EXPECT_TRUE(parse_tcp_source("tcp://127.0.0.1:4242", &host, &port));
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 4242);
  EXPECT_FALSE(parse_tcp_source("/x.tar", &host, &port));
  EXPECT_THROW(parse_tcp_source("tcp://h", &host, &port), Error);
}

}  // namespace
}  // namespace hpct::data
