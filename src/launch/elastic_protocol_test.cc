#include "launch/elastic_protocol.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct::launch::elastic {
namespace {

TEST(ElasticProtocol, GenerationRoundTrips) {
  Generation g;
  g.gen = 4;
  g.reason = "failure: worker 2 on h2";
  g.members = assign_ranks({{7, "h3", 2}, {1, "h1", 0}, {3, "h1", 0}, {5, "h2", 1}});
  Generation back = decode_generation(encode_generation(g));
  EXPECT_EQ(back.gen, 4);
  EXPECT_EQ(back.reason, g.reason);
  ASSERT_EQ(back.members.size(), 4u);
  EXPECT_EQ(back.find(5)->rank, 2);
  EXPECT_EQ(back.find(99), nullptr);
}

TEST(ElasticProtocol, OldestWorkerIsRankZeroAndHostsStayTogether) {
  // Worker 9 joined first (generation 0) on h2; h1's workers joined later.
  auto m = assign_ranks({{1, "h1", 3}, {9, "h2", 0}, {2, "h1", 3}, {4, "h2", 2}, {6, "h3", 5}});
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].id, 9);
  EXPECT_EQ(m[1].id, 4);  // h2's other worker next to it
  EXPECT_EQ(m[0].local_size, 2);
  EXPECT_EQ(m[1].local_rank, 1);
  EXPECT_EQ(m[2].host, "h1");
  EXPECT_EQ(m[2].cross_rank, 1);
  EXPECT_EQ(m[4].id, 6);
  EXPECT_EQ(m[4].cross_size, 3);
  for (size_t r = 0; r < m.size(); ++r) EXPECT_EQ(m[r].rank, static_cast<int>(r));
}

TEST(ElasticProtocol, BadRecordsAreRefusedWithAReason) {
  EXPECT_THROW(decode_generation("{\"gen\":1}"), Error);
  EXPECT_THROW(
      decode_generation(R"({"gen":1,"reason":"","members":[{"id":1,"host":"a","rank":1,)"
                        R"("local_rank":0,"local_size":1,"cross_rank":0,"cross_size":1}]})"),
      Error);
  EXPECT_THROW(decode_report("not json"), Error);
}

TEST(ElasticProtocol, ReportRoundTrips) {
  FailureReport r;
  r.gen = 2;
  r.id = 5;
  r.rank = 1;
  r.blamed = {2};
  r.message = "allreduce failed";
  auto back = decode_report(encode_report(r));
  EXPECT_EQ(back.gen, 2);
  EXPECT_EQ(back.id, 5);
  EXPECT_EQ(back.blamed, std::vector<int>{2});
  EXPECT_EQ(back.message, "allreduce failed");
}

TEST(ElasticProtocol, BlameIsReadFromTheCommunicatorsMessages) {
  // The messages comm/gloo writes (communicator.cc) and shm_allreduce's.
  EXPECT_EQ(
      blamed_ranks("allreduce of 10 float32 on rank 0 of 3 (gloo, host a): peer rank 2 "
                   "(a 127.0.0.1) failed: rank 1 saw: x; this rank saw (from rank 1, after it "
                   "failed): Connection closed by peer rank 1"),
      std::vector<int>{2});
  EXPECT_EQ(blamed_ranks("barrier on rank 0 of 4: timed out after 3000 ms; peer ranks [1, 3] are "
                         "not responding (stopped, hung, or not in this operation)"),
            (std::vector<int>{1, 3}));
  EXPECT_EQ(blamed_ranks("gloo connect: rank(s) [2] did not show up within 5000 ms"),
            std::vector<int>{2});
  EXPECT_EQ(blamed_ranks("shared-memory allreduce: rank 1 (pid 4242) is gone"),
            std::vector<int>{1});
  EXPECT_EQ(
      blamed_ranks("allreduce of tensor 'grad/fc2.bias' failed on rank 1: the engine was shut down "
                   "by rank 0 while tensors were pending"),
      std::vector<int>{0});
  EXPECT_TRUE(blamed_ranks("store: timed out after 2000 ms waiting for store keys [a]").empty());
}

}  // namespace
}  // namespace hpct::launch::elastic
