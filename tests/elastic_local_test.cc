// Elastic jobs on this machine (docs/elastic.md): `hpctrain launch --min-np
// --max-np --host-discovery-script` running `hpctrain train --elastic` on
// real Fashion-MNIST shards. Three names of this machine (localhost,
// 127.0.0.1 and its host name) play three hosts of one slot, so a host can
// leave and come back in discovery. Checked as a user would: the launcher's
// lines (who left, who joined, sizes, time), the workers' rollback lines,
// the final summary (steps, size, identical parameters), and every run's
// time bound.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <thread>

#include "launch_test_util.h"

namespace {

namespace fs = std::filesystem;
using launch_test::Outcome;

std::string hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

class ElasticLocal : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string tmpl = (fs::temp_directory_path() / "hpct-elastic-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    Outcome r = launch_test::run(std::string(HPCT_BINARY) +
                                     " data pack --from fashion-mnist --split test -q "
                                     "--max-count 2000 -o " +
                                     dir_ + "/fm-%06d.tar",
                                 120);
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  void write_hosts(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name + ".tmp") << text;
    fs::rename(dir_ + "/" + name + ".tmp", dir_ + "/" + name);
  }

  // The launch command line; `train` adds to the train command.
  std::string job(const std::string& hosts_file, const std::string& launch_args,
                  const std::string& train, int elastic_timeout_s = 20) {
    return "env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 HPCT_ELASTIC_TIMEOUT_S=" +
           std::to_string(elastic_timeout_s) + " " + std::string(HPCT_BINARY) + " launch " +
           launch_args + " --host-discovery-script \"cat " + dir_ + "/" + hosts_file +
           "\" --discovery-interval 0.5 -- " + HPCT_BINARY +
           " train --elastic --model cnn --data " + dir_ + "/fm-{000000..000002}.tar --val " +
           dir_ +
           "/fm-000003.tar --batch 32 --lr 0.05 --threads 1 --seed 3 --log-every 10 --progress "
           "lines " +
           train;
  }

  static double seconds_in(const std::string& text, const std::regex& re) {
    std::smatch m;
    return std::regex_search(text, m, re) ? std::stod(m[1].str()) : -1;
  }

  static std::string dir_;
};
std::string ElasticLocal::dir_;

