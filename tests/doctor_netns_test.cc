// `hpctrain doctor` on a real cluster of network-namespace hosts
// (scripts/netns-cluster.sh, each with its own sshd and /etc/hosts): a
// healthy cluster is ready; each injected fault is reported on the right host
// with its fix line and exit status 1; --json holds the table's verdicts; a
// dead host costs one bounded timeout. Skips with the script's reason where
// namespaces or sshd are unavailable. Every fault is undone by a guard, and
// the cluster torn down, even when an assertion fails.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "netns_hosts.h"
#include "shell_run.h"

namespace {

namespace fs = std::filesystem;

using CmdResult = hpct::test::ShellResult;

CmdResult sh(const std::string& cmd) { return hpct::test::run_shell(cmd); }

// Runs `fn` when it goes out of scope: undoes a fault whatever the test did.
struct Undo {
  std::function<void()> fn;
  ~Undo() { fn(); }
};

class DoctorNetns : public ::testing::Test {
 protected:
  static constexpr const char* kPorts = "29600-29603";

  // One cluster for the whole suite (bringing one up and down takes seconds);
  // every test undoes its own fault.
  static void SetUpTestSuite() {
    name_ = "d" + std::to_string(::getpid() % 10000000);
    cluster_ = std::make_unique<hpct::test::NetnsCluster>(script(), 3, name_, "--etc-hosts");
    const hpct::test::NetnsHosts& c = cluster_->hosts();
    env_ = c.env;
    hosts_ = c.hosts;
    if (!c.skip.empty()) {
      skip_ = c.skip;
      return;
    }
    if (!c.error.empty()) {
      broken_ = c.error;
      return;
    }
    shared_ = "/tmp/hpct-doctor-shared-" + name_;
    fs::create_directories(shared_);
    // The hosts' real keys, so doctor's ssh checks them (StrictHostKeyChecking=yes).
    known_ = "/tmp/hpct-doctor-known-" + name_;
    CmdResult scan = sh("ssh-keyscan -T 5 " + hosts_[0] + " " + hosts_[1] + " " + hosts_[2] + " 2>/dev/null > " + known_);
    if (scan.exit_code != 0 || fs::file_size(known_) == 0) broken_ = "ssh-keyscan of the hosts failed";
  }

  static void TearDownTestSuite() {
    cluster_.reset();  // down, whatever the tests did
    std::error_code ec;
    if (!shared_.empty()) fs::remove_all(shared_, ec);
    if (!known_.empty()) fs::remove(known_, ec);
  }

  void SetUp() override {
    if (!skip_.empty()) GTEST_SKIP() << skip_;
    ASSERT_TRUE(broken_.empty()) << broken_;
  }

  static std::string script() { return std::string(HPCT_SOURCE_DIR) + "/scripts/netns-cluster.sh"; }
  std::string ns(int i) const { return "hpct-" + name_ + "-h" + std::to_string(i); }
  std::string host_list() const { return hosts_[0] + "," + hosts_[1] + "," + hosts_[2]; }

  // hpctrain doctor on the three hosts; JSON on stdout when json is set.
  CmdResult doctor(bool json, bool quick = true, const std::string& connect_timeout = "3",
                   const std::string& extra = "") const {
    std::string cmd = std::string("timeout 120 ") + HPCT_BINARY + " doctor -H " + host_list() +
                      " --shared-dir " + shared_ + " --ports " + kPorts + " -i " + env_.at("NETNS_KEY") +
                      (unchecked_keys_ ? " --ssh-option StrictHostKeyChecking=no --ssh-option UserKnownHostsFile=/dev/null"
                                       : " --ssh-option StrictHostKeyChecking=yes --ssh-option UserKnownHostsFile=" + known_) +
                      " --connect-timeout " + connect_timeout + (quick ? " --quick" : "") + (json ? " --json" : "") +
                      " " + extra + (json ? " 2>/dev/null" : " 2>&1");
    return sh(cmd);
  }

  nlohmann::json doctor_json(CmdResult* run, const std::string& connect_timeout = "3",
                             const std::string& extra = "") const {
    *run = doctor(true, true, connect_timeout, extra);
    return nlohmann::json::parse(run->out);
  }

  // The (single-host) rows of one check about one host that are not ok.
  static std::vector<nlohmann::json> problems(const nlohmann::json& j) {
    std::vector<nlohmann::json> out;
    for (const auto& r : j["rows"]) {
      if (r["status"] == "fail" || r["status"] == "warn") out.push_back(r);
    }
    return out;
  }

