#include "launch/rank_protocol.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct::launch {
namespace {

TEST(RankProtocol, SpecRoundTrips) {
  RankSpec s;
  s.rank = 2;
  s.size = 3;
  s.placement = place_ranks(parse_host_list("a:2,b"), 3);
  s.argv = {"prog", "--x", "a b"};
  s.cwd = "/work";
  s.env = {{"PATH", "/bin"}, {"HPCT_BACKEND", "gloo"}};
  s.secret = "ab12";
  s.store_addr = "10.0.0.1:5000";
  s.job_id = "j";
  s.restart = 1;
  s.grace_s = 1.5;
  std::string line = encode_spec(s);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  RankSpec t = decode_spec(line);
  EXPECT_EQ(t.rank, 2);
  EXPECT_EQ(t.argv, s.argv);
  EXPECT_EQ(t.env, s.env);
  EXPECT_EQ(t.placement.at(2).host, "b");
  EXPECT_EQ(t.placement.at(1).local_rank, 1);
  EXPECT_EQ(t.secret, "ab12");
  EXPECT_EQ(t.restart, 1);
  EXPECT_DOUBLE_EQ(t.grace_s, 1.5);
  EXPECT_THROW(decode_spec("{\"rank\": 1}"), Error);
  EXPECT_THROW(decode_spec("not json"), Error);
}

TEST(RankProtocol, Records) {
  EXPECT_EQ(encode_record(3, RecordKind::kStdout, "hi\nthere"), "@hpct@ 3 O hi there\n");
  auto r = parse_record("@hpct@ 12 E some error");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rank, 12);
  EXPECT_EQ(r->kind, RecordKind::kStderr);
  EXPECT_EQ(r->payload, "some error");
  auto empty = parse_record("@hpct@ 0 O");
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->payload, "");
  EXPECT_FALSE(parse_record("ssh: connect to host x port 22: Connection refused"));
  EXPECT_FALSE(parse_record("@hpct@ x O y"));
  EXPECT_FALSE(parse_record("@hpct@ 1 Q y"));
}

TEST(RankProtocol, RankEnds) {
  EXPECT_EQ(parse_rank_end("exit 3").launcher_exit_code(), 3);
  EXPECT_EQ(parse_rank_end("signal 9").launcher_exit_code(), 137);
  EXPECT_NE(parse_rank_end("signal 9").describe().find("signal 9"), std::string::npos);
  EXPECT_TRUE(parse_rank_end("exit 0").ok());
  RankEnd e;
  e.error = "cannot run 'x'";
  EXPECT_EQ(parse_rank_end(encode_rank_end(e)).error, "cannot run 'x'");
  EXPECT_FALSE(parse_rank_end("garbage").ok());
}

TEST(RankProtocol, LineSplitterCutsLongLinesAndKeepsTails) {
  LineSplitter s;
  std::vector<std::string> lines;
  auto on = [&](const std::string& l) { lines.push_back(l); };
  s.feed("ab\ncd", 5, on);
  ASSERT_EQ(lines.size(), 1u);
  s.feed("e\n", 2, on);
  EXPECT_EQ(lines.at(1), "cde");
  std::string big(kMaxLine + 10, 'x');
  s.feed(big.data(), big.size(), on);
  s.flush(on);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[2].size(), kMaxLine);
  EXPECT_EQ(lines[3].size(), 10u);
}

}  // namespace
}  // namespace hpct::launch
