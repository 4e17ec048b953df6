// Unit tests of the cluster layer: options checked before any host is
// contacted, the inventory written from a hostfile, the ansible-playbook
// command line, and the run summary the progress callback leaves behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>

#include "cluster/ansible_run.h"
#include "cluster/auto_bundle.h"
#include "cluster/inventory.h"
#include "cluster/run_summary.h"
#include "cluster/setup_options.h"
#include "core/error.h"

namespace hpct::cluster {
namespace {

namespace fs = std::filesystem;

// A resolver that knows a fixed table, as a test cluster's DNS would.
Resolver table_resolver() {
  return [](const std::string& name, std::string* error) -> std::vector<std::string> {
    if (name == "node1") return {"10.0.0.1"};
    if (name == "node2.lan") return {"10.0.0.2"};
    if (name == "twin") return {"10.0.0.1"};
    *error = "Name or service not known";
    return {};
  };
}

launch::LocalIdentity head() {
  launch::LocalIdentity id;
  id.names = {"head"};
  id.addresses = {"127.0.0.1", "10.0.0.254"};
  return id;
}

// The message of the InvalidArgument fn throws ("" when it throws none).
template <typename Fn>
std::string invalid(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    return e.what();
  }
  return "";
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/hpct-cluster-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ + "/" + name) << text;
    return path_ + "/" + name;
  }

 private:
  std::string path_;
};

std::vector<launch::HostEntry> three_hosts() {
  return launch::parse_hostfile_text("node1 slots=2\nnode2.lan:2\n10.0.0.3\n", "hosts");
}

SetupOptions bundle_options(const TempDir& dir) {
  dir.write("Packages", "Package: hpctrain\nVersion: 0.1.0\n");
  SetupOptions o;
  o.hostfile = "hosts";
  o.user = "alice";
  o.packages = parse_package_source("bundle:" + dir.path());
  return o;
}

TEST(ClusterInventory, HostsFromTheLaunchHostfileSyntax) {
  auto hosts = inventory_hosts(three_hosts(), table_resolver(), head());
  ASSERT_EQ(hosts.size(), 3u);
  EXPECT_EQ(hosts[0].name, "node1");
  EXPECT_EQ(hosts[0].address, "10.0.0.1");
  EXPECT_EQ(hosts[0].slots, 2);
  EXPECT_TRUE(hosts[0].by_name);
  EXPECT_EQ(hosts[1].address, "10.0.0.2");
  EXPECT_EQ(hosts[2].address, "10.0.0.3");
  EXPECT_FALSE(hosts[2].by_name);  // listed by address: keeps its own name
  EXPECT_FALSE(hosts[2].local);
}

TEST(ClusterInventory, UnresolvableNameIsNamedWithItsLine) {
  auto entries = launch::parse_hostfile_text("node1\nnode7\n", "hosts");
  std::string msg = invalid([&] { inventory_hosts(entries, table_resolver(), head()); });
  EXPECT_NE(msg.find("hosts:2"), std::string::npos) << msg;
  EXPECT_NE(msg.find("node7 does not resolve"), std::string::npos) << msg;
  EXPECT_NE(msg.find("/etc/hosts"), std::string::npos) << msg;
}

TEST(ClusterInventory, TwoEntriesForOneAddressAreRefused) {
  auto entries = launch::parse_hostfile_text("node1\ntwin\n", "hosts");
  std::string msg = invalid([&] { inventory_hosts(entries, table_resolver(), head()); });
  EXPECT_NE(msg.find("twin is 10.0.0.1, like node1"), std::string::npos) << msg;
}

TEST(ClusterInventory, TheHeadItselfUsesTheLocalConnection) {
  auto entries = launch::parse_hostfile_text("10.0.0.254\n10.0.0.3\n", "hosts");
  auto hosts = inventory_hosts(entries, table_resolver(), head());
  EXPECT_TRUE(hosts[0].local);
  EXPECT_FALSE(hosts[1].local);
  TempDir dir;
  auto inv = inventory_json(hosts, bundle_options(dir), "/st", "");
  EXPECT_EQ(inv["all"]["hosts"]["10.0.0.254"]["ansible_connection"], "local");
  EXPECT_FALSE(inv["all"]["hosts"]["10.0.0.3"].contains("ansible_connection"));
}