// A worker is SIGKILLed at step 30: the other two go on within 10 s from
// their last commit (at most --commit-every steps lost); after the host's
// cool-down discovery still lists it, a new worker joins at a commit, and
// the job ends with three identical ranks.
TEST_F(ElasticLocal, SurvivorsGoOnAfterSigkillAndTheHostComesBack) {
  write_hosts("h1", "localhost:1\n127.0.0.1:1\n" + hostname() + ":1\n");
  // The job must outlast the cool-down and the rejoin even on a fast, quiet
  // machine (120 steps took 4.1 s there, the cool-down ended after them).
  Outcome r = launch_test::run(job("h1", "--min-np 2 --max-np 3 --blacklist-cooldown 0.5",
                                   "--epochs 20 --max-steps 400 --commit-every 5 --fault-worker 1 "
                                   "--fault-step 32 --fault kill --metrics " +
                                       dir_ + "/m1.jsonl"),
                               180);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("fault: worker 1 ends itself at step 32 (kill)"), std::string::npos)
      << r.out;
  // Named by its own end or by the survivors' failure reports, whichever came first.
  EXPECT_NE(r.out.find("worker 1 (rank 1) on 127.0.0.1 is lost: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("generation 1: size 3 -> 2"), std::string::npos) << r.out;
  // Recovery: from the launcher's view (the change to every member
  // arrived) and from the survivors' (the failure to training again).
  double formed =
      seconds_in(r.out, std::regex(R"(generation 1 formed: all 2 members arrived ([0-9.]+) s)"));
  EXPECT_GE(formed, 0) << r.out;
  EXPECT_LT(formed, 10) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m,
      std::regex(
          R"(generation 1 \(failure\): size 3 -> 2, rolled back ([0-9]+) steps to step ([0-9]+), ([0-9.]+) s)")))
      << r.out;
  EXPECT_GE(std::stoi(m[1].str()), 2);  // steps 31 and 32 at least (the commit was at 30)
  EXPECT_LE(std::stoi(m[1].str()), 5);  // at most the steps since the last commit
  EXPECT_EQ(m[2].str(), "30");
  EXPECT_LT(std::stod(m[3].str()), 10);
  // The host comes back after its cool-down, at a commit, and the job ends at 3.
  EXPECT_NE(r.out.find("host 127.0.0.1 leaves the blacklist"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("generation 2: size 2 -> 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(scale-up): size 2 -> 3, rolled back 0 steps"), std::string::npos) << r.out;
  auto pos = r.out.rfind("{\"batch_per_rank\"");
  ASSERT_NE(pos, std::string::npos) << r.out;
  auto s = nlohmann::json::parse(r.out.substr(pos, r.out.find('\n', pos) - pos));
  EXPECT_EQ(s["steps"], 400);
  EXPECT_EQ(s["np"], 3);
  EXPECT_TRUE(s["params_identical_across_ranks"].get<bool>());
  EXPECT_GT(s["val_accuracy"].get<double>(), 0.5) << r.out;
  // The metrics file has a line per change: sizes, rollback, time.
  std::ifstream metrics(dir_ + "/m1.jsonl");
  std::string line;
  int failures = 0, joins = 0;
  while (std::getline(metrics, line)) {
    auto j = nlohmann::json::parse(line);
    if (j["type"] != "elastic") continue;
    if (j["reason"] == "failure") {
      ++failures;
      EXPECT_EQ(j["old_size"], 3) << line;
      EXPECT_EQ(j["new_size"], 2) << line;
      EXPECT_GE(j["rollback_steps"].get<int>(), 2) << line;
      EXPECT_LE(j["rollback_steps"].get<int>(), 5) << line;
      EXPECT_LT(j["seconds"].get<double>(), 10) << line;
    }
    if (j["reason"] == "scale-up") ++joins;
  }
  EXPECT_EQ(failures, 1);
  EXPECT_EQ(joins, 1);
}

// Discovery adds a host (it joins at a commit) and then drops one (its
// worker leaves at a commit, exit 0): nothing is rolled back, sizes follow.
TEST_F(ElasticLocal, DiscoveryAddsAndRemovesHostsAtCommits) {
  write_hosts("h2", "localhost:1\n127.0.0.1:1\n");
  const std::string log = dir_ + "/h2.log";
  int pid = launch_test::start_background(
      job("h2", "--min-np 1 --max-np 3", "--epochs 3 --commit-every 5"), log);
  ASSERT_GT(pid, 0);
  std::string text = launch_test::wait_for(log, "epoch 1 step 20 ", 1, 90);
  ASSERT_NE(text.find("epoch 1 step 20 "), std::string::npos) << text;
  write_hosts("h2", "localhost:1\n127.0.0.1:1\n" + hostname() + ":1\n");
  text = launch_test::wait_for(log, "(scale-up): size 2 -> 3", 1, 60);
  ASSERT_NE(text.find("generation 1: size 2 -> 3; joined: worker 2 on " + hostname()),
            std::string::npos)
      << text;
  write_hosts("h2", "localhost:1\n" + hostname() + ":1\n");
  text = launch_test::wait_for(log, "(scale-down): size 3 -> 2", 1, 60);
  ASSERT_NE(text.find("(scale-down): size 3 -> 2, rolled back 0 steps"), std::string::npos) << text;
  EXPECT_NE(text.find("left: worker 1 (rank 1) on 127.0.0.1 (its host left discovery)"),
            std::string::npos)
      << text;
  text = launch_test::wait_for(log, "elastic: the job finished", 1, 120);
  EXPECT_TRUE(launch_test::all_gone_within({pid}, 10));
  EXPECT_NE(text.find("worker 1 on 127.0.0.1 left the job"), std::string::npos) << text;
  EXPECT_NE(text.find("the job finished with 2 workers in generation 2"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("is lost"), std::string::npos) << text;
  EXPECT_NE(text.find("identical on every rank: yes"), std::string::npos) << text;
}

// Rank 0 (the oldest worker) dies by an exception; the survivor becomes
// rank 0 and goes on alone (--min-np 1).
TEST_F(ElasticLocal, RankZeroFailingByExceptionLeavesTheOtherToGoOn) {
  write_hosts("h3", "localhost:1\n127.0.0.1:1\n");
  Outcome r = launch_test::run(job("h3", "--min-np 1 --max-np 2 --blacklist-cooldown 100",
                                   "--epochs 1 --max-steps 60 --commit-every 4 --fault-worker 0 "
                                   "--fault-step 22 --fault exit"),
                               120);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("worker 0 (rank 0) on localhost is lost: "), std::string::npos) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m,
      std::regex(
          R"(generation [0-9]+ \(failure\): size 2 -> 1, rolled back ([0-9]+) steps to step 20)")))
      << r.out;
  EXPECT_LE(std::stoi(m[1].str()), 4);
  EXPECT_NE(r.out.find("\"np\":1"), std::string::npos) << r.out;
}

