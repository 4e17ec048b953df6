// Each spawner's command line, built from the same layout.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "launch/local_spawner.h"
#include "launch/mpirun_spawner.h"
#include "launch/srun_spawner.h"
#include "launch/ssh_spawner.h"

namespace hpct::launch {
namespace {

JobLayout layout(const std::string& hosts, int np, std::vector<bool> local) {
  JobLayout j;
  j.ranks = place_ranks(parse_host_list(hosts), np);
  j.rank_is_local = std::move(local);
  j.wrapper = "/opt/hpct/bin/hpctrain";
  return j;
}

bool has(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TEST(Spawner, LocalStartsTheWrapperPerRankAndRefusesRemoteHosts) {
  auto plans = LocalSpawner().plan(layout("localhost:2", 2, {true, true}));
  ASSERT_EQ(plans.size(), 2u);
  EXPECT_EQ(plans[1].argv, (std::vector<std::string>{"/opt/hpct/bin/hpctrain", "launch-rank"}));
  EXPECT_EQ(plans[1].ranks, std::vector<int>{1});
  EXPECT_THROW(LocalSpawner().plan(layout("localhost,h2", 2, {true, false})), Error);
}

TEST(Spawner, SshIsNonInteractiveAndLocalRanksAreForked) {
  SshOptions o;
  o.port = 2222;
  o.identity = "/k/id";
  o.connect_timeout_s = 7;
  o.options = {"StrictHostKeyChecking=no"};
  auto plans = SshSpawner(o).plan(layout("localhost,h2:2", 3, {true, false, false}));
  ASSERT_EQ(plans.size(), 3u);
  EXPECT_EQ(plans[0].via, "local");
  EXPECT_EQ(plans[0].argv.at(0), "/opt/hpct/bin/hpctrain");
  const auto& a = plans[2].argv;
  EXPECT_EQ(a.at(0), "ssh");
  EXPECT_TRUE(has(a, "BatchMode=yes"));
  EXPECT_TRUE(has(a, "ConnectTimeout=7"));
  EXPECT_TRUE(has(a, "StrictHostKeyChecking=no"));
  EXPECT_TRUE(has(a, "2222"));
  EXPECT_TRUE(has(a, "/k/id"));
  EXPECT_TRUE(has(a, "-T"));
  EXPECT_EQ(a.at(a.size() - 2), "h2");
  EXPECT_EQ(a.back(), "exec /opt/hpct/bin/hpctrain launch-rank");
  EXPECT_EQ(plans[2].host, "h2");
}

TEST(Spawner, ShellQuote) {
  EXPECT_EQ(shell_quote("/a/b"), "/a/b");
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(Spawner, MpirunOpenMpiAndMpich) {
  MpirunOptions o;
  o.is_root = true;
  o.network_interface = "eth0";
  JobLayout three = layout("h1:2,h2:2", 3, {false, false, false});
  EXPECT_THROW(MpirunSpawner(o).plan(three), Error);  // needs a private directory for the spec
  three.private_dir = "/home/u/.hpctrain/jobs/job-x";
  auto plans = MpirunSpawner(o).plan(three);
  ASSERT_EQ(plans.size(), 1u);
  const auto& a = plans[0].argv;
  EXPECT_TRUE(plans[0].group);
  EXPECT_EQ(plans[0].ranks.size(), 3u);
  std::vector<std::string> head(a.begin(), a.begin() + 11);
  EXPECT_EQ(head, (std::vector<std::string>{"mpirun", "-np", "3", "--host", "h1:2,h2:1", "--map-by",
                                            "slot", "--bind-to", "none", "--stdin", "none"}));
  EXPECT_EQ(plans[0].spec_file, "/home/u/.hpctrain/jobs/job-x/rank-spec");
  EXPECT_TRUE(has(a, "--allow-run-as-root"));
  EXPECT_TRUE(has(a, "btl_tcp_if_include"));
  EXPECT_FALSE(has(a, "plm_rsh_args"));
  EXPECT_EQ(a.at(a.size() - 3), "launch-rank");
  o.is_root = false;
  o.ssh.port = 2222;
  o.ssh_options_given = true;
  JobLayout two = layout("h1:2", 2, {false, false});
  two.private_dir = "/p";
  auto b = MpirunSpawner(o).plan(two)[0].argv;
  EXPECT_FALSE(has(b, "--allow-run-as-root"));
  auto rsh = std::find(b.begin(), b.end(), "plm_rsh_args");
  ASSERT_NE(rsh, b.end());
  EXPECT_NE((rsh + 1)->find("-p 2222"), std::string::npos);

  o.flavor = MpiFlavor::kMpich;
  o.mpirun = "mpiexec";
  JobLayout j = layout("h1:2,h2:2", 4, {false, false, false, false});
  j.private_dir = "/shared/.hpctrain-job-x";
  auto m = MpirunSpawner(o).plan(j)[0];
  EXPECT_EQ(m.spec_file, "/shared/.hpctrain-job-x/rank-spec");
  std::vector<std::string> mhead(m.argv.begin(), m.argv.begin() + 5);
  EXPECT_EQ(mhead, (std::vector<std::string>{"mpiexec", "-n", "4", "-hosts", "h1:2,h2:2"}));
  EXPECT_TRUE(has(m.argv, "-iface"));
  EXPECT_EQ(m.argv.at(m.argv.size() - 2), "--spec-file");
}

TEST(Spawner, Srun) {
  SrunOptions o;
  o.extra_args = {"--overcommit"};
  auto p = SrunSpawner(o).plan(layout("localhost:4", 4, {true, true, true, true}))[0];
  EXPECT_EQ(p.argv, (std::vector<std::string>{"srun", "-n", "4", "--input=all", "--kill-on-bad-exit=1",
                                              "--overcommit", "/opt/hpct/bin/hpctrain", "launch-rank"}));
  EXPECT_TRUE(p.group);
}

}  // namespace
}  // namespace hpct::launch