TEST(ClusterInventory, JsonCarriesEverySettingTheRolesRead) {
  TempDir dir;
  SetupOptions o = bundle_options(dir);
  o.identity = "/root/.ssh/id_ed25519";
  o.uid = 2000;
  o.shared_dir = "/shared";
  o.slurm = true;
  o.scratch_dir = "/mnt/parallel";
  o.scratch_ram = true;
  o.scratch_size = "4G";
  auto hosts = inventory_hosts(three_hosts(), table_resolver(), head());
  auto inv = inventory_json(hosts, o, "/st", "");
  const auto& v = inv["all"]["vars"];
  EXPECT_EQ(v["ansible_user"], "root");
  EXPECT_EQ(v["ansible_ssh_private_key_file"], "/root/.ssh/id_ed25519");
  std::string args = v["ansible_ssh_common_args"];
  EXPECT_NE(args.find("UserKnownHostsFile=/st/admin_known_hosts"), std::string::npos) << args;
  EXPECT_NE(args.find("StrictHostKeyChecking=accept-new"), std::string::npos) << args;
  EXPECT_EQ(v["hpct_user"], "alice");
  EXPECT_EQ(v["hpct_uid"], 2000);
  EXPECT_EQ(v["hpct_shared_dir"], "/shared");
  EXPECT_EQ(v["hpct_shared_from"], "node1");  // the first host by default
  EXPECT_EQ(v["hpct_packages"], "bundle");
  EXPECT_EQ(v["hpct_bundle_dir"], dir.path());
  EXPECT_EQ(v["hpct_slurm"], true);
  EXPECT_EQ(v["hpct_scratch_dir"], "/mnt/parallel");
  EXPECT_EQ(v["hpct_scratch_type"], "glusterfs");
  EXPECT_EQ(v["hpct_scratch_size"], "4G");
  EXPECT_EQ(v["hpct_scratch_ram"], true);
  EXPECT_EQ(v["hpct_bundle_features"].get<std::vector<std::string>>(),
            std::vector<std::string>({"sshfs", "nfs", "slurm", "glusterfs"}));
  EXPECT_EQ(v["hpct_state_dir"], "/st");
  EXPECT_EQ(inv["all"]["hosts"]["node2.lan"]["ansible_host"], "10.0.0.2");
  EXPECT_EQ(inv["all"]["hosts"]["node2.lan"]["hpct_slots"], 2);
  EXPECT_EQ(inv["all"]["hosts"]["node2.lan"]["hpct_set_hostname"], true);
  EXPECT_EQ(inv["all"]["hosts"]["10.0.0.3"]["hpct_set_hostname"], false);
}

TEST(ClusterOptions, PackageSources) {
  EXPECT_EQ(parse_package_source("online").kind, PackageSource::Kind::kOnline);
  auto p = parse_package_source("proxy");
  EXPECT_EQ(p.kind, PackageSource::Kind::kProxy);
  EXPECT_EQ(p.proxy_url, "");
  EXPECT_EQ(parse_package_source("proxy:http://10.0.0.254:3142").proxy_url, "http://10.0.0.254:3142");
  EXPECT_NE(invalid([] { parse_package_source("proxy:10.0.0.254"); }).find("http://"), std::string::npos);
  EXPECT_NE(invalid([] { parse_package_source("mirror"); }).find("bundle:DIR"), std::string::npos);
  TempDir empty;
  std::string msg = invalid([&] { parse_package_source("bundle:" + empty.path()); });
  EXPECT_NE(msg.find("no Packages index"), std::string::npos) << msg;
  EXPECT_NE(invalid([] { parse_package_source("bundle:/no/such/dir"); }).find("package-bundle.sh"),
            std::string::npos);
  auto made = parse_package_source("bundle");  // setup makes it
  EXPECT_EQ(made.kind, PackageSource::Kind::kBundle);
  EXPECT_EQ(made.bundle_dir, "");
}

