// hpctrain launch across hosts made of network namespaces (label netns;
// scripts/netns-cluster.sh, started by the CTest fixture netns_cluster_up):
// the ssh and mpirun spawners, a Gloo allreduce over the bridge, and the
// faults that only hosts have: a rank failing on another host, a host whose
// sshd is down, a launcher killed while its ranks run remotely.
#include <gtest/gtest.h>

#include <sstream>

#include "launch_test_util.h"
#include "netns_hosts.h"

namespace {

using namespace launch_test;
const std::string H = HPCT_BINARY;  // hpctrain
const std::string L = H + " launch";

class LaunchNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = hpct::test::read_netns_hosts(HPCT_NETNS_DIR, 3);
    if (!cluster_.skip.empty()) GTEST_SKIP() << cluster_.skip;
    ASSERT_TRUE(cluster_.error.empty()) << cluster_.error;
    env_ = cluster_.env;
    hosts_ = cluster_.hosts;
    ssh_ = cluster_.ssh_options();
    host_list_ = cluster_.host_option({2, 0, 0});
    mpi_env_ = cluster_.mpi_env();
  }
  hpct::test::NetnsHosts cluster_;
  std::string ssh_, host_list_, mpi_env_;
  std::map<std::string, std::string> env_;
  std::vector<std::string> hosts_;
};

TEST_F(LaunchNetns, SshHostnameAndGlooAllreduceAcrossThreeHosts) {
  Outcome r = run(L + " -np 4" + host_list_ + ssh_ + "-- hostname");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(count(r.out, "[" + std::to_string(i) + "] "), 1) << r.out;

  Outcome g = run(L + " -np 4 --prefix host" + host_list_ + ssh_ + "-- " + H + " rank-check --print-env");
  ASSERT_EQ(g.exit_code, 0) << g.out;
  EXPECT_EQ(count(g.out, "backend=gloo allreduce=ok"), 4) << g.out;
  EXPECT_NE(g.out.find("[" + hosts_[0] + ":1] rank-check rank=1 size=4 local=1/2 cross=0/3 host=" + hosts_[0]),
            std::string::npos) << g.out;
  EXPECT_NE(g.out.find("[" + hosts_[2] + ":3] rank-check rank=3 size=4 local=0/1 cross=2/3 host=" + hosts_[2]),
            std::string::npos) << g.out;
  // The store is bound to the head's bridge address, and the cwd carried over.
  EXPECT_EQ(count(g.out, "env HPCT_STORE_ADDR=" + env_["NETNS_HEAD"] + ":"), 4) << g.out;
  char cwd[4096];
  ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
  EXPECT_EQ(count(g.out, std::string("cwd ") + cwd + "\n"), 4) << g.out;
}

TEST_F(LaunchNetns, MpirunAcrossThreeHosts) {
  Outcome r = run(mpi_env_ + L + " -np 4 --spawner mpirun" + host_list_ + "-- " + H + " rank-check");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(count(r.out, "backend=mpi allreduce=ok"), 4) << r.out;
  EXPECT_EQ(count(r.out, "cross=2/3 host=" + hosts_[2]), 1) << r.out;
  Outcome g = run(mpi_env_ + L + " -np 4 --spawner mpirun --backend gloo" + host_list_ + "-- " + H + " rank-check");
  ASSERT_EQ(g.exit_code, 0) << g.out;
  EXPECT_EQ(count(g.out, "backend=gloo allreduce=ok"), 4) << g.out;
}

TEST_F(LaunchNetns, RemoteRankFailureStopsEveryHost) {
  Outcome r = run(L + " -np 4" + host_list_ + ssh_ + "-- " + H +
              " rank-check --print-pid --fail-rank 3 --fail-code 3 --sleep-s 60");
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_NE(r.out.find("rank 3 on host " + hosts_[2] + " exited with code 3"), std::string::npos) << r.out;
  auto pids = rank_pids(r.out);
  EXPECT_EQ(pids.size(), 4u) << r.out;
  EXPECT_TRUE(all_gone_within(pids, 1.0)) << r.out;
  EXPECT_LT(r.seconds, 15.0);
  Outcome k = run(L + " -np 2 -H " + hosts_[0] + "," + hosts_[1] + ssh_ + "-- " + H +
              " rank-check --fail-rank 1 --fail-signal 9 --sleep-s 60");
  EXPECT_EQ(k.exit_code, 137) << k.out;
  EXPECT_NE(k.out.find("rank 1 on host " + hosts_[1] + " was killed by signal 9"), std::string::npos) << k.out;
}

TEST_F(LaunchNetns, HostWithSshdDownIsNamedWithinTheStartTimeout) {
  const std::string script = std::string(HPCT_SOURCE_DIR) + "/scripts/netns-cluster.sh";
  ASSERT_EQ(run(script + " sshd-stop " + env_["NETNS_NAME"] + " 3").exit_code, 0);
  struct Restart {
    std::string cmd;
    ~Restart() { run(cmd); }
  } restart{script + " sshd-start " + env_["NETNS_NAME"] + " 3"};
  Outcome r = run(L + " -np 3 --start-timeout 10 -H " + hosts_[0] + "," + hosts_[1] + "," + hosts_[2] + ssh_ +
              "-- " + H + " rank-check --sleep-s 60");
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("rank 2 on host " + hosts_[2] + " did not start"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Connection refused"), std::string::npos) << r.out;
  EXPECT_LT(r.seconds, 10.0);
}

TEST_F(LaunchNetns, NoRemoteRankSurvivesAKilledLauncher) {
  std::string file = "/tmp/hpct-netns-kill-" + std::to_string(::getpid()) + ".out";
  int launcher = start_background(L + " -np 4" + host_list_ + ssh_ + "-- " + H + " rank-check --print-pid --sleep-s 60", file);
  ASSERT_GT(launcher, 0);
  std::string text = wait_for(file, "allreduce=ok", 4, 30);
  auto pids = rank_pids(text);
  ASSERT_EQ(pids.size(), 4u) << text;
  ASSERT_EQ(::kill(launcher, SIGKILL), 0);
  EXPECT_TRUE(all_gone_within(pids, 5.0)) << "ranks outlived the launcher by 5 s";
  std::remove(file.c_str());
}

}  // namespace
