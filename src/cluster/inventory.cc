#include "cluster/inventory.h"

#include <arpa/inet.h>

#include <algorithm>

#include "core/error.h"

namespace hpct::cluster {

bool is_ipv4_address(const std::string& text) {
  in_addr a{};
  return ::inet_pton(AF_INET, text.c_str(), &a) == 1;
}

std::vector<InventoryHost> inventory_hosts(const std::vector<launch::HostEntry>& entries,
                                           const Resolver& resolve, const launch::LocalIdentity& self) {
  std::vector<InventoryHost> out;
  for (const auto& e : entries) {
    InventoryHost h;
    h.name = e.name;
    h.slots = e.slots;
    h.by_name = !is_ipv4_address(e.name);
    if (h.by_name) {
      std::string error;
      auto addrs = resolve(e.name, &error);
      if (addrs.empty()) {
        throw_invalid_argument(e.origin + ": " + e.name + " does not resolve here (" + error + "): add '<address> " +
                               e.name + "' to /etc/hosts on this machine, or list the host by its address");
      }
      h.address = addrs[0];
    } else {
      h.address = e.name;
    }
    h.local = h.address.rfind("127.", 0) == 0 ||
              std::find(self.addresses.begin(), self.addresses.end(), h.address) != self.addresses.end();
    for (const auto& other : out) {
      if (other.address == h.address) {
        throw_invalid_argument(e.origin + ": " + e.name + " is " + h.address + ", like " + other.name +
                               "; list each host once");
      }
    }
    out.push_back(h);
  }
  return out;
}

nlohmann::ordered_json inventory_json(const std::vector<InventoryHost>& hosts, const SetupOptions& o,
                                      const std::string& state_dir, const std::string& proxy_url) {
  nlohmann::ordered_json vars;
  vars["ansible_user"] = o.ssh_user;
  // Debian's python3: no interpreter discovery round trip per host.
  vars["ansible_python_interpreter"] = "/usr/bin/python3";
  if (!o.identity.empty()) vars["ansible_ssh_private_key_file"] = o.identity;
  if (o.ssh_port > 0) vars["ansible_port"] = o.ssh_port;
  // The admin's own connections trust each host key on first contact and
  // record it in the state folder only (the head's ~/.ssh is not touched);
  // a key that changes later is refused.
  std::string ssh_args = "-o UserKnownHostsFile=" + state_dir + "/admin_known_hosts -o StrictHostKeyChecking=accept-new";
  if (!o.identity.empty()) ssh_args += " -o IdentitiesOnly=yes";
  vars["ansible_ssh_common_args"] = ssh_args;
  vars["hpct_state_dir"] = state_dir;
  vars["hpct_user"] = o.user;
  vars["hpct_uid"] = o.uid;
  vars["hpct_shared_dir"] = o.shared_dir;
  vars["hpct_shared_type"] = o.shared_type;
  vars["hpct_shared_from"] = o.shared_from.empty() ? hosts.at(0).name : o.shared_from;
  vars["hpct_packages"] = o.packages.name();
  vars["hpct_proxy_url"] = proxy_url;
  vars["hpct_bundle_dir"] = o.packages.bundle_dir;
  vars["hpct_deb"] = o.deb;
  vars["hpct_slurm"] = o.slurm;
  vars["hpct_scratch_dir"] = o.scratch_dir;
  vars["hpct_scratch_type"] = o.scratch_type;
  vars["hpct_scratch_size"] = o.scratch_size;
  vars["hpct_scratch_ram"] = o.scratch_ram;
  vars["hpct_bundle_features"] = package_features(o);
  nlohmann::ordered_json members = nlohmann::ordered_json::object();
  for (const auto& h : hosts) {
    nlohmann::ordered_json v;
    v["ansible_host"] = h.address;
    v["hpct_slots"] = h.slots;
    v["hpct_set_hostname"] = h.by_name;
    if (h.local) {
      v["ansible_connection"] = "local";
    }
    members[h.name] = v;
  }
  nlohmann::ordered_json inv;
  inv["all"]["vars"] = vars;
  inv["all"]["hosts"] = members;
  return inv;
}

}  // namespace hpct::cluster