TEST(ClusterOptions, ScratchErrorsNameTheOptionAndTheFix) {
  TempDir dir;
  auto hosts = three_hosts();
  auto check = [&](const std::function<void(SetupOptions&)>& change) {
    SetupOptions o = bundle_options(dir);
    o.scratch_dir = "/mnt/parallel";
    change(o);
    return invalid([&] { validate(o, hosts); });
  };
  EXPECT_EQ(check([](SetupOptions&) {}), "");
  EXPECT_EQ(check([](SetupOptions& o) {
              o.scratch_ram = true;
              o.scratch_size = "4G";
            }),
            "");
  EXPECT_NE(check([](SetupOptions& o) { o.scratch_dir = "parallel"; }).find("--scratch-dir parallel: give an absolute"),
            std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) { o.shared_dir = "/mnt/parallel"; }).find("also --shared-dir"),
            std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) { o.scratch_type = "beegfs"; }).find("choose glusterfs"), std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) {
              o.scratch_ram = true;
              o.scratch_size = "4 gigs";
            }).find("e.g. 4G"),
            std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) { o.scratch_size = "4G"; }).find("add --scratch-ram"), std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) {
              o.scratch_dir = "";
              o.scratch_ram = true;
            }).find("need --scratch-dir"),
            std::string::npos);
  // A bundle setup makes itself needs hpctrain's .deb.
  EXPECT_NE(check([](SetupOptions& o) { o.packages = parse_package_source("bundle"); }).find("--deb FILE"),
            std::string::npos);
}

TEST(ClusterAutoBundle, WhatTheRolesInstallAndTheCommand) {
  SetupOptions o;
  EXPECT_TRUE(package_features(o).empty());
  o.shared_dir = "/shared";
  EXPECT_EQ(package_features(o), std::vector<std::string>({"sshfs", "nfs"}));  // auto: the hosts' kernels decide
  o.shared_type = "sshfs";
  o.slurm = true;
  o.scratch_dir = "/mnt/parallel";
  EXPECT_EQ(package_features(o), std::vector<std::string>({"sshfs", "slurm", "glusterfs"}));
  o.deb = "/b/hpctrain_1_amd64.deb";
  std::vector<std::string> want = {"bash", "/s/package-bundle.sh", "/st/bundle", "--deb", "/b/hpctrain_1_amd64.deb",
                                   "--for", "sshfs", "--for", "slurm", "--for", "glusterfs"};
  EXPECT_EQ(bundle_command(o, package_features(o), "/s/package-bundle.sh", "/st/bundle"), want);
  // A run with fewer features reuses the bundle; one with a feature it lacks adds it.
  EXPECT_EQ(bundle_features({"sshfs"}, {"sshfs", "slurm"}), std::vector<std::string>({"sshfs", "slurm"}));
  EXPECT_EQ(bundle_features({"glusterfs"}, {"sshfs"}), std::vector<std::string>({"sshfs", "glusterfs"}));
  // Another .deb is another bundle.
  std::string before = bundle_inputs(o, "/s/package-bundle.sh");
  o.deb = "/b/hpctrain_2_amd64.deb";
  EXPECT_NE(bundle_inputs(o, "/s/package-bundle.sh"), before);
  // The source tree's script is found beside its playbooks.
  std::string script = find_bundle_script(HPCT_ANSIBLE_SOURCE_DIR);
  EXPECT_NE(script.find("scripts/package-bundle.sh"), std::string::npos) << script;
  std::string msg = invalid([] { find_bundle_script("/nowhere/ansible"); });
  EXPECT_NE(msg.find("--packages bundle:DIR"), std::string::npos) << msg;
}

