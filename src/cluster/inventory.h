// The Ansible inventory `hpctrain cluster setup` writes from a hostfile
// (launch's syntax: `host slots=N`, `host:N`, `host`). A host listed by name
// is given that name; one listed by address keeps its own. Every host's
// address is resolved here, on the machine running setup, because that is
// the address Ansible, ssh_known_hosts and /etc/hosts will use. Pure
// functions (the resolver is injected); thread-safe.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cluster/setup_options.h"
#include "launch/hostfile.h"

namespace hpct::cluster {

struct InventoryHost {
  std::string name;     // as listed in the hostfile: the inventory name
  std::string address;  // the IPv4 address it is reached at
  int slots = 1;
  bool by_name = false;  // listed by name, not address: the host is given that name
  bool local = false;    // this machine itself: Ansible's local connection
};

// name -> IPv4 addresses, or empty with *error set (doctor::resolve_ipv4).
using Resolver = std::function<std::vector<std::string>(const std::string& name, std::string* error)>;

// The hostfile's hosts with their addresses. InvalidArgument naming the
// host and its hostfile line when a name does not resolve or two entries
// are one address.
std::vector<InventoryHost> inventory_hosts(const std::vector<launch::HostEntry>& entries,
                                           const Resolver& resolve, const launch::LocalIdentity& self);

// The inventory as JSON (Ansible's yaml inventory reads .json files): the
// settings every role reads (see deploy/ansible/inventory.example.yml) and
// one entry per host. proxy_url is the resolved proxy for --packages proxy.
nlohmann::ordered_json inventory_json(const std::vector<InventoryHost>& hosts, const SetupOptions& o,
                                      const std::string& state_dir, const std::string& proxy_url);

// True for a dotted quad ("10.0.0.1").
bool is_ipv4_address(const std::string& text);

}  // namespace hpct::cluster