  // Every cell is ok except those listed as "host/check" -> expected status.
  void expect_cells(const nlohmann::json& j, const std::map<std::string, std::string>& except) const {
    for (const auto& h : hosts_) {
      for (const auto& c : j["checks"]) {
        std::string key = h + "/" + c.get<std::string>();
        auto it = except.find(key);
        EXPECT_EQ(j["cells"][h][c.get<std::string>()], it == except.end() ? "ok" : it->second) << key;
      }
    }
  }

  static std::string name_;
  static std::map<std::string, std::string> env_;
  static std::vector<std::string> hosts_;
  static std::string shared_;
  static std::string known_;
  static std::string skip_;
  static std::string broken_;
  static std::unique_ptr<hpct::test::NetnsCluster> cluster_;
  bool unchecked_keys_ = false;  // ssh as most test scripts run it: no host key checking
};

std::string DoctorNetns::name_;
std::map<std::string, std::string> DoctorNetns::env_;
std::vector<std::string> DoctorNetns::hosts_;
std::string DoctorNetns::shared_;
std::string DoctorNetns::known_;
std::string DoctorNetns::skip_;
std::string DoctorNetns::broken_;
std::unique_ptr<hpct::test::NetnsCluster> DoctorNetns::cluster_;

TEST_F(DoctorNetns, HealthyClusterIsReadyInUnderTenSecondsQuick) {
  CmdResult run;
  nlohmann::json j = doctor_json(&run);
  EXPECT_EQ(run.exit_code, 0) << run.out;
  EXPECT_TRUE(j["ready"].get<bool>());
  expect_cells(j, {});
  EXPECT_TRUE(problems(j).empty()) << j["rows"].dump(1);
  // 6 ordered pairs, every one ok.
  int pairs = 0;
  for (const auto& r : j["rows"]) pairs += r["hosts"].size() == 2 && r["status"] == "ok";
  EXPECT_EQ(pairs, 6);
  EXPECT_LT(run.seconds, 10.0);
  std::printf("[ measured ] doctor --quick on 3 healthy hosts: %.2f s (wall, whole command)\n", run.seconds);

  // Full mode: the table, with the latency and bandwidth matrices.
  CmdResult full = doctor(false, false);
  EXPECT_EQ(full.exit_code, 0) << full.out;
  EXPECT_NE(full.out.find("READY: 3 host(s), 0 failure(s)"), std::string::npos) << full.out;
  EXPECT_NE(full.out.find("latency_us (us, from row to column)"), std::string::npos) << full.out;
  EXPECT_NE(full.out.find("bandwidth_gbps (Gbit/s, from row to column)"), std::string::npos) << full.out;
  std::printf("[ measured ] doctor (full) on 3 healthy hosts: %.2f s\n%s", full.seconds, full.out.c_str());
}

TEST_F(DoctorNetns, HostKeysNotCheckedFailKnownHost) {
  unchecked_keys_ = true;
  CmdResult run;
  nlohmann::json j = doctor_json(&run);
  EXPECT_EQ(run.exit_code, 1);
  std::map<std::string, std::string> except;
  for (const auto& h : hosts_) except[h + "/known-host"] = "fail";
  expect_cells(j, except);
  for (const auto& p : problems(j)) {
    EXPECT_NE(p["detail"].get<std::string>().find("StrictHostKeyChecking=no"), std::string::npos) << p;
    EXPECT_NE(p["fix"].get<std::string>().find("ssh-keyscan"), std::string::npos) << p;
  }
}

TEST_F(DoctorNetns, SshdStoppedOnOneHost) {
  ASSERT_EQ(sh(script() + " sshd-stop " + name_ + " 2 2>&1").exit_code, 0);
  Undo undo{[&] { sh(script() + " sshd-start " + name_ + " 2 2>&1"); }};
  CmdResult run;
  nlohmann::json j = doctor_json(&run);
  EXPECT_EQ(run.exit_code, 1);
  std::string h2 = hosts_[1];
  // Only the ssh cell fails; what needed h2's probe is skipped, not failed again.
  std::map<std::string, std::string> except = {{h2 + "/ssh", "fail"}};
  for (const char* c : {"user", "ids", "hpctrain", "packages", "mpi", "shared-dir", "ports", "clock", "resources",
                        "blas", "gpu"}) {
    except[h2 + "/" + c] = "skip";
  }
  expect_cells(j, except);
  auto p = problems(j);
  ASSERT_EQ(p.size(), 1u) << j["rows"].dump(1);
  EXPECT_EQ(p[0]["hosts"][0], h2);
  EXPECT_NE(p[0]["detail"].get<std::string>().find("connection refused"), std::string::npos) << p[0];
  EXPECT_EQ(p[0]["fix"], "start sshd on " + h2 + " (sudo systemctl start ssh)");
  // The table says the same, with the fix line under it.
  CmdResult table = doctor(false);
  EXPECT_EQ(table.exit_code, 1);
  EXPECT_NE(table.out.find("FAIL " + h2 + " ssh: connection refused"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("     fix: start sshd on " + h2), std::string::npos) << table.out;
  std::printf("%s", table.out.c_str());
}

TEST_F(DoctorNetns, DifferentBinaryOnOneHost) {
  // A copy of this build with bytes appended: same version, another hash,
  // mounted over the binary's path for host 3's sshd and its sessions only.
  std::string copy = "/tmp/hpct-doctor-other-" + name_;
  fs::copy_file(HPCT_BINARY, copy, fs::copy_options::overwrite_existing);
  { std::ofstream(copy, std::ios::app) << "another build"; }
  Undo undo{[&] {
    sh(script() + " sshd-stop " + name_ + " 3 2>&1");
    sh(script() + " sshd-start " + name_ + " 3 2>&1");
    fs::remove(copy);
  }};
  ASSERT_EQ(sh(script() + " sshd-start-bind " + name_ + " 3 " + copy + " " + HPCT_BINARY + " 2>&1").exit_code, 0);
  CmdResult run;
  nlohmann::json j = doctor_json(&run);
  EXPECT_EQ(run.exit_code, 1);
  expect_cells(j, {{hosts_[2] + "/hpctrain", "fail"}});
  auto p = problems(j);
  ASSERT_EQ(p.size(), 1u) << j["rows"].dump(1);
  EXPECT_EQ(p[0]["check"], "hpctrain");
  EXPECT_EQ(p[0]["hosts"][0], hosts_[2]);
  EXPECT_NE(p[0]["detail"].get<std::string>().find("a different build"), std::string::npos) << p[0];
  EXPECT_EQ(p[0]["fix"].get<std::string>().rfind(std::string("copy this build there: scp ") + HPCT_BINARY + " " +
                                                      hosts_[2] + ":" + HPCT_BINARY, 0),
            0u)
      << p[0];
}

TEST_F(DoctorNetns, SharedDirNotSharedOnOneHost) {
  std::string priv = "/tmp/hpct-doctor-private-" + name_;
  fs::create_directories(priv);
  Undo undo{[&] {
    sh(script() + " sshd-stop " + name_ + " 2 2>&1");
    sh(script() + " sshd-start " + name_ + " 2 2>&1");
    std::error_code ec;
    fs::remove_all(priv, ec);
  }};
  ASSERT_EQ(sh(script() + " sshd-start-bind " + name_ + " 2 " + priv + " " + shared_ + " 2>&1").exit_code, 0);
  CmdResult run;
  nlohmann::json j = doctor_json(&run);
  EXPECT_EQ(run.exit_code, 1);
  expect_cells(j, {{hosts_[1] + "/shared-dir", "fail"}});
  auto p = problems(j);
  ASSERT_EQ(p.size(), 1u) << j["rows"].dump(1);
  EXPECT_EQ(p[0]["hosts"][0], hosts_[1]);
  EXPECT_NE(p[0]["detail"].get<std::string>().find("is not the directory " + hosts_[0] + ", " + hosts_[2] + " share"),
            std::string::npos)
      << p[0];
  EXPECT_EQ(p[0]["fix"], "mount the shared file system at " + shared_ + " on " + hosts_[1] + " (as on " +
                             hosts_[0] + ", " + hosts_[2] + ")");
  // No token is left behind on either side.
  EXPECT_TRUE(fs::is_empty(shared_));
  EXPECT_TRUE(fs::is_empty(priv));
}

TEST_F(DoctorNetns, PortBlockedBetweenOnePairAndJsonMatchesTable) {
  // Host 3 rejects one port of the range, from host 1 only.
  std::string rule = "INPUT -p tcp -s " + hosts_[0] + " --dport 29602 -j REJECT";
  ASSERT_EQ(sh("ip netns exec " + ns(3) + " iptables -I " + rule + " 2>&1").exit_code, 0);
  Undo undo{[&] { sh("ip netns exec " + ns(3) + " iptables -D " + rule + " 2>&1"); }};
  CmdResult run;
  nlohmann::json j = doctor_json(&run);
  EXPECT_EQ(run.exit_code, 1);
  expect_cells(j, {{hosts_[2] + "/ports", "fail"}});
  auto p = problems(j);
  ASSERT_EQ(p.size(), 1u) << j["rows"].dump(1);
  EXPECT_EQ(p[0]["hosts"], nlohmann::json::array({hosts_[0], hosts_[2]}));
  EXPECT_NE(p[0]["detail"].get<std::string>().find("29602 (Connection refused)"), std::string::npos) << p[0];
  EXPECT_EQ(p[0]["fix"], "on " + hosts_[2] + " allow TCP 29600:29603 from " + hosts_[0] +
                             ", e.g. iptables -I INPUT -p tcp --dport 29600:29603 -s " + hosts_[0] + " -j ACCEPT");

  // The table's marks are the JSON's verdicts, cell by cell.
  CmdResult table = doctor(false);
  EXPECT_EQ(table.exit_code, 1);
  std::istringstream lines(table.out);
  std::string line;
  std::vector<std::string> columns;
  int host_rows = 0;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string first;
    words >> first;
    if (first == "host" && columns.empty()) {
      for (std::string c; words >> c;) columns.push_back(c);
      continue;
    }
    if (columns.empty() || !j["cells"].contains(first) || host_rows == 3) continue;
    ++host_rows;
    for (const auto& c : columns) {
      std::string mark;
      words >> mark;
      std::string want = j["cells"][first][c];
      EXPECT_EQ(mark, want == "fail" ? "FAIL" : want == "skip" ? "-" : want) << first << " " << c;
    }
  }
  EXPECT_EQ(host_rows, 3) << table.out;
  EXPECT_EQ(columns, j["checks"].get<std::vector<std::string>>());
  EXPECT_NE(table.out.find("FAIL " + hosts_[0] + " -> " + hosts_[2] + " ports:"), std::string::npos) << table.out;
}

TEST_F(DoctorNetns, HostnameResolvingToLoopbackOnItsHost) {
  // The Debian trap: "127.0.1.1 <hostname>" in host 2's own /etc/hosts. The
  // file is bind-mounted into host 2's sshd, so rewrite it in place.
  std::string path = "/etc/netns/" + ns(2) + "/hosts";
  std::string good;
  {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    good = ss.str();
  }
  ASSERT_FALSE(good.empty());
  char hn[256] = {};
  ::gethostname(hn, sizeof hn - 1);
  { std::ofstream(path, std::ios::trunc) << "127.0.0.1 localhost\n127.0.1.1 " << hn << " h2\n"; }
  Undo undo{[&] { std::ofstream(path, std::ios::trunc) << good; }};
  CmdResult run;
  nlohmann::json j = doctor_json(&run);
  EXPECT_EQ(run.exit_code, 1);
  expect_cells(j, {{hosts_[1] + "/name", "fail"}});
  auto p = problems(j);
  ASSERT_EQ(p.size(), 1u) << j["rows"].dump(1);
  EXPECT_EQ(p[0]["hosts"][0], hosts_[1]);
  EXPECT_NE(p[0]["detail"].get<std::string>().find("resolves to 127.0.1.1"), std::string::npos) << p[0];
  EXPECT_EQ(p[0]["fix"], "on " + hosts_[1] + ", in /etc/hosts change '127.0.1.1 " + hn + " h2' to '" + hosts_[1] +
                             " " + hn + " h2'");
}

TEST_F(DoctorNetns, DeadHostCostsOneBoundedTimeout) {
  // Host 2 silently drops ssh: only ConnectTimeout ends that wait.
  std::string rule = "INPUT -p tcp --dport 22 -j DROP";
  ASSERT_EQ(sh("ip netns exec " + ns(2) + " iptables -I " + rule + " 2>&1").exit_code, 0);
  Undo undo{[&] { sh("ip netns exec " + ns(2) + " iptables -D " + rule + " 2>&1"); }};
  CmdResult run;
  nlohmann::json j = doctor_json(&run, "2", "--probe-timeout 3");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(j["cells"][hosts_[1]]["ssh"], "fail");
  EXPECT_EQ(j["cells"][hosts_[0]]["hpctrain"], "ok");
  EXPECT_EQ(j["cells"][hosts_[2]]["ports"], "ok");
  // One bound (the 3 s probe timeout) plus the healthy hosts' own work.
  EXPECT_LT(run.seconds, 8.0);
  std::printf("[ measured ] doctor with one host dropping ssh: %.2f s\n", run.seconds);
}

}  // namespace
