// hpctrain launch on this machine, as users run it: the local and mpirun
// spawners, the environment every rank sees, output files, and the fault
// paths (a failing rank, a killed rank, a killed launcher, restarts).
#include <gtest/gtest.h>

#include <filesystem>

#include "launch_test_util.h"

namespace {

using namespace launch_test;
const std::string H = HPCT_BINARY;     // hpctrain
const std::string L = H + " launch";

TEST(LaunchLocal, FourRanksRunAndSeeTheirPlace) {
  Outcome r = run(L + " -np 4 -- hostname");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(count(r.out, "[" + std::to_string(i) + "] "), 1) << r.out;

  Outcome e = run(L + " -np 4 --env EXTRA=yes -- " + H + " rank-check --print-env");
  ASSERT_EQ(e.exit_code, 0) << e.out;
  long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  std::string omp = std::to_string(std::max(1L, cores / 4));
  for (int i = 0; i < 4; ++i) {
    std::string p = "[" + std::to_string(i) + "] ";
    EXPECT_NE(e.out.find(p + "rank-check rank=" + std::to_string(i) + " size=4 local=" + std::to_string(i) +
                         "/4 cross=0/1"),
              std::string::npos) << e.out;
    EXPECT_NE(e.out.find(p + "env HPCT_STORE_ADDR=127.0.0.1:"), std::string::npos) << e.out;
    EXPECT_NE(e.out.find(p + "env OMP_NUM_THREADS=" + omp), std::string::npos) << e.out;
  }
  EXPECT_EQ(count(e.out, "backend=gloo allreduce=ok"), 4) << e.out;
  EXPECT_EQ(e.out.find("HPCT_SECRET="), std::string::npos);  // the secret is on a pipe only
  Outcome x = run(L + " -np 2 --env EXTRA=yes --env PATH -- printenv EXTRA");
  EXPECT_EQ(count(x.out, "] yes\n"), 2) << x.out;
}

TEST(LaunchLocal, OutputDirAndPrefixes) {
  auto dir = std::filesystem::temp_directory_path() / ("hpct-launch-out-" + std::to_string(::getpid()));
  Outcome r = run(L + " -np 2 --prefix host --output-dir " + dir.string() + " -- sh -c \"echo out; echo err >&2\"");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(count(r.out, ":1] out"), 1) << r.out;
  EXPECT_EQ(slurp((dir / "rank.1" / "stdout").string()), "out\n");
  EXPECT_EQ(slurp((dir / "rank.0" / "stderr").string()), "err\n");
  std::filesystem::remove_all(dir);
  Outcome n = run(L + " -np 1 --prefix none -- echo plain");
  EXPECT_EQ(n.out, "plain\n");
}

TEST(LaunchLocal, FailingRankStopsTheJobAndIsNamed) {
  Outcome r = run(L + " -np 4 -- " + H + " rank-check --print-pid --fail-rank 2 --fail-code 3 --sleep-s 60");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("rank 2 on host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("exited with code 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  | rank-check: rank 2 failing on purpose"), std::string::npos) << r.out;
  auto pids = rank_pids(r.out);
  EXPECT_EQ(pids.size(), 4u) << r.out;
  EXPECT_TRUE(all_gone_within(pids, 0.5));  // the launcher returned only after they ended
  EXPECT_LT(r.seconds, 5.0) << "the others sleep 60 s: they must have been stopped";
}

TEST(LaunchLocal, RankKilledBySignalIsReportedAsSignal) {
  Outcome r = run(L + " -np 2 -- " + H + " rank-check --fail-rank 1 --fail-signal 9 --sleep-s 60");
  EXPECT_EQ(r.exit_code, 137) << r.out;
  EXPECT_NE(r.out.find("rank 1 on host"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("killed by signal 9"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 5.0);
}

TEST(LaunchLocal, NoRankSurvivesAKilledLauncher) {
  for (std::string spawner : {"local", "mpirun"}) {
    SCOPED_TRACE(spawner);
    std::string file = "/tmp/hpct-launch-kill-" + std::to_string(::getpid()) + ".out";
    int launcher = start_background(L + " -np 3 --spawner " + spawner + " -- " + H +
                                        " rank-check --print-pid --sleep-s 60", file);
    ASSERT_GT(launcher, 0);
    std::string text = wait_for(file, "allreduce=ok", 3, 20);
    auto pids = rank_pids(text);
    ASSERT_EQ(pids.size(), 3u) << text;
    ASSERT_EQ(::kill(launcher, SIGKILL), 0);
    EXPECT_TRUE(all_gone_within(pids, 5.0)) << "ranks outlived the launcher by 5 s";
    std::remove(file.c_str());
  }
}

TEST(LaunchLocal, MaxRestartsRestartsTheGroupWithTheCount) {
  Outcome r = run(L + " -np 3 --max-restarts 1 -- " + H +
              " rank-check --fail-rank 1 --fail-code 4 --fail-restarts-below 1");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("restarting the job (restart 1 of 1)"), std::string::npos) << r.out;
  EXPECT_EQ(count(r.out, "restart=1 "), 3) << r.out;
  Outcome fail = run(L + " -np 2 --max-restarts 1 -- " + H + " rank-check --no-comm --fail-rank 0 --fail-code 4");
  EXPECT_EQ(fail.exit_code, 4) << fail.out;
  EXPECT_NE(fail.out.find("job failed after 1 restarts"), std::string::npos) << fail.out;
}

TEST(LaunchLocal, MpirunSpawnerAndMpirunDirectly) {
  Outcome r = run(L + " -np 4 --spawner mpirun -- " + H + " rank-check");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(count(r.out, "backend=mpi allreduce=ok"), 4) << r.out;
  EXPECT_EQ(count(r.out, "size=4 local="), 4) << r.out;
  // Ranks that mpirun starts without hpctrain launch read mpirun's variables.
  std::string root = ::geteuid() == 0 ? " --allow-run-as-root" : "";
  Outcome d = run("mpirun -np 2 --oversubscribe" + root + " " + H + " rank-check");
  ASSERT_EQ(d.exit_code, 0) << d.out;
  EXPECT_EQ(count(d.out, "size=2 local="), 2) << d.out;
  EXPECT_EQ(count(d.out, "backend=mpi allreduce=ok"), 2) << d.out;
  // A failing rank under mpirun is named as under the other spawners.
  Outcome f = run(L + " -np 2 --spawner mpirun -- " + H + " rank-check --fail-rank 1 --fail-code 3 --sleep-s 60");
  EXPECT_EQ(f.exit_code, 3) << f.out;
  EXPECT_NE(f.out.find("rank 1 on host"), std::string::npos) << f.out;
  EXPECT_LT(f.seconds, 10.0);
}

TEST(LaunchLocal, FullBinaryAndBadInput) {
  Outcome r = run(H + " launch -np 2 -- hostname");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  Outcome bad = run(L + " -np 5 -H localhost:2 -- hostname");
  EXPECT_EQ(bad.exit_code, 2) << bad.out;
  EXPECT_NE(bad.out.find("2 slots"), std::string::npos) << bad.out;
  Outcome missing = run(L + " -np 1 -- /nonexistent/program");
  EXPECT_EQ(missing.exit_code, 127) << missing.out;
  EXPECT_NE(missing.out.find("could not be started"), std::string::npos) << missing.out;
}

// An elastic job's ranks change with membership: no fixed discovery file.
TEST(LaunchLocal, ElasticJobRefusesAMetricsDiscoveryFileNamingTheFix) {
  Outcome r = run(H + " launch --min-np 1 --max-np 2 --metrics-port 9400 --metrics-sd /tmp/never-written.json "
                      "--host-discovery-script \"echo localhost:1\" -- hostname");
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("drop --metrics-sd"), std::string::npos) << r.out;
}

}  // namespace
