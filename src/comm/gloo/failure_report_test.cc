#include "comm/gloo/failure_report.h"

#include <gtest/gtest.h>

#include "store/memory_store.h"

namespace hpct::comm {
namespace {

FailureReport report(int reporter, ErrorCode code, int suspect) {
  FailureReport r;
  r.reporter = reporter;
  r.code = code;
  r.suspect = suspect;
  r.op = "allreduce of 4 bytes";
  r.detail = "Connection closed by peer\n[127.0.0.1]:1234";
  return r;
}

TEST(FailureReportTest, RoundTrips) {
  FailureReport in = report(3, ErrorCode::kPeerFailure, 1), out;
  ASSERT_TRUE(decode_failure_report(encode_failure_report(in), &out));
  EXPECT_EQ(out.reporter, 3);
  EXPECT_EQ(out.code, ErrorCode::kPeerFailure);
  EXPECT_EQ(out.suspect, 1);
  EXPECT_EQ(out.op, in.op);
  EXPECT_EQ(out.detail, "Connection closed by peer [127.0.0.1]:1234");
  EXPECT_FALSE(decode_failure_report("reporter=x\n", &out));
  EXPECT_FALSE(decode_failure_report("", &out));
}

TEST(FailureReportTest, DeadRankSeenByAnotherIsTheCulprit) {
  // Rank 2 saw rank 0 (healthy, it closed after failing) close; rank 0 saw
  // rank 1 close; rank 1 never reported: it died.
  CollectedReports c;
  c.reports = {report(0, ErrorCode::kPeerFailure, 1)};
  c.missing = {1};
  auto v = judge_failure(report(2, ErrorCode::kPeerFailure, 0), c);
  EXPECT_EQ(v.code, ErrorCode::kPeerFailure);
  EXPECT_EQ(v.culprit, 1);
  EXPECT_EQ(v.witness, 0);
}

TEST(FailureReportTest, SilentRankNobodySawCloseIsATimeout) {
  CollectedReports c;
  c.reports = {report(0, ErrorCode::kTimeout, -1)};
  c.missing = {1};
  auto v = judge_failure(report(2, ErrorCode::kPeerFailure, 0), c);
  EXPECT_EQ(v.code, ErrorCode::kTimeout);
  EXPECT_EQ(v.culprit, 1);
}

// Every survivor saw a connection reset but could not tell whose (the
// error named the peer's ephemeral port); rank 1 never reported: it died.
TEST(FailureReportTest, CloseOfAnUnknownPeerWithOneRankMissingNamesThatRank) {
  CollectedReports c;
  c.reports = {report(0, ErrorCode::kPeerFailure, -1), report(3, ErrorCode::kPeerFailure, -1)};
  c.missing = {1};
  auto v = judge_failure(report(2, ErrorCode::kPeerFailure, -1), c);
  EXPECT_EQ(v.code, ErrorCode::kPeerFailure);
  EXPECT_EQ(v.culprit, 1);
  EXPECT_EQ(v.witness, 2);
  // Two ranks missing: which one closed is not known; they went quiet.
  c.missing = {1, 3};
  c.reports = {report(0, ErrorCode::kPeerFailure, -1)};
  EXPECT_EQ(judge_failure(report(2, ErrorCode::kPeerFailure, -1), c).code, ErrorCode::kTimeout);
}

TEST(FailureReportTest, EveryoneReportedMeansOwnEvidence) {
  CollectedReports c;
  c.reports = {report(0, ErrorCode::kTimeout, -1)};
  auto v = judge_failure(report(1, ErrorCode::kTimeout, -1), c);
  EXPECT_EQ(v.code, ErrorCode::kTimeout);
  EXPECT_EQ(v.culprit, -1);
  EXPECT_TRUE(v.missing.empty());
}

TEST(FailureReportTest, CollectIsBoundedAndNamesMissingRanks) {
  store::MemoryStore s;
  EXPECT_EQ(publish_failure_report(s, report(0, ErrorCode::kPeerFailure, 2), Deadline(Millis(200))),
            "");
  const auto start = SteadyClock::now();
  auto c = collect_failure_reports(s, report(1, ErrorCode::kTimeout, -1), 3, Deadline(Millis(200)));
  EXPECT_GE(SteadyClock::now() - start, Millis(200));  // rank 2 is accused by nobody
  EXPECT_LT(SteadyClock::now() - start, Millis(1000));
  ASSERT_EQ(c.reports.size(), 1u);
  EXPECT_EQ(c.reports[0].suspect, 2);
  EXPECT_EQ(c.missing, std::vector<int>{2});
}

TEST(FailureReportTest, CollectStopsEarlyWhenOnlyAccusedRanksAreMissing) {
  store::MemoryStore s;
  publish_failure_report(s, report(0, ErrorCode::kPeerFailure, 2), Deadline(Millis(3000)));
  const auto start = SteadyClock::now();
  auto c =
      collect_failure_reports(s, report(1, ErrorCode::kTimeout, -1), 3, Deadline(Millis(3000)));
  const auto took = SteadyClock::now() - start;
  EXPECT_GE(took, kFailureReportSettle);
  EXPECT_LT(took, Millis(1500));
  EXPECT_EQ(c.missing, std::vector<int>{2});
}

}  // namespace
}  // namespace hpct::comm
