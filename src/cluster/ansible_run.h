// How hpctrain runs the playbooks: where they are, the ansible-playbook
// command line and environment (all of Ansible's own files on this machine
// go to the state folder), and the ssh line that runs doctor on the cluster
// as the training user. Pure functions (file lookups excepted); thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "cluster/inventory.h"
#include "cluster/setup_options.h"

namespace hpct::cluster {

// The folder holding site.yml: `explicit_dir` when given (InvalidArgument
// when it has no site.yml); else the installed copy beside the executable
// (<exe>/../../../share/hpctrain/ansible: /usr/lib/hpctrain/hpctrain ->
// /usr/share/hpctrain/ansible, as the .deb lays it out); else the
// source tree's deploy/ansible this binary was built from. InvalidArgument
// naming the places looked at when none has it.
std::string find_playbooks(const std::string& explicit_dir, const std::string& exe,
                           const std::string& source_dir);

struct PlaybookCommand {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;
  std::string summary_file;  // the callback's JSON summary
};

enum class RunMode { kSetup, kDryRun, kStatus };

// ansible-playbook -i STATE/inventory.json PLAYBOOKS/site.yml --forks N
// (--check --diff for a dry run, --check for status), with ANSIBLE_CONFIG
// at the playbooks' ansible.cfg and Ansible's home, temp and control
// sockets under STATE/ansible.
PlaybookCommand playbook_command(const SetupOptions& o, RunMode mode, const std::string& playbooks,
                                 const std::string& state_dir, size_t host_count);

// The head's address on the route to `address` (what a host reaches the
// head at), for the apt proxy URL. Io when there is no route.
std::string head_address_toward(const std::string& address);

// ssh to `on` as the training user with the cluster key and the known
// hosts setup recorded (StrictHostKeyChecking=yes), running
// `hpctrain doctor --hostfile /etc/hpctrain/hosts --quick [--shared-dir DIR]`
// (DIR: the shared directory or the scratch file system; empty: none).
std::vector<std::string> doctor_command(const SetupOptions& o, const InventoryHost& on,
                                        const std::string& state_dir, const std::string& dir);

// The directories doctor checks, one run each: the shared directory, then
// the scratch file system (a file written on one host is read on every
// other). One empty entry when there is neither.
std::vector<std::string> doctor_dirs(const SetupOptions& o);

}  // namespace hpct::cluster
