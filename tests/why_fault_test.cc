// Planted faults, and what `hpctrain why` and launch's failure summary say
// about them (docs/why.md). Three ranks of why_fault_rank (a training
// loop's shape on the real engine) under hpctrain launch, with a short
// HPCT_TIMEOUT_S so that each job fails within seconds:
//  - WhyLocal (label integration), three ranks on this machine: a rank that
//    skips a collective, a rank whose tensor has another shape, a rank
//    stopped (SIGSTOP) in its data loading;
//  - WhyNetns (label netns), two namespace hosts and this machine: the
//    skip, the shape and the rank stopped in data loading, each on a
//    namespace host, and a host cut off from the network (its link taken
//    down).
// Each checks the rank and the cause named, by launch and by `why`, and the
// job's time.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "launch_test_util.h"
#include "netns_hosts.h"

namespace {

using namespace launch_test;
const std::string H = HPCT_BINARY;  // hpctrain
const std::string RANK = WHY_FAULT_RANK;

struct JobDir {
  std::string path;
  explicit JobDir(const std::string& name)
      : path("/tmp/hpct-why-" + std::to_string(::getpid()) + "-" + name) {
    std::filesystem::remove_all(path);
  }
  ~JobDir() { std::filesystem::remove_all(path); }
};

// The job's environment: its directory and short bounds (a stall fails
// after 4 s; the launcher's stop waits 1 s).
std::string env_of(const JobDir& dir) { return "HPCT_JOB_DIR=" + dir.path + " HPCT_TIMEOUT_S=4 "; }

Outcome why(const JobDir& dir) { return run(H + " why " + dir.path); }

void expect_has(const std::string& text, const std::string& what) {
  EXPECT_NE(text.find(what), std::string::npos) << "expected \"" << what << "\" in:\n" << text;
}

TEST(WhyLocal, ARankThatSkipsACollective) {
  JobDir dir("skip");
  Outcome r = run(env_of(dir) + H + " launch -np 3 --grace 1 -- " + RANK + " skip 1 3 8");
  EXPECT_NE(r.exit_code, 0) << r.out;
  // The engine matches tensors by name, so rank 1 runs on one operation
  // early until it ends; the others then fail waiting for its grad.b.
  expect_has(r.out, "why: ranks went apart at operation #8: allreduce(avg) 'grad.b' float32 [10] (done on ranks 0, 2)");
  expect_has(r.out, "why:   rank 1 (host ");
  expect_has(r.out, ") skipped it: its operation #8 is allreduce(avg) 'grad.a' float32 [1000], done");
  expect_has(r.out, "why: the job then stopped in operation #");
  Outcome w = why(dir);
  EXPECT_EQ(w.exit_code, 0) << w.out;
  expect_has(w.out, ") skipped it: its operation #8 is allreduce(avg) 'grad.a'");
  expect_has(w.out, "why_fault_rank.cc:");
  EXPECT_LT(r.seconds, 20.0) << r.out;
}

TEST(WhyLocal, ARankWhoseTensorHasAnotherShape) {
  JobDir dir("shape");
  Outcome r = run(env_of(dir) + H + " launch -np 3 --grace 1 -- " + RANK + " shape 2 2 8");
  EXPECT_NE(r.exit_code, 0) << r.out;
  expect_has(r.out, "why: stopped in operation #6: allreduce(avg) 'grad.b' float32 [10] (failed on ranks 0, 1, 2)");
  expect_has(r.out, "why:   mismatch: rank 2 (host ");
  expect_has(r.out, ") submitted it as allreduce float32 [11] where ranks 0, 1 had allreduce float32 [10]");
  expect_has(why(dir).out, "mismatch: rank 2 (host ");
  EXPECT_LT(r.seconds, 20.0) << r.out;
}

TEST(WhyLocal, ARankStoppedInItsDataLoading) {
  JobDir dir("stop");
  Outcome r = run(env_of(dir) + H + " launch -np 3 --grace 1 -- " + RANK + " stop-in-data 0 2 8");
  EXPECT_NE(r.exit_code, 0) << r.out;
  expect_has(r.out, "why: stopped in operation #5: allreduce(avg) 'grad.a' float32 [1000] (failed on ranks 1, 2)");
  expect_has(r.out, "why:   rank 0 (host ");
  expect_has(r.out, ") never reached it:\n");
  expect_has(r.out, "why:     in phase data (step 2), for ");
  expect_has(r.out, "why:     its process was stopped (SIGSTOP, or a debugger)");
  expect_has(r.out, "why:     its last operation #4: allreduce(avg) 'grad.b' float32 [10], done");
  const Outcome w = why(dir);
  expect_has(w.out, "never reached it:\n    in phase data (step 2), for ");
  EXPECT_LT(r.seconds, 20.0) << r.out;
}

class WhyNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = hpct::test::read_netns_hosts(HPCT_NETNS_DIR, 2);
    if (!cluster_.skip.empty()) GTEST_SKIP() << cluster_.skip;
    ASSERT_TRUE(cluster_.error.empty()) << cluster_.error;
    // Ranks 0 and 1 on the namespace hosts, rank 2 on this machine.
    hosts_ = " -H " + cluster_.hosts[0] + "," + cluster_.hosts[1] + "," + cluster_.env["NETNS_HEAD"] + " " +
             cluster_.ssh_options();
  }
  hpct::test::NetnsHosts cluster_;
  std::string hosts_;
};

