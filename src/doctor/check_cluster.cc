// Checks of what `hpctrain cluster setup` makes equal on every host: the
// host key the head knows, the training user's ids, the Debian packages.
#include <algorithm>
#include <map>

#include "doctor/checks.h"

namespace hpct::doctor {
namespace {

std::string keyscan_fix(const std::string& host) {
  return "list " + host + "'s key for ssh: ssh-keyscan " + host +
         " >> ~/.ssh/known_hosts after checking it (hpctrain cluster setup fills /etc/ssh/ssh_known_hosts)";
}

}  // namespace

std::vector<Row> check_known_host(const DoctorInput& in) {
  std::vector<Row> rows;
  for (const auto& h : in.hosts) {
    Row r{{h.name}, "known-host", Status::kOk, "", ""};
    const KnownHost& k = h.known;
    if (h.local) {
      r.detail = "this host: no ssh";
    } else if (contains(h.stderr_text, "Host key verification failed") ||
               contains(h.stderr_text, "IDENTIFICATION HAS CHANGED")) {
      r.status = Status::kFail;
      r.detail = "ssh refused " + h.name + "'s host key: unknown or changed";
      r.fix = keyscan_fix(h.name);
    } else if (!k.checked) {
      r.status = Status::kSkip;
      r.detail = "not checked: " + (k.error.empty() ? std::string("no lookup") : k.error);
    } else if (k.strict == "false" || k.strict == "no") {
      r.status = Status::kFail;
      r.detail = "ssh to " + h.name + " runs with StrictHostKeyChecking=no: its host key is never checked";
      r.fix = "drop StrictHostKeyChecking=no and " + keyscan_fix(h.name);
    } else if (k.found_in.empty()) {
      r.status = Status::kFail;
      r.detail = "no known_hosts entry for " + k.lookup + " in " + (k.files.empty() ? "any file" : join(k.files));
      r.fix = keyscan_fix(h.name);
    } else {
      r.detail = k.lookup + " listed in " + k.found_in + " (StrictHostKeyChecking " + k.strict + ")";
    }
    rows.push_back(r);
  }
  return rows;
}

std::vector<Row> check_ids(const DoctorInput& in) {
  std::vector<Row> rows;
  const HeadFacts& me = in.head;
  for (const auto& h : in.hosts) {
    if (!probed(h)) {
      rows.push_back(skipped_row(h, "ids"));
      continue;
    }
    const HostFacts& f = *h.facts;
    std::string ids = "uid " + std::to_string(f.uid) + " gid " + std::to_string(f.gid);
    std::string mine = "uid " + std::to_string(me.uid) + " gid " + std::to_string(me.gid);
    if (f.uid < 0 || me.uid < 0) {
      rows.push_back({{h.name}, "ids", Status::kSkip, "not reported by this hpctrain build", ""});
    } else if (f.user != me.user) {
      rows.push_back({{h.name}, "ids", Status::kSkip, "another user there (see user)", ""});
    } else if (f.uid != me.uid || f.gid != me.gid) {
      rows.push_back({{h.name}, "ids", Status::kFail,
                      f.user + " is " + ids + " on " + h.name + ", " + mine +
                          " here: files on the shared directory change owner between hosts",
                      "on " + h.name + ": usermod -u " + std::to_string(me.uid) + " " + f.user + " && groupmod -g " +
                          std::to_string(me.gid) + " " + f.user +
                          " (then chown its files); hpctrain cluster setup keeps the ids equal"});
    } else {
      rows.push_back({{h.name}, "ids", Status::kOk, f.user + " " + ids, ""});
    }
  }
  return rows;
}

std::vector<Row> check_packages(const DoctorInput& in) {
  // Per package, the version most hosts have (ties: the first listed host's).
  std::map<std::string, std::map<std::string, std::vector<std::string>>> seen;  // pkg -> version -> hosts
  std::vector<std::string> probed_hosts;
  for (const auto& h : in.hosts) {
    if (!probed(h)) continue;
    probed_hosts.push_back(h.name);
    for (const auto& [pkg, ver] : h.facts->packages) seen[pkg][ver].push_back(h.name);
  }
  std::map<std::string, std::string> reference;
  for (const auto& [pkg, versions] : seen) {
    size_t best = 0;
    for (const auto& h : in.hosts) {  // first listed wins ties
      for (const auto& [ver, hosts] : versions) {
        if (hosts.size() > best && std::find(hosts.begin(), hosts.end(), h.name) != hosts.end()) {
          best = hosts.size();
          reference[pkg] = ver;
        }
      }
    }
  }
  std::vector<Row> rows;
  for (const auto& h : in.hosts) {
    if (!probed(h)) {
      rows.push_back(skipped_row(h, "packages"));
      continue;
    }
    const auto& mine = h.facts->packages;
    std::string problems, install, have;
    for (const auto& [pkg, ver] : reference) {
      const auto& holders = seen[pkg][ver];
      auto it = mine.find(pkg);
      if (it == mine.end()) {
        problems += (problems.empty() ? "" : "; ") + pkg + " not installed (" + ver + " on " + join(holders) + ")";
      } else if (it->second != ver) {
        problems += (problems.empty() ? "" : "; ") + pkg + " " + it->second + " (" + ver + " on " + join(holders) + ")";
      } else {
        have += (have.empty() ? "" : ", ") + pkg + " " + ver;
        continue;
      }
      install += " " + pkg + "=" + ver;
    }
    if (!problems.empty()) {
      rows.push_back({{h.name}, "packages", Status::kFail, "on " + h.name + ": " + problems,
                      "on " + h.name + ": apt-get install" + install +
                          " (hpctrain cluster setup installs the same versions everywhere)"});
    } else {
      rows.push_back({{h.name}, "packages", Status::kOk, have.empty() ? "no tracked Debian packages" : have, ""});
    }
  }
  return rows;
}

}  // namespace hpct::doctor