TEST(ClusterOptions, ErrorsNameTheOptionAndTheFix) {
  TempDir dir;
  auto hosts = three_hosts();
  auto check = [&](const std::function<void(SetupOptions&)>& change) {
    SetupOptions o = bundle_options(dir);
    change(o);
    return invalid([&] { validate(o, hosts); });
  };
  EXPECT_EQ(check([](SetupOptions&) {}), "");
  EXPECT_NE(check([](SetupOptions& o) { o.user = "Alice Smith"; }).find("--user"), std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) { o.user = "root"; }).find("not root"), std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) { o.uid = 500; }).find("1000 to 59999"), std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) { o.shared_dir = "shared"; }).find("absolute"), std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) { o.shared_dir = "/"; }).find("--shared-dir"), std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) { o.shared_from = "node1"; }).find("need --shared-dir"), std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) {
              o.shared_dir = "/shared";
              o.shared_from = "node9";
            }).find("--shared-from node9 is not in hosts"),
            std::string::npos);
  EXPECT_EQ(check([](SetupOptions& o) {
              o.shared_dir = "/shared";
              o.shared_from = "10.0.0.3";
            }),
            "");
  EXPECT_NE(check([](SetupOptions& o) {
              o.shared_dir = "/shared";
              o.shared_type = "cifs";
            }).find("nfs, sshfs or existing"),
            std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) { o.identity = "/no/such/key"; }).find("-i /no/such/key"), std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) { o.packages = parse_package_source("online"); }).find("--deb FILE"),
            std::string::npos);
  EXPECT_NE(check([](SetupOptions& o) {
              o.packages = parse_package_source("online");
              o.deb = "/no/such.deb";
            }).find("make package"),
            std::string::npos);
}

TEST(ClusterOptions, StateFolderBesideTheHostfile) {
  SetupOptions o;
  o.hostfile = "/etc/cluster/hosts";
  EXPECT_EQ(state_dir_for(o), "/etc/cluster/hosts.cluster");
  o.state_dir = "/var/lib/c1";
  EXPECT_EQ(state_dir_for(o), "/var/lib/c1");
}

TEST(ClusterAnsible, CommandLineAndEnvironment) {
  TempDir dir;
  SetupOptions o = bundle_options(dir);
  auto c = playbook_command(o, RunMode::kSetup, "/pb", "/st", 3);
  std::vector<std::string> want = {"ansible-playbook", "-i", "/st/inventory.json", "/pb/site.yml", "--forks", "3"};
  EXPECT_EQ(c.argv, want);
  EXPECT_EQ(c.env["ANSIBLE_CONFIG"], "/pb/ansible.cfg");
  EXPECT_EQ(c.env["ANSIBLE_HOME"], "/st/ansible");  // nothing in the head's ~/.ansible
  EXPECT_EQ(c.env["HPCTRAIN_ANSIBLE_SUMMARY"], "/st/last-run.json");
  auto dry = playbook_command(o, RunMode::kDryRun, "/pb", "/st", 3);
  EXPECT_NE(std::find(dry.argv.begin(), dry.argv.end(), "--check"), dry.argv.end());
  EXPECT_NE(std::find(dry.argv.begin(), dry.argv.end(), "--diff"), dry.argv.end());
  o.forks = 7;
  o.verbosity = 2;
  auto v = playbook_command(o, RunMode::kStatus, "/pb", "/st", 3);
  EXPECT_NE(std::find(v.argv.begin(), v.argv.end(), "7"), v.argv.end());
  EXPECT_NE(std::find(v.argv.begin(), v.argv.end(), "-vv"), v.argv.end());
  EXPECT_EQ(v.env["HPCTRAIN_ANSIBLE_STATUS"], "1");
}

TEST(ClusterAnsible, PlaybooksFoundInstalledOrInTheSourceTree) {
  EXPECT_EQ(find_playbooks("", "/nowhere/bin/hpctrain", HPCT_ANSIBLE_SOURCE_DIR), HPCT_ANSIBLE_SOURCE_DIR);
  TempDir dir;
  fs::create_directories(dir.path() + "/usr/lib/hpctrain");
  fs::create_directories(dir.path() + "/usr/share/hpctrain/ansible");
  dir.write("usr/share/hpctrain/ansible/site.yml", "---\n");
  EXPECT_EQ(find_playbooks("", dir.path() + "/usr/lib/hpctrain/hpctrain", HPCT_ANSIBLE_SOURCE_DIR),
            dir.path() + "/usr/share/hpctrain/ansible");
  std::string msg = invalid([&] { find_playbooks(dir.path(), "/x/hpctrain", "/nowhere"); });
  EXPECT_NE(msg.find("no site.yml"), std::string::npos) << msg;
  msg = invalid([&] { find_playbooks("", "/x/y/hpctrain", "/nowhere"); });
  EXPECT_NE(msg.find("--playbooks"), std::string::npos) << msg;
}