TEST_F(WhyNetns, ARankThatSkipsACollectiveOnAnotherHost) {
  JobDir dir("netns-skip");
  Outcome r = run(env_of(dir) + H + " launch --grace 1" + hosts_ + "-- " + RANK + " skip 1 3 8");
  EXPECT_NE(r.exit_code, 0) << r.out;
  expect_has(r.out, "why: ranks went apart at operation #8: allreduce(avg) 'grad.b' float32 [10] (done on ranks 0, 2)");
  expect_has(r.out, "why:   rank 1 (host " + cluster_.hosts[1] +
                        ") skipped it: its operation #8 is allreduce(avg) 'grad.a' float32 [1000], done");
  const Outcome w = why(dir);
  EXPECT_EQ(w.exit_code, 0) << w.out;
  expect_has(w.out, "rank 1 (host " + cluster_.hosts[1] + ") skipped it: its operation #8 is allreduce(avg) 'grad.a'");
  expect_has(w.out, "why_fault_rank.cc:");
  EXPECT_LT(r.seconds, 20.0) << r.out;
}

TEST_F(WhyNetns, ARankWhoseTensorHasAnotherShapeOnAnotherHost) {
  JobDir dir("netns-shape");
  Outcome r = run(env_of(dir) + H + " launch --grace 1" + hosts_ + "-- " + RANK + " shape 0 2 8");
  EXPECT_NE(r.exit_code, 0) << r.out;
  expect_has(r.out, "why: stopped in operation #6: allreduce(avg) 'grad.b' float32 [10] (failed on ranks 0, 1, 2)");
  const std::string named = "mismatch: rank 0 (host " + cluster_.hosts[0] +
                            ") submitted it as allreduce float32 [11] where ranks 1, 2 had allreduce float32 [10]";
  expect_has(r.out, "why:   " + named);
  expect_has(why(dir).out, named);
  EXPECT_LT(r.seconds, 20.0) << r.out;
}

TEST_F(WhyNetns, ARankStoppedInItsDataLoadingOnAnotherHost) {
  JobDir dir("netns-stop");
  Outcome r = run(env_of(dir) + H + " launch --grace 1" + hosts_ + "-- " + RANK + " stop-in-data 1 2 8");
  EXPECT_NE(r.exit_code, 0) << r.out;
  expect_has(r.out, "why:   rank 1 (host " + cluster_.hosts[1] + ") never reached it:");
  expect_has(r.out, "why:     in phase data (step 2), for ");
  expect_has(r.out, "why:     its process was stopped");
  EXPECT_LT(r.seconds, 20.0) << r.out;
}

// The bounds of a job that loses a host, from the moment its link goes
// down: every rank's wait ends within HPCT_TIMEOUT_S (4 s) plus the failure
// reports' wait (half of it, 2 s) plus a margin for this loaded machine; the
// launcher then stops the lost ssh session (--grace 1 + 2 s) and waits at
// most 2 s for records.
constexpr double kRankBoundS = 4 + 2 + 2.5;
constexpr double kLauncherBoundS = kRankBoundS + 1 + 2 + 2;

TEST_F(WhyNetns, AHostCutOffFromTheNetwork) {
  JobDir dir("netns-cut");
  const std::string link = "hv" + cluster_.name() + "2";  // host 2's end on the bridge
  const std::string file = dir.path + ".out";
  const std::string cut_record = dir.path + "/flight/rank-1.json";
  int launcher = start_background(env_of(dir) + H + " launch --grace 1" + hosts_ + "-- " + RANK + " none 0 0 400", file);
  ASSERT_GT(launcher, 0);
  std::string text = wait_for(file, "step 5 done", 3, 30);
  ASSERT_EQ(count(text, "step 5 done"), 3) << text;
  ASSERT_EQ(run("ip link set " + link + " down").exit_code, 0);
  struct Up {
    std::string cmd;
    ~Up() { run(cmd); }
  } up{"ip link set " + link + " up"};
  const auto start = std::chrono::steady_clock::now();
  auto since = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  // The cut-off rank shares this machine's file system (as a cluster's
  // hosts share a home): its record appears when its own wait ends. Nothing
  // from the launcher reaches it to ask for one.
  double cut_rank_failed_s = -1;
  while (alive(launcher) && since() < 25) {
    if (cut_rank_failed_s < 0 && std::filesystem::exists(cut_record)) cut_rank_failed_s = since();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const double seconds = since();
  text = hpct::test::netns_detail::slurp(file);
  std::remove(file.c_str());
  EXPECT_LT(seconds, kLauncherBoundS) << text;
  EXPECT_GT(cut_rank_failed_s, 0) << "the cut-off rank wrote no record: its wait did not end\n"
                                  << text;
  EXPECT_LT(cut_rank_failed_s, kRankBoundS) << "the cut-off rank's wait outlived the job's bound";
  expect_has(text, "why: stopped in operation #");
  expect_has(text, "name rank 1 (host " + cluster_.hosts[1] + ") in their errors: a lost peer");
  const Outcome w = why(dir);
  expect_has(w.out, "name rank 1 (host " + cluster_.hosts[1] + ")");
  // The cut-off rank's own error says that nobody answered, the store included.
  expect_has(hpct::test::netns_detail::slurp(cut_record),
             "this rank's host may be cut off from the network");
}

}  // namespace
