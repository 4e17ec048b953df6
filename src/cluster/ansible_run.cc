#include "cluster/ansible_run.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/error.h"
#include "core/fd.h"

namespace hpct::cluster {
namespace {

bool has_site(const std::string& dir) {
  struct stat st{};
  return !dir.empty() && ::stat((dir + "/site.yml").c_str(), &st) == 0;
}

std::string parent(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

}  // namespace

std::string find_playbooks(const std::string& explicit_dir, const std::string& exe,
                           const std::string& source_dir) {
  if (!explicit_dir.empty()) {
    if (!has_site(explicit_dir)) {
      throw_invalid_argument("--playbooks " + explicit_dir + ": no site.yml there; give hpctrain's deploy/ansible folder");
    }
    return explicit_dir;
  }
  // The .deb puts the binaries in /usr/lib/hpctrain and the playbooks in
  // /usr/share/hpctrain/ansible; a bin/ layout has them one level nearer.
  const std::string installed = parent(parent(parent(exe))) + "/share/hpctrain/ansible";
  const std::string beside_bin = parent(parent(exe)) + "/share/hpctrain/ansible";
  if (has_site(installed)) return installed;
  if (has_site(beside_bin)) return beside_bin;
  if (has_site(source_dir)) return source_dir;
  throw_invalid_argument("cannot find hpctrain's playbooks (site.yml) in " + installed + " or " + source_dir +
                         ": give --playbooks DIR (deploy/ansible in the source tree)");
}

PlaybookCommand playbook_command(const SetupOptions& o, RunMode mode, const std::string& playbooks,
                                 const std::string& state_dir, size_t host_count) {
  PlaybookCommand c;
  int forks = o.forks > 0 ? o.forks : static_cast<int>(std::min<size_t>(std::max<size_t>(host_count, 1), 32));
  c.argv = {"ansible-playbook", "-i", state_dir + "/inventory.json", playbooks + "/site.yml",
            "--forks", std::to_string(forks)};
  if (mode == RunMode::kDryRun) {
    c.argv.push_back("--check");
    c.argv.push_back("--diff");
  } else if (mode == RunMode::kStatus) {
    c.argv.push_back("--check");
  }
  if (o.verbosity > 0) c.argv.push_back("-" + std::string(static_cast<size_t>(std::min(o.verbosity, 4)), 'v'));
  c.summary_file = state_dir + "/last-run.json";
  const std::string home = state_dir + "/ansible";
  c.env = {{"ANSIBLE_CONFIG", playbooks + "/ansible.cfg"},
           {"ANSIBLE_HOME", home},
           {"ANSIBLE_LOCAL_TEMP", home + "/tmp"},
           {"ANSIBLE_SSH_CONTROL_PATH_DIR", home + "/cp"},
           {"ANSIBLE_NOCOLOR", "1"},
           {"HPCTRAIN_ANSIBLE_SUMMARY", c.summary_file},
           {"HPCTRAIN_ANSIBLE_STATUS", mode == RunMode::kStatus ? "1" : "0"},
           {"HPCTRAIN_ANSIBLE_SSH_KEY", o.identity}};
  return c;
}

std::string head_address_toward(const std::string& address) {
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s.valid()) throw_io("socket", errno);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(22);
  if (::inet_pton(AF_INET, address.c_str(), &to.sin_addr) != 1) {
    throw_invalid_argument(address + " is not an IPv4 address");
  }
  // A UDP connect sends nothing; it only picks the route and source address.
  if (::connect(s.get(), reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
    throw_io("no route from this machine to " + address, errno);
  }
  sockaddr_in me{};
  socklen_t len = sizeof me;
  if (::getsockname(s.get(), reinterpret_cast<sockaddr*>(&me), &len) != 0) throw_io("getsockname", errno);
  char text[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &me.sin_addr, text, sizeof text);
  return text;
}

std::vector<std::string> doctor_command(const SetupOptions& o, const InventoryHost& on,
                                        const std::string& state_dir, const std::string& dir) {
  std::vector<std::string> argv = {"ssh", "-T",
                                   "-i", state_dir + "/id_ed25519",
                                   "-o", "IdentitiesOnly=yes",
                                   "-o", "UserKnownHostsFile=" + state_dir + "/known_hosts",
                                   "-o", "StrictHostKeyChecking=yes",
                                   "-o", "BatchMode=yes",
                                   "-o", "ConnectTimeout=10",
                                   "-o", "LogLevel=ERROR"};
  if (o.ssh_port > 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(o.ssh_port));
  }
  argv.push_back("-l");
  argv.push_back(o.user);
  argv.push_back(on.address);
  std::string remote = "hpctrain doctor --hostfile /etc/hpctrain/hosts --quick";
  if (!dir.empty()) remote += " --shared-dir " + dir;
  argv.push_back(remote);
  return argv;
}

std::vector<std::string> doctor_dirs(const SetupOptions& o) {
  std::vector<std::string> dirs;
  if (!o.shared_dir.empty()) dirs.push_back(o.shared_dir);
  if (!o.scratch_dir.empty()) dirs.push_back(o.scratch_dir);
  if (dirs.empty()) dirs.push_back("");
  return dirs;
}

}  // namespace hpct::cluster