TEST(ClusterAnsible, DoctorRunsAsTheTrainingUserWithCheckedHostKeys) {
  TempDir dir;
  SetupOptions o = bundle_options(dir);
  o.shared_dir = "/shared";
  InventoryHost h;
  h.name = "node1";
  h.address = "10.0.0.1";
  auto argv = doctor_command(o, h, "/st", "/shared");
  std::string line;
  for (const auto& a : argv) line += a + " ";
  EXPECT_NE(line.find("-i /st/id_ed25519"), std::string::npos) << line;
  EXPECT_NE(line.find("StrictHostKeyChecking=yes"), std::string::npos) << line;
  EXPECT_NE(line.find("UserKnownHostsFile=/st/known_hosts"), std::string::npos) << line;
  EXPECT_NE(line.find("-l alice 10.0.0.1"), std::string::npos) << line;
  EXPECT_EQ(argv.back(), "hpctrain doctor --hostfile /etc/hpctrain/hosts --quick --shared-dir /shared");
  EXPECT_EQ(doctor_command(o, h, "/st", "").back(), "hpctrain doctor --hostfile /etc/hpctrain/hosts --quick");
  // One doctor run per shared directory: the shared one, then the scratch file system.
  EXPECT_EQ(doctor_dirs(o), std::vector<std::string>({"/shared"}));
  o.scratch_dir = "/mnt/parallel";
  EXPECT_EQ(doctor_dirs(o), std::vector<std::string>({"/shared", "/mnt/parallel"}));
  o.shared_dir = "";
  EXPECT_EQ(doctor_dirs(o), std::vector<std::string>({"/mnt/parallel"}));
}

TEST(ClusterSummary, FailuresNameHostStepAndFix) {
  const std::string json = R"({"elapsed_s": 12.5, "check_mode": false, "hosts": {
    "node1": {"changed": 3, "failed": false, "unreachable": false, "steps": ["preflight", "hosts"],
              "changed_tasks": ["hosts: Write /etc/hosts"]},
    "node3": {"changed": 0, "failed": true, "unreachable": false, "failed_step": "preflight",
              "failed_task": "Check that the uid and gid are free", "message": "uid 2000 is taken on node3 by user squatter",
              "fix": "give the training user another id with --uid 1001", "steps": ["preflight"]},
    "10.0.0.9": {"unreachable": true, "failed_step": "preflight", "failed_task": "Reach the host",
                 "message": "10.0.0.9 is unreachable", "fix": "check that 10.0.0.9 is up"}}})";
  RunSummary s = parse_run_summary(json, "last-run.json");
  EXPECT_FALSE(s.all_ok());
  EXPECT_EQ(s.total_changed(), 3);
  ASSERT_NE(s.find("node1"), nullptr);
  EXPECT_TRUE(s.find("node1")->ok());
  std::string text = describe_failures(s, {"node1", "node2", "node3", "10.0.0.9"});
  EXPECT_NE(text.find("node3: failed in step preflight"), std::string::npos) << text;
  EXPECT_NE(text.find("uid 2000 is taken on node3 by user squatter"), std::string::npos) << text;
  EXPECT_NE(text.find("fix: give the training user another id"), std::string::npos) << text;
  EXPECT_NE(text.find("10.0.0.9: unreachable"), std::string::npos) << text;
  EXPECT_NE(text.find("node2: no step ran"), std::string::npos) << text;
  EXPECT_NE(text.find("configured: node1"), std::string::npos) << text;
  try {
    parse_run_summary("not json", "last-run.json");
    FAIL() << "accepted a broken summary";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kDataCorrupt);
    EXPECT_NE(std::string(e.what()).find("last-run.json"), std::string::npos);
  }
}

}  // namespace
}  // namespace hpct::cluster
