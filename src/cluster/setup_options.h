// What `hpctrain cluster setup` and `cluster status` are asked to do, and
// the checks of those options that need no host (each error names the
// option and how to fix it). Pure values and functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "launch/hostfile.h"

namespace hpct::cluster {

// Where the hosts get their packages: their own mirror, an apt proxy on the
// head (apt-cacher-ng), or a folder of .deb files copied to them.
struct PackageSource {
  enum class Kind { kOnline, kProxy, kBundle };
  Kind kind = Kind::kOnline;
  std::string proxy_url;   // kProxy: "http://10.0.0.254:3142"; empty: the head's address, port 3142
  std::string bundle_dir;  // kBundle: absolute folder with a Packages index; empty: setup makes
                           // one in the state folder (auto_bundle.h)
  bool made_by_setup = false;  // kBundle given without a folder: bundle_dir is STATE/bundle
  const char* name() const;  // "online", "proxy", "bundle"
};

// "online", "proxy", "proxy:http://host:3142", "bundle" or "bundle:DIR". InvalidArgument
// naming the accepted forms; the bundle folder is made absolute and must
// hold a Packages or Packages.gz index.
PackageSource parse_package_source(const std::string& text);

struct SetupOptions {
  std::string hostfile;           // the launch hostfile syntax
  std::string identity;           // -i: the admin's key for ssh_user on every host
  std::string ssh_user = "root";  // who Ansible logs in as
  int ssh_port = 0;               // 0: ssh's default
  std::string user = "hpctrain";  // the training user
  int uid = 0;                    // 0: its uid where it exists, else the first id free everywhere
  std::string shared_dir;         // empty: none
  std::string shared_from;        // a listed host; empty: the first
  std::string shared_type = "auto";  // auto, nfs, sshfs, existing
  bool slurm = false;
  std::string scratch_dir;        // a parallel scratch file system at this path; empty: none
  std::string scratch_type = "glusterfs";
  std::string scratch_size;       // tmpfs size of each host's RAM brick ("4G"); empty: tmpfs's default
  bool scratch_ram = false;       // bricks on tmpfs (scratch: gone when a host restarts)
  PackageSource packages;
  std::string deb;                // the hpctrain .deb (online and proxy)
  bool dry_run = false;
  int forks = 0;                  // 0: one per host (at most 32)
  std::string state_dir;          // empty: "<hostfile>.cluster"
  std::string playbooks;          // empty: found (find_playbooks)
  double timeout_s = 1800;        // the whole playbook run
  int verbosity = 0;              // > 0: Ansible's own output, -v per level
};

// Checks what can be checked here, before any host is contacted, against
// the parsed hostfile. InvalidArgument naming the option.
void validate(const SetupOptions& o, const std::vector<launch::HostEntry>& hosts);

// The state folder: o.state_dir, else "<hostfile>.cluster".
std::string state_dir_for(const SetupOptions& o);

// What the roles install besides the base packages, by feature (the keys of
// hpct_feature_packages in deploy/ansible/roles/packages/defaults/main.yml):
// "sshfs", "nfs", "slurm", "glusterfs". A shared directory of type auto
// needs both sshfs and nfs (which one is decided from the hosts' kernels).
std::vector<std::string> package_features(const SetupOptions& o);

}  // namespace hpct::cluster
