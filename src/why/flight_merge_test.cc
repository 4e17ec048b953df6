// The merge of flight records: each planted fault's records, built as the
// engine writes them, and what explain() names.
#include "why/flight_merge.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace hpct::why {
namespace {

Op op(std::uint64_t seq, const std::string& name, const std::string& state, std::vector<std::int64_t> shape = {10}) {
  Op o;
  o.seq = seq;
  o.name = name;
  o.op = "allreduce";
  o.reduce = "avg";
  o.dtype = "float32";
  o.state = state;
  o.shape = std::move(shape);
  o.site = "train.cc:" + std::to_string(40 + seq);
  o.submitted_us = 1000000 * static_cast<std::int64_t>(seq);
  if (state == "done" || state == "failed") o.ended_us = o.submitted_us + 100;
  return o;
}

// Two steps of two gradients, done on every rank.
RankRecord two_steps(int rank) {
  RankRecord r;
  r.rank = rank;
  r.host = "h" + std::to_string(rank);
  r.phase = "backward";
  r.step = 2;
  for (std::uint64_t s = 1; s <= 4; ++s) r.ops.push_back(op(s, s % 2 ? "grad.a" : "grad.b", "done"));
  return r;
}

JobRecords job(int size) {
  JobRecords j;
  j.dir = "/jobs/x";
  j.job_id = "launch-1";
  j.size = size;
  for (int r = 0; r < size; ++r) {
    j.hosts.push_back("h" + std::to_string(r));
    j.ranks[r] = two_steps(r);
  }
  return j;
}

std::string text(const Verdict& v) {
  std::string s;
  for (const auto& l : v.lines) s += l + "\n";
  return s;
}

TEST(WhyMerge, ARankThatSkipsACollective) {
  JobRecords j = job(3);
  // Step 3: rank 1 skips grad.b; the engine matches by name, so every later
  // operation of rank 1 is one number early, until rank 1 ends its last step
  // and ranks 0 and 2 wait for a grad.b that never comes.
  for (int r : {0, 2}) {
    j.ranks[r].ops.push_back(op(5, "grad.a", "done"));
    j.ranks[r].ops.push_back(op(6, "grad.b", "done"));
    j.ranks[r].ops.push_back(op(7, "grad.a", "done"));
    j.ranks[r].ops.push_back(op(8, "grad.b", "failed"));
    j.ranks[r].last_error = "the engine was shut down by rank 1 while tensors were pending";
  }
  j.ranks[1].ops.push_back(op(5, "grad.a", "done"));
  j.ranks[1].ops.push_back(op(6, "grad.a", "done"));
  j.ranks[1].ops.push_back(op(7, "grad.b", "done"));
  j.ranks[1].phase = "optimizer";
  Verdict v = explain(j);
  ASSERT_TRUE(v.stopped_seq);
  EXPECT_EQ(*v.stopped_seq, 6u);
  EXPECT_EQ(v.reached, (std::vector<int>{0, 2}));
  EXPECT_EQ(v.elsewhere, (std::vector<int>{1}));
  const std::string t = text(v);
  EXPECT_NE(t.find("ranks went apart at operation #6: allreduce(avg) 'grad.b' float32 [10] (done on ranks 0, 2)"),
            std::string::npos) << t;
  EXPECT_NE(t.find("rank 1 (host h1) skipped it: its operation #6 is allreduce(avg) 'grad.a'"), std::string::npos) << t;
  EXPECT_NE(t.find("called at train.cc:46"), std::string::npos) << t;
  EXPECT_NE(t.find("the job then stopped in operation #8: allreduce(avg) 'grad.b' float32 [10] (failed on ranks 0, 2; "
                   "not on rank 1)"),
            std::string::npos) << t;
}

TEST(WhyMerge, ARankWhoseTensorHasAnotherShape) {
  JobRecords j = job(3);
  for (int r = 0; r < 3; ++r) j.ranks[r].ops.push_back(op(5, "grad.a", "failed", {r == 2 ? 11 : 10}));
  Verdict v = explain(j);
  EXPECT_EQ(v.mismatched, (std::vector<int>{2}));
  EXPECT_EQ(v.reached.size(), 3u);
  EXPECT_NE(text(v).find("mismatch: rank 2 (host h2) submitted it as allreduce float32 [11] where ranks 0, 1 had "
                         "allreduce float32 [10]"),
            std::string::npos) << text(v);
}

TEST(WhyMerge, ARankStuckInDataLoadingNeverReachedIt) {
  JobRecords j = job(3);
  for (int r : {0, 1}) j.ranks[r].ops.push_back(op(5, "grad.a", "failed"));
  j.ranks[2].phase = "data";
  j.ranks[2].step = 3;
  j.ranks[2].phase_since_us = 1000100;  // 4 s before the others failed
  j.ranks[2].ops.back().stack = "train.py:12 in main\nloader.py:80 in next";
  WrapperNote stopped;
  stopped.was_stopped = true;
  stopped.record_written = true;
  j.notes[2] = stopped;
  Verdict v = explain(j);
  EXPECT_EQ(v.missing, (std::vector<int>{2}));
  const std::string t = text(v);
  EXPECT_NE(t.find("rank 2 (host h2) never reached it:\n    in phase data (step 3), for 4.0 s when the job failed"),
            std::string::npos) << t;
  EXPECT_NE(t.find("its process was stopped"), std::string::npos) << t;
  EXPECT_NE(t.find("its last operation #4: allreduce(avg) 'grad.b' float32 [10], done"), std::string::npos) << t;
  EXPECT_NE(t.find("      loader.py:80 in next"), std::string::npos) << t;
}

TEST(WhyMerge, AHostCutOffIsNamedByTheOthersErrorsAndHasNoRecord) {
  JobRecords j = job(3);
  for (int r : {0, 1}) {
    j.ranks[r].ops.push_back(op(5, "grad.a", "failed"));
    j.ranks[r].last_error = "allreduce of tensor 'grad.a' failed on rank " + std::to_string(r) +
                            ": Timeout: gloo: rank 2 did not answer within 4 s";
  }
  j.ranks.erase(2);
  Verdict v = explain(j);
  EXPECT_EQ(v.no_record, (std::vector<int>{2}));
  const std::string t = text(v);
  EXPECT_NE(t.find("ranks 0, 1 name rank 2 (host h2) in their errors"), std::string::npos) << t;
  EXPECT_NE(t.find("rank 2 (host h2): no flight record; its wrapper left no note"), std::string::npos) << t;
}

TEST(WhyMerge, ARankTheOomKillerEndedIsNamedFirstFromItsWrappersNote) {
  JobRecords j = job(3);
  j.ranks.erase(1);
  WrapperNote killed;
  killed.program_ended = true;
  killed.ended = "was killed by the kernel's out-of-memory killer (signal 9) at its memory limit of 1048576000 "
                 "bytes (0.98 GiB), cgroup /sys/fs/cgroup/memory/hpctrain-launch-1-2/rank-1; train with --shard 3";
  j.notes[1] = killed;
  const std::string t = text(explain(j));
  const auto first = t.find("rank 1 (host h1) was killed by the kernel's out-of-memory killer");
  EXPECT_NE(first, std::string::npos) << t;
  EXPECT_LT(first, t.find("every rank completed")) << "the cause comes before the rest:\n" << t;
  EXPECT_NE(t.find("rank 1 (host h1): no flight record; its program ended on its own (above)"), std::string::npos) << t;
  const WrapperNote read = parse_wrapper_note(R"({"rank": 1, "program_ended": true, "ended": "was killed by X"})");
  EXPECT_EQ(read.ended, "was killed by X");
}

TEST(WhyMerge, ReadsTheRecordFormat) {
  const std::string text = R"({"format":"hpctrain-flight-record/1","rank":1,"size":2,"host":"h1","reason":"SIGUSR1",
    "written_unix_us":5,"phase":{"name":"data","since_unix_us":3,"step":4},"first_error":"","last_error":"",
    "entries":[{"seq":1,"name":"w","op":"broadcast","dtype":"float32","shape":[2,2],"bytes":16,"state":"done",
    "path":"broadcast","fused":1,"submitted_us":1,"negotiated_us":2,"started_us":2,"ended_us":3,"site":"a.cc:1"}]})";
  RankRecord r = parse_rank_record(text, "rank-1.json");
  EXPECT_EQ(r.rank, 1);
  EXPECT_EQ(r.phase, "data");
  EXPECT_EQ(r.step, 4);
  ASSERT_EQ(r.ops.size(), 1u);
  EXPECT_EQ(r.ops[0].describe(), "broadcast 'w' float32 [2, 2]");
  EXPECT_THROW(parse_rank_record("{\"rank\":1}", "x.json"), Error);
  EXPECT_THROW(read_job_records("/nonexistent/job"), Error);
}

}  // namespace
}  // namespace hpct::why