// Below --min-np with no host to come: the launcher waits
// HPCT_ELASTIC_TIMEOUT_S (3 s here), then fails naming the host it lost.
TEST_F(ElasticLocal, BelowMinNpFailsAfterTheTimeoutNamingTheLostHost) {
  write_hosts("h4", "localhost:1\n127.0.0.1:1\n");
  auto start = std::chrono::steady_clock::now();
  Outcome r = launch_test::run(
      job("h4", "--min-np 2 --max-np 2 --blacklist-cooldown 100",
          "--epochs 3 --commit-every 5 --fault-worker 1 --fault-step 10 --fault kill", 3),
      90);
  double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.exit_code, 137) << "the test's own time bound ran out: " << r.out;
  EXPECT_NE(r.out.find("below --min-np 2; waiting up to 3.00 s for hosts"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("elastic job below --min-np 2 (1 workers) for 3.00 s "
                       "(HPCT_ELASTIC_TIMEOUT_S); lost hosts: "
                       "127.0.0.1; worker 1 (rank 1) on 127.0.0.1: "),
            std::string::npos)
      << r.out;
  EXPECT_LT(took, 60) << r.out;
}

// Discovery lists a host whose workers never start (192.0.2.77, TEST-NET-1:
// ssh to it is refused, unreachable or times out, and with no cool-down the
// launcher tries again and again). Once --min-np workers are ready, the
// first generation forms without it within the start grace (5 s), and the
// job trains to its end with the two.
TEST_F(ElasticLocal, AHostThatNeverStartsDoesNotHoldBackTheFirstGeneration) {
  write_hosts("h6", "localhost:1\n127.0.0.1:1\n192.0.2.77:1\n");
  Outcome r = launch_test::run(
      job("h6", "--min-np 2 --max-np 3 --blacklist-cooldown 0", "--epochs 1 --commit-every 5", 20), 120);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("elastic: generation 0: size 0 -> 2; joined: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("the job finished with 2 workers"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("no membership generation"), std::string::npos) << r.out;
}

// --max-restarts keeps its meaning: with nothing left to shrink to
// (--min-np 2 of 2), the failed elastic job is restarted whole, and the
// restarted job (new workers, HPCT_RESTART=1) trains to its end.
TEST_F(ElasticLocal, MaxRestartsRestartsAJobWithNothingLeftToShrinkTo) {
  write_hosts("h5", "localhost:1\n127.0.0.1:1\n");
  Outcome r = launch_test::run(
      job("h5", "--min-np 2 --max-np 2 --blacklist-cooldown 100 --max-restarts 1",
          "--epochs 1 --max-steps 30 --commit-every 5 --fault-worker 1 --fault-step 10 "
          "--fault kill",
          2),
      120);
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("elastic job below --min-np 2 (1 workers) for 2.00 s"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("restarting the job (restart 1 of 1); ranks see HPCT_RESTART=1"),
            std::string::npos)
      << r.out;
  EXPECT_NE(
      r.out.find("generation 0: size 0 -> 2; joined: worker 2 on localhost, worker 3 on 127.0.0.1"),
      std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("the job finished with 2 workers in generation 0"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("identical on every rank: yes"), std::string::npos) << r.out;
}

// The pid of this test's elastic worker `id` (its environment names it), or -1.
int worker_pid(int id, const std::string& dir) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string env = launch_test::slurp(e.path().string() + "/environ");
    std::string cmd = launch_test::slurp(e.path().string() + "/cmdline");
    if (env.find(std::string("HPCT_ELASTIC_ID=") + std::to_string(id) + '\0') !=
            std::string::npos &&
        cmd.find(dir) != std::string::npos && cmd.find("launch-rank") == std::string::npos) {
      return std::stoi(name);
    }
  }
  return -1;
}

