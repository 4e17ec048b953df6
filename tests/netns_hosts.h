// The hosts of a cluster made of network namespaces by
// scripts/netns-cluster.sh: the one fixture the netns suites share. Either
// a CTest fixture brought the cluster up (read_netns_hosts reads its state
// directory), or the suite owns one (NetnsCluster brings it up and down).
// Where the machine forbids namespaces, `skip` holds the script's reason.
#pragma once

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "shell_run.h"

namespace hpct::test {

struct NetnsHosts {
  std::string dir;                           // the state directory, /tmp/hpct-netns-NAME
  std::map<std::string, std::string> env;    // NETNS_NAME, NETNS_HOSTS, NETNS_KEY, NETNS_SUBNET, ...
  std::vector<std::string> hosts;            // the hosts' addresses, host 1 first
  std::string skip;                          // non-empty: no namespaces here, and why
  std::string error;                         // non-empty: the cluster is not usable, and why

  const std::string& name() const { return env.at("NETNS_NAME"); }
  const std::string& key() const { return env.at("NETNS_KEY"); }

  // The launcher's ssh options for the cluster's key (host keys unchecked).
  std::string ssh_options() const {
    return " -i " + key() + " --ssh-option StrictHostKeyChecking=no --ssh-option UserKnownHostsFile=/dev/null ";
  }

  // `-H` with `slots` ranks on each host (0: the host named with no count);
  // one entry a host, from host 1.
  std::string host_option(const std::vector<int>& slots) const {
    std::string s = " -H ";
    for (size_t i = 0; i < slots.size() && i < hosts.size(); ++i) {
      if (i > 0) s += ",";
      s += hosts[i] + (slots[i] > 0 ? ":" + std::to_string(slots[i]) : "");
    }
    return s + " ";
  }

  // Open MPI's settings for mpirun across the hosts (tcp on their subnet,
  // the cluster's ssh, ranks that yield while they wait), as env assignments.
  std::string mpi_env() const {
    const std::string& s = env.at("NETNS_SUBNET");
    return "OMPI_MCA_plm_rsh_agent=" + env.at("NETNS_SSH") + " OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=" + s +
           " OMPI_MCA_oob_tcp_if_include=" + s + " OMPI_MCA_mpi_yield_when_idle=1 ";
  }
};

// KEY=VALUE lines (values may be "quoted"), as the script prints them and
// writes them to STATE/env.
inline std::map<std::string, std::string> parse_netns_env(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string v = line.substr(eq + 1);
    if (v.size() >= 2 && v.front() == '"') v = v.substr(1, v.size() - 2);
    out[line.substr(0, eq)] = v;
  }
  return out;
}

namespace netns_detail {
inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
inline void take_hosts(NetnsHosts& c, size_t n) {
  std::istringstream in(c.env["NETNS_HOSTS"]);
  for (std::string h; in >> h;) c.hosts.push_back(h);
  if (c.hosts.size() != n && c.error.empty()) {
    c.error = "expected " + std::to_string(n) + " namespace hosts, the cluster has " + std::to_string(c.hosts.size()) +
              " (NETNS_HOSTS='" + c.env["NETNS_HOSTS"] + "')";
  }
}
}  // namespace netns_detail

// The cluster a CTest fixture (netns-cluster.sh up N NAME) made, read from
// its state directory, expecting n hosts.
inline NetnsHosts read_netns_hosts(const std::string& dir, size_t n) {
  NetnsHosts c;
  c.dir = dir;
  const std::string skip = netns_detail::slurp(dir + "/skip");
  if (!skip.empty()) {
    c.skip = "network namespaces unavailable: " + skip;
    return c;
  }
  c.env = parse_netns_env(netns_detail::slurp(dir + "/env"));
  if (c.env["NETNS_HOSTS"].empty()) c.error = "netns cluster not up (" + dir + "/env missing)";
  netns_detail::take_hosts(c, n);
  return c;
}

// A cluster this suite owns: up in the constructor (SCRIPT up N NAME EXTRA,
// SCRIPT being scripts/netns-cluster.sh), down in the destructor, whatever
// the tests did.
class NetnsCluster {
 public:
  NetnsCluster(const std::string& script, size_t n, const std::string& name, const std::string& extra = "")
      : script_(script), name_(name) {
    ShellResult up = run_shell(script_ + " up " + std::to_string(n) + " " + name + " " + extra + " 2>&1");
    hosts_.env = parse_netns_env(up.out);
    hosts_.dir = hosts_.env["NETNS_DIR"];
    if (hosts_.env.count("NETNS_SKIP")) {
      hosts_.skip = "no namespace cluster here: " + hosts_.env["NETNS_SKIP"];
      return;
    }
    if (up.exit_code != 0) hosts_.error = "scripts/netns-cluster.sh up failed: " + up.out;
    netns_detail::take_hosts(hosts_, n);
  }
  ~NetnsCluster() { run_shell(script_ + " down " + name_ + " 2>&1"); }
  NetnsCluster(const NetnsCluster&) = delete;
  NetnsCluster& operator=(const NetnsCluster&) = delete;

  const NetnsHosts& hosts() const { return hosts_; }

 private:
  std::string script_, name_;
  NetnsHosts hosts_;
};

}  // namespace hpct::test
