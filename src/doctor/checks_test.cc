// Verdicts from invented clusters: every check's ok, the fault it names and
// the host it names it on.
#include <gtest/gtest.h>

#include "doctor/checks.h"

namespace hpct::doctor {
namespace {

HostFacts healthy_facts(const std::string& addr) {
  HostFacts f;
  f.version = "0.1.0";
  f.git = "abc123";
  f.exe = "/opt/hpctrain/bin/hpctrain";
  f.build_sha256 = std::string(64, 'a');
  f.user = "alice";
  f.uid = 2000;
  f.gid = 2000;
  f.packages = {{"hpctrain", "0.1.0-1"}, {"libtorch1.13", "1.13.1+dfsg-4"}};
  f.hostname = "node";
  f.hostname_addrs = {addr};
  f.listed_addrs = {addr};
  f.interface_addrs = {addr};
  f.cores = 8;
  f.mem_total = 16ull << 30;
  f.mem_available = 12ull << 30;
  f.disk_path = "/shared";
  f.disk_free = 100ull << 30;
  f.mpi = {true, "Open MPI", "4.1.4", "/usr/bin/mpirun", "/usr/bin/mpirun.openmpi", ""};
  f.blas = {"/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3", "OpenBLAS", "pthread"};
  f.shared_dir = "/shared";
  f.token_written = true;
  f.ports = {29500, 29501};
  return f;
}

// Three healthy hosts h1..h3 that see each other's tokens and ports.
DoctorInput healthy(int n = 3) {
  DoctorInput in;
  in.head = {"0.1.0", "abc123", "/opt/hpctrain/bin/hpctrain", std::string(64, 'a'), "alice", 2000, 2000};
  in.shared_dir = "/shared";
  in.ports_text = "29500-29501";
  for (int i = 0; i < n; ++i) {
    HostOutcome h;
    h.name = "h" + std::to_string(i + 1);
    std::string addr = "10.0.0." + std::to_string(i + 1);
    h.head_addrs = {addr};
    h.session_ok = true;
    h.facts = healthy_facts(addr);
    h.known = {true, "true", {"/etc/ssh/ssh_known_hosts"}, h.name, "/etc/ssh/ssh_known_hosts", ""};
    h.clock_skew_s = 0.001;
    h.clock_error_s = 0.0005;
    h.pairs_reported = true;
    for (int j = 0; j < n; ++j) {
      if (j == i) continue;
      h.tokens_seen.push_back(j);
      for (int p : {29500, 29501}) in.connects.push_back({i, j, p, true, ""});
    }
    in.hosts.push_back(h);
  }
  return in;
}

const Row* find(const std::vector<Row>& rows, const std::string& check, const std::vector<std::string>& hosts) {
  for (const auto& r : rows) {
    if (r.check == check && r.hosts == hosts) return &r;
  }
  return nullptr;
}

std::vector<const Row*> failing(const Report& rep) {
  std::vector<const Row*> out;
  for (const auto& r : rep.rows) {
    if (r.status == Status::kFail) out.push_back(&r);
  }
  return out;
}

TEST(DoctorChecks, HealthyClusterIsReadyWithEveryCellOk) {
  Report rep = build_report(healthy());
  EXPECT_TRUE(rep.ready());
  EXPECT_EQ(rep.exit_code(), 0);
  for (const auto& r : rep.rows) {
    EXPECT_EQ(r.status, Status::kOk) << r.check << " " << r.detail;
    EXPECT_TRUE(r.fix.empty());
  }
  // 13 per-host checks (the gpu row included) x 3 hosts + 6 ordered pairs
  // (ports has only pair rows unless a host cannot listen).
  EXPECT_EQ(rep.rows.size(), 45u);
}

TEST(DoctorChecks, HostnameOnLoopbackIsTheTrapWithTheHostsLineToChange) {
  DoctorInput in = healthy();
  HostFacts& f = *in.hosts[1].facts;
  f.hostname = "node2";
  f.hostname_addrs = {"127.0.1.1"};
  f.loopback_hosts_line = "127.0.1.1\tnode2.example.com node2";
  Report rep = build_report(in);
  auto fails = failing(rep);
  ASSERT_EQ(fails.size(), 1u);
  EXPECT_EQ(fails[0]->check, "name");
  EXPECT_EQ(fails[0]->hosts, std::vector<std::string>{"h2"});
  EXPECT_NE(fails[0]->detail.find("127.0.1.1"), std::string::npos);
  EXPECT_NE(fails[0]->detail.find("advertise loopback"), std::string::npos);
  EXPECT_EQ(fails[0]->fix, "on h2, in /etc/hosts change '127.0.1.1\tnode2.example.com node2' to "
                           "'10.0.0.2 node2.example.com node2'");
}

TEST(DoctorChecks, ListedNameOnLoopbackOnItsOwnHostFails) {
  DoctorInput in = healthy();
  in.hosts[2].facts->listed_addrs = {"127.0.0.1"};
  auto rows = check_name(in);
  EXPECT_EQ(find(rows, "name", {"h3"})->status, Status::kFail);
  EXPECT_NE(find(rows, "name", {"h3"})->fix.find("resolve to 10.0.0.3 on h3"), std::string::npos);
  // A single machine checking itself has no other address to advertise.
  DoctorInput one = healthy(1);
  one.hosts[0].local = true;
  one.hosts[0].facts->interface_addrs.clear();
  one.hosts[0].facts->hostname_addrs = {"127.0.0.1"};
  EXPECT_EQ(check_name(one)[0].status, Status::kOk);
  // Alone but with a LAN address: a warning, since no other host needs it yet.
  one.hosts[0].facts->interface_addrs = {"10.0.0.1"};
  EXPECT_EQ(check_name(one)[0].status, Status::kWarn);
}

TEST(DoctorChecks, UnresolvableNameFailsHere) {
  DoctorInput in = healthy();
  in.hosts[0].resolve_error = "Name or service not known";
  in.hosts[0].head_addrs.clear();
  auto r = find(check_name(in), "name", {"h1"});
  EXPECT_EQ(r->status, Status::kFail);
  EXPECT_NE(r->fix.find("/etc/hosts"), std::string::npos);
}

TEST(DoctorChecks, SshFailuresAreNamedWithTheirFix) {
  DoctorInput in = healthy();
  auto kill = [&](int i, int code, const std::string& err, bool timed_out = false) {
    in.hosts[i].facts.reset();
    in.hosts[i].pairs_reported = false;
    in.hosts[i].exit_code = code;
    in.hosts[i].stderr_text = err;
    in.hosts[i].timed_out = timed_out;
  };
  in.ssh_identity = "/k/id";
  kill(0, 255, "root@h1: Permission denied (publickey).");
  kill(1, 255, "ssh: connect to host h2 port 22: Connection refused");
  kill(2, -1, "", true);
  Report rep = build_report(in);
  EXPECT_EQ(find(rep.rows, "ssh", {"h1"})->fix, "ssh-copy-id -i /k/id.pub h1");
  EXPECT_NE(find(rep.rows, "ssh", {"h2"})->fix.find("start sshd on h2"), std::string::npos);
  EXPECT_NE(find(rep.rows, "ssh", {"h3"})->detail.find("no answer"), std::string::npos);
  // Everything that needed the probe is skipped, not failed twice.
  EXPECT_EQ(find(rep.rows, "mpi", {"h2"})->status, Status::kSkip);
  EXPECT_EQ(find(rep.rows, "hpctrain", {"h2"})->status, Status::kSkip);
  EXPECT_EQ(find(rep.rows, "ports", {"h1", "h2"})->status, Status::kSkip);
  EXPECT_EQ(failing(rep).size(), 3u);
}

TEST(DoctorChecks, ProbeMissingOnAHostIsAnHpctrainFailureNotSsh) {
  DoctorInput in = healthy();
  in.hosts[1].facts.reset();
  in.hosts[1].exit_code = 127;
  in.hosts[1].stderr_text = "sh: 1: exec: /opt/hpctrain/bin/hpctrain: not found";
  Report rep = build_report(in);
  EXPECT_EQ(find(rep.rows, "ssh", {"h2"})->status, Status::kOk);
  const Row* r = find(rep.rows, "hpctrain", {"h2"});
  EXPECT_EQ(r->status, Status::kFail);
  EXPECT_NE(r->detail.find("not found"), std::string::npos);
  EXPECT_EQ(r->fix.rfind("install this hpctrain at the same path: scp /opt/hpctrain/bin/hpctrain h2:", 0), 0u);
}

TEST(DoctorChecks, DifferentBuildOrVersionOrPathIsNamed) {
  DoctorInput in = healthy();
  in.hosts[0].facts->build_sha256 = std::string(64, 'b');
  in.hosts[1].facts->version = "0.2.0";
  in.hosts[2].facts->exe = "/usr/local/bin/hpctrain";
  auto rows = check_hpctrain(in);
  EXPECT_NE(rows[0].detail.find("a different build"), std::string::npos);
  EXPECT_NE(rows[0].detail.find("bbbbbbbbbbbb"), std::string::npos);
  EXPECT_NE(rows[1].detail.find("version 0.2.0"), std::string::npos);
  EXPECT_NE(rows[2].detail.find("runs /usr/local/bin/hpctrain"), std::string::npos);
  for (const auto& r : rows) {
    EXPECT_EQ(r.status, Status::kFail);
    EXPECT_NE(r.fix.find("scp /opt/hpctrain/bin/hpctrain"), std::string::npos);
  }
}

TEST(DoctorChecks, MpiMismatchNamesOpenMpiVersusMpichOnTheOddHost) {
  DoctorInput in = healthy();
  in.hosts[1].facts->mpi = {true, "MPICH", "4.0.2", "/usr/bin/mpirun", "/usr/bin/mpirun.mpich", ""};
  auto rows = check_mpi(in);
  EXPECT_EQ(rows[0].status, Status::kOk);
  EXPECT_EQ(rows[2].status, Status::kOk);
  EXPECT_EQ(rows[1].status, Status::kFail);
  EXPECT_EQ(rows[1].detail, "MPICH vs Open MPI: MPICH 4.0.2 on h2, Open MPI 4.1.4 on h1, h3 "
                            "(they cannot start one job)");
  EXPECT_NE(rows[1].fix.find("apt-get install openmpi-bin on h2"), std::string::npos);
}

TEST(DoctorChecks, MpiVersionMismatchAndMissingMpi) {
  DoctorInput in = healthy();
  in.hosts[0].facts->mpi.version = "4.0.3";
  in.hosts[2].facts->mpi = {false, "", "", "", "", "no mpirun in PATH (/usr/bin:/bin)"};
  auto rows = check_mpi(in);
  // h1 and h2 disagree 1:1; the tie goes to the first listed, so h2 is named.
  EXPECT_EQ(rows[0].status, Status::kOk);
  EXPECT_EQ(rows[1].status, Status::kFail);
  EXPECT_NE(rows[1].detail.find("Open MPI 4.1.4 on h2, Open MPI 4.0.3 on h1"), std::string::npos);
  EXPECT_EQ(rows[2].status, Status::kFail);
  EXPECT_NE(rows[2].detail.find("no mpirun in PATH"), std::string::npos);
  EXPECT_NE(rows[2].fix.find("apt-get install openmpi-bin on h3"), std::string::npos);
}

TEST(DoctorChecks, SharedDirNotSharedOnOneHostIsReportedOnThatHost) {
  DoctorInput in = healthy();
  // h2 writes into its own private directory: nobody sees its token, it sees none.
  in.hosts[1].tokens_seen.clear();
  in.hosts[0].tokens_seen = {2};
  in.hosts[2].tokens_seen = {0};
  auto rows = check_shared_dir(in);
  EXPECT_EQ(rows[0].status, Status::kOk);
  EXPECT_EQ(rows[2].status, Status::kOk);
  EXPECT_EQ(rows[1].status, Status::kFail);
  EXPECT_NE(rows[1].detail.find("not the directory h1, h3 share"), std::string::npos);
  EXPECT_EQ(rows[1].fix, "mount the shared file system at /shared on h2 (as on h1, h3)");
}

TEST(DoctorChecks, SharedDirMissingOrNoGroupAtAll) {
  DoctorInput in = healthy();
  in.hosts[0].facts->token_written = false;
  in.hosts[0].facts->token_error = "cannot write /shared/.x.tmp: No such file or directory";
  in.hosts[1].tokens_seen = {2};
  in.hosts[2].tokens_seen = {1};
  auto rows = check_shared_dir(in);
  EXPECT_EQ(rows[0].status, Status::kFail);
  EXPECT_NE(rows[0].fix.find("create /shared on h1"), std::string::npos);
  EXPECT_EQ(rows[1].status, Status::kOk);
  // Two hosts, each alone: no directory is shared, both fail.
  DoctorInput two = healthy(2);
  two.hosts[0].tokens_seen.clear();
  two.hosts[1].tokens_seen.clear();
  auto r2 = check_shared_dir(two);
  EXPECT_EQ(r2[0].status, Status::kFail);
  EXPECT_EQ(r2[1].status, Status::kFail);
  // Not asked: no rows.
  DoctorInput none = healthy();
  none.shared_dir.clear();
  EXPECT_TRUE(check_shared_dir(none).empty());
}

TEST(DoctorChecks, BlockedPortBetweenOnePairNamesThePairAndTheRule) {
  DoctorInput in = healthy();
  for (auto& c : in.connects) {
    if (c.from == 0 && c.to == 2 && c.port == 29501) {
      c.ok = false;
      c.error = "Connection refused";
    }
  }
  Report rep = build_report(in);
  auto fails = failing(rep);
  ASSERT_EQ(fails.size(), 1u);
  EXPECT_EQ(fails[0]->hosts, (std::vector<std::string>{"h1", "h3"}));
  EXPECT_NE(fails[0]->detail.find("29501 (Connection refused)"), std::string::npos);
  EXPECT_EQ(fails[0]->fix, "on h3 allow TCP 29500:29501 from h1, e.g. iptables -I INPUT -p tcp --dport "
                           "29500:29501 -s 10.0.0.1 -j ACCEPT");
}

TEST(DoctorChecks, ClockResourcesAndBlasWarnings) {
  DoctorInput in = healthy();
  in.hosts[0].clock_skew_s = 2.0;
  in.hosts[1].clock_skew_s = -120.0;
  in.hosts[2].facts->blas = {"/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0", "reference", ""};
  in.hosts[2].facts->mem_available = 100 << 20;
  auto clock = check_clock(in);
  EXPECT_EQ(clock[0].status, Status::kWarn);
  EXPECT_EQ(clock[1].status, Status::kFail);
  EXPECT_EQ(clock[2].status, Status::kOk);
  auto blas = check_blas(in);
  EXPECT_EQ(blas[2].status, Status::kWarn);
  EXPECT_EQ(blas[2].fix, "apt-get install libopenblas0-pthread on h3");
  EXPECT_EQ(check_resources(in)[2].status, Status::kWarn);
}

TEST(DoctorChecks, ABlasInsideLibtorchIsFine) {
  DoctorInput in = healthy();
  in.hosts[1].facts->blas = {"/usr/lib/hpctrain/torch/libtorch_cpu.so", "built-in", ""};
  auto blas = check_blas(in);
  EXPECT_EQ(blas[1].status, Status::kOk);
  EXPECT_EQ(blas[1].fix, "");
  EXPECT_NE(blas[1].detail.find("no system BLAS"), std::string::npos) << blas[1].detail;
}

TEST(DoctorChecks, UserMismatch) {
  DoctorInput in = healthy();
  in.hosts[2].facts->user = "bob";
  auto rows = check_user(in);
  EXPECT_EQ(rows[2].status, Status::kFail);
  EXPECT_NE(rows[2].fix.find("User alice"), std::string::npos);
}

TEST(DoctorChecks, PerfRowsAndMatricesOnlyInFullMode) {
  DoctorInput in = healthy(2);
  in.perf = {{0, 1, 70, 18.5, ""}, {1, 0, -1, -1, "timed out"}};
  std::vector<Matrix> m;
  EXPECT_TRUE(check_perf(in, &m).empty());
  in.quick = false;
  auto rows = check_perf(in, &m);
  ASSERT_EQ(m.size(), 2u);
  EXPECT_DOUBLE_EQ(m[0].values[0][1], 70);
  EXPECT_DOUBLE_EQ(m[1].values[0][1], 18.5);
  EXPECT_LT(m[1].values[1][0], 0);
  EXPECT_EQ(rows[1].status, Status::kWarn);
}

TEST(DoctorChecks, HostKeysNotCheckedOrNotListedFail) {
  DoctorInput in = healthy();
  in.hosts[0].known.strict = "false";
  in.hosts[1].known.found_in.clear();
  in.hosts[2].facts.reset();
  in.hosts[2].exit_code = 255;
  in.hosts[2].stderr_text = "Host key verification failed.";
  Report rep = build_report(in);
  const Row* off = find(rep.rows, "known-host", {"h1"});
  EXPECT_EQ(off->status, Status::kFail);
  EXPECT_NE(off->detail.find("StrictHostKeyChecking=no"), std::string::npos) << off->detail;
  EXPECT_NE(off->fix.find("ssh-keyscan h1"), std::string::npos) << off->fix;
  const Row* missing = find(rep.rows, "known-host", {"h2"});
  EXPECT_EQ(missing->status, Status::kFail);
  EXPECT_NE(missing->detail.find("no known_hosts entry for h2 in /etc/ssh/ssh_known_hosts"), std::string::npos);
  EXPECT_EQ(find(rep.rows, "known-host", {"h3"})->status, Status::kFail);
  // Probed on this host: no ssh, nothing to know.
  DoctorInput local = healthy(1);
  local.hosts[0].local = true;
  local.hosts[0].known = {};
  EXPECT_EQ(find(build_report(local).rows, "known-host", {"h1"})->status, Status::kOk);
}

TEST(DoctorChecks, UidOrGidDifferingFromHereIsNamed) {
  DoctorInput in = healthy();
  in.hosts[2].facts->uid = 2001;
  Report rep = build_report(in);
  auto bad = failing(rep);
  ASSERT_EQ(bad.size(), 1u);
  EXPECT_EQ(bad[0]->check, "ids");
  EXPECT_EQ(bad[0]->hosts[0], "h3");
  EXPECT_NE(bad[0]->detail.find("alice is uid 2001 gid 2000 on h3, uid 2000 gid 2000 here"), std::string::npos)
      << bad[0]->detail;
  EXPECT_NE(bad[0]->fix.find("usermod -u 2000 alice"), std::string::npos) << bad[0]->fix;
}

TEST(DoctorChecks, PackageVersionsDifferingOrMissingOnTheOddHost) {
  DoctorInput in = healthy();
  in.hosts[1].facts->packages["hpctrain"] = "0.1.0-0";
  in.hosts[2].facts->packages.erase("libtorch1.13");
  Report rep = build_report(in);
  EXPECT_EQ(find(rep.rows, "packages", {"h1"})->status, Status::kOk);
  const Row* old = find(rep.rows, "packages", {"h2"});
  EXPECT_EQ(old->status, Status::kFail);
  EXPECT_NE(old->detail.find("hpctrain 0.1.0-0 (0.1.0-1 on h1, h3)"), std::string::npos) << old->detail;
  EXPECT_NE(old->fix.find("apt-get install hpctrain=0.1.0-1"), std::string::npos) << old->fix;
  const Row* none = find(rep.rows, "packages", {"h3"});
  EXPECT_EQ(none->status, Status::kFail);
  EXPECT_NE(none->detail.find("libtorch1.13 not installed (1.13.1+dfsg-4 on h1, h2)"), std::string::npos)
      << none->detail;
}

}  // namespace
}  // namespace hpct::doctor