// A host joins and its worker dies while the others meet it (arrival,
// connect or the first sync): the others do not hang; they go on without it
// within the operation timeout (HPCT_TIMEOUT_S=6 here) and the job ends.
TEST_F(ElasticLocal, HostThatJoinsAndDiesDuringTheFirstSyncDoesNotHangTheOthers) {
  write_hosts("h6", "localhost:1\n127.0.0.1:1\n");
  const std::string log = dir_ + "/h6.log";
  ASSERT_GT(
      launch_test::start_background("HPCT_TIMEOUT_S=6 " +
                                        job("h6", "--min-np 2 --max-np 3 --blacklist-cooldown 100",
                                            "--epochs 2 --commit-every 5") +
                                        "; echo launcher-exit=$?",
                                    log),
      0);
  std::string text = launch_test::wait_for(log, "epoch 1 step 20 ", 1, 90);
  ASSERT_NE(text.find("epoch 1 step 20 "), std::string::npos) << text;
  write_hosts("h6", "localhost:1\n127.0.0.1:1\n" + hostname() + ":1\n");
  text = launch_test::wait_for(log, "joined: worker 2 on", 1, 60);
  ASSERT_NE(text.find("joined: worker 2 on"), std::string::npos) << text;
  const int pid = worker_pid(2, dir_);
  ASSERT_GT(pid, 0) << text;
  const auto killed_at = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  text = launch_test::wait_for(log, "(failure): size 2 -> 2", 1, 30);
  const double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  ASSERT_NE(text.find("(failure): size 2 -> 2"), std::string::npos) << text;
  EXPECT_LT(took, 15) << text;
  EXPECT_NE(text.find("on " + hostname() + " is lost: was killed by signal 9"), std::string::npos)
      << text;
  text = launch_test::wait_for(log, "launcher-exit=", 1, 120);
  EXPECT_NE(text.find("launcher-exit=0"), std::string::npos) << text;
  EXPECT_NE(text.find("the job finished with 2 workers"), std::string::npos) << text;
  EXPECT_NE(text.find("identical on every rank: yes"), std::string::npos) << text;
}

// The summary line of a run's output (the last one), or null.
nlohmann::json summary_of(const std::string& out) {
  auto pos = out.rfind("{\"batch_per_rank\"");
  if (pos == std::string::npos) return nullptr;
  return nlohmann::json::parse(out.substr(pos, out.find('\n', pos) - pos));
}

// --elastic --shard 2 (docs/elastic.md, "Sharded elastic jobs"): worker 1
// of 3 is SIGKILLed at step 32 and its host does not come back. Its range
// of the optimizer state lives on in its replica: the two survivors re-split
// the state of the commit at step 30 and train to the end. The same job
// unsharded, with the same fault, ends with the same parameters bit for
// bit: the sharded update is elementwise and the restored state is the
// committed one exactly (the CRC-32C of every parameter's bytes compared).
// Run with sgd (momentum buffers) and adam (two moments and a step count).
class ElasticShardLocal : public ElasticLocal, public ::testing::WithParamInterface<const char*> {};

TEST_P(ElasticShardLocal, SurvivorsOfASigkillEndWithTheUnshardedRunsParameters) {
  const std::string optimizer = GetParam();
  write_hosts("hs", "localhost:1\n127.0.0.1:1\n" + hostname() + ":1\n");
  auto run_job = [&](const std::string& shard) {
    std::string cmd = job("hs", "--min-np 2 --max-np 3 --blacklist-cooldown 100",
                          "--epochs 1 --max-steps 60 --commit-every 5 --optimizer " + optimizer +
                              " --fault-worker 1 --fault-step 32 --fault kill " + shard);
    if (optimizer == "adam") cmd.replace(cmd.find("--lr 0.05"), 9, "--lr 0.002");
    return launch_test::run(cmd, 150);
  };
  Outcome sharded = run_job("--shard 2");
  ASSERT_EQ(sharded.exit_code, 0) << sharded.out;
  EXPECT_NE(sharded.out.find("fault: worker 1 ends itself at step 32 (kill)"), std::string::npos) << sharded.out;
  EXPECT_NE(sharded.out.find("(failure): size 3 -> 2, rolled back 2 steps to step 30"), std::string::npos)
      << sharded.out;
  EXPECT_NE(sharded.out.find("sharded optimizer state of step 30 re-split from 3 ranks' ranges to 2 ranks"),
            std::string::npos)
      << sharded.out;
  Outcome plain = run_job("");
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  EXPECT_NE(plain.out.find("(failure): size 3 -> 2, rolled back 2 steps to step 30"), std::string::npos)
      << plain.out;
  const auto s = summary_of(sharded.out), p = summary_of(plain.out);
  ASSERT_FALSE(s.is_null()) << sharded.out;
  ASSERT_FALSE(p.is_null()) << plain.out;
  EXPECT_EQ(s["steps"], 60);
  EXPECT_EQ(s["np"], 2);
  EXPECT_TRUE(s["params_identical_across_ranks"].get<bool>());
  EXPECT_LT(s["train_loss"].get<double>(), 2.0) << sharded.out;  // it learned (10 classes: ln 10 = 2.3 at chance)
  EXPECT_EQ(s["params_crc32c"], p["params_crc32c"]) << sharded.out << plain.out;
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ElasticShardLocal, ::testing::Values("sgd", "adam"),
                         [](const ::testing::TestParamInfo<const char*>& info) { return std::string(info.param); });

// --shard 3 keeps only a range of the parameters on each rank, which the
// elastic commits do not replicate: refused by name before any work.
TEST_F(ElasticLocal, ShardThreeIsRefusedByName) {
  Outcome r = launch_test::run(std::string(HPCT_BINARY) + " train --elastic --shard 3 --model cnn --data " + dir_ +
                                   "/fm-000000.tar",
                               30);
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("--elastic with --shard 3 is not supported"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("use --shard 1 or 2"), std::string::npos) << r.out;
}

// --shard 2 on 3 one-rank hosts: rank 1's range is replicated on rank 2,
// rank 2's on rank 0. Workers 1 and 2 are SIGKILLed together: range 1 is
// gone with both of its copies. Worker 0 must not hang nor go on from a
// partial state: it ends with one line naming the lost range and what to
// resume from, and the launcher fails below --min-np.
TEST_F(ElasticLocal, ShardedJobLosingARangeAndItsReplicaEndsNamingThem) {
  write_hosts("hl", "localhost:1\n127.0.0.1:1\n" + hostname() + ":1\n");
  const std::string log = dir_ + "/hl.log";
  ASSERT_GT(launch_test::start_background(job("hl", "--min-np 1 --max-np 3 --blacklist-cooldown 100",
                                              "--epochs 3 --commit-every 5 --shard 2", 3) +
                                              "; echo launcher-exit=$?",
                                          log),
            0);
  std::string text = launch_test::wait_for(log, "epoch 1 step 20 ", 1, 90);
  ASSERT_NE(text.find("epoch 1 step 20 "), std::string::npos) << text;
  const int p1 = worker_pid(1, dir_), p2 = worker_pid(2, dir_);
  ASSERT_GT(p1, 0) << text;
  ASSERT_GT(p2, 0) << text;
  ::kill(p1, SIGKILL);
  ::kill(p2, SIGKILL);
  text = launch_test::wait_for(log, "launcher-exit=", 1, 90);
  ASSERT_NE(text.find("launcher-exit="), std::string::npos) << text;
  EXPECT_EQ(text.find("launcher-exit=0"), std::string::npos) << text;
  EXPECT_NE(text.find("-rank layout) lost the ranges of ranks [1]: each range is kept by its rank and by one "
                      "replica on another host, and both are gone"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("no --checkpoint-dir was given"), std::string::npos) << text;
}

}  // namespace
