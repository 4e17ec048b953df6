// Checks of who a host is and how we reach it: name, ssh, user, hpctrain.
#include <sstream>

#include "doctor/checks.h"
#include "doctor/net.h"

namespace hpct::doctor {
namespace {

bool any_loopback(const std::vector<std::string>& addrs) {
  for (const auto& a : addrs) {
    if (is_loopback_address(a)) return true;
  }
  return false;
}

// The address a host should map its names to: the one the head reaches it
// by, else its first interface address.
std::string routable_address(const HostOutcome& h) {
  for (const auto& a : h.head_addrs) {
    if (!is_loopback_address(a)) return a;
  }
  if (h.facts && !h.facts->interface_addrs.empty()) return h.facts->interface_addrs[0];
  return "<its LAN address>";
}

// The last non-empty line of ssh's complaints.
std::string last_line(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  }
  return last.empty() ? "no message" : last;
}

// ssh itself failed (exit 255 or no answer) rather than the command it ran.
bool ssh_failed(const HostOutcome& h) {
  return !h.local && !probed(h) && (h.timed_out || h.exit_code == 255);
}

}  // namespace

Row skipped_row(const HostOutcome& h, const std::string& check) {
  return {{h.name}, check, Status::kSkip, "not checked: no probe ran on " + h.name, ""};
}

std::vector<Row> check_name(const DoctorInput& in) {
  std::vector<Row> rows;
  for (const auto& h : in.hosts) {
    Row r{{h.name}, "name", Status::kOk, "", ""};
    if (!h.resolve_error.empty()) {
      r.status = Status::kFail;
      r.detail = "'" + h.name + "' does not resolve here: " + h.resolve_error;
      r.fix = "add '<address> " + h.name + "' to /etc/hosts on this host (or fix DNS)";
      rows.push_back(r);
      continue;
    }
    r.detail = h.name + " -> " + join(h.head_addrs);
    if (h.facts) {
      const HostFacts& f = *h.facts;
      // The trap: the host's own name maps to loopback on the host itself
      // (Debian writes "127.0.1.1 hostname"), so MPI and Gloo ranks there
      // find and advertise a loopback address that no other host can reach.
      std::string bad_name, bad_addr;
      if (!f.interface_addrs.empty() && any_loopback(f.hostname_addrs)) {
        bad_name = f.hostname;
        for (const auto& a : f.hostname_addrs) {
          if (is_loopback_address(a)) bad_addr = a;
        }
      } else if (!h.local && !f.interface_addrs.empty() && any_loopback(f.listed_addrs)) {
        bad_name = h.name;
        for (const auto& a : f.listed_addrs) {
          if (is_loopback_address(a)) bad_addr = a;
        }
      }
      if (!bad_name.empty()) {
        std::string good = routable_address(h);
        // Alone, a host never needs to be reached by another: a warning only.
        bool alone = in.hosts.size() == 1;
        r.status = alone ? Status::kWarn : Status::kFail;
        r.detail = "'" + bad_name + "' resolves to " + bad_addr + " on " + h.name + " itself: MPI and Gloo ranks there " +
                   (alone ? "would advertise loopback in a multi-host job" : "would advertise loopback");
        if (!f.loopback_hosts_line.empty()) {
          std::istringstream words(f.loopback_hosts_line);
          std::string first, rest, w;
          words >> first;
          while (words >> w) rest += " " + w;
          r.fix = "on " + h.name + ", in /etc/hosts change '" + f.loopback_hosts_line + "' to '" +
                  good + rest + "'";
        } else {
          r.fix = "make '" + bad_name + "' resolve to " + good + " on " + h.name + " (DNS or /etc/hosts)";
        }
      } else {
        r.detail += "; on the host, '" + f.hostname + "' -> " +
                    (f.hostname_addrs.empty() ? std::string("nothing") : join(f.hostname_addrs));
      }
    }
    rows.push_back(r);
  }
  return rows;
}

std::vector<Row> check_ssh(const DoctorInput& in) {
  std::vector<Row> rows;
  for (const auto& h : in.hosts) {
    Row r{{h.name}, "ssh", Status::kOk, "", ""};
    char secs[32];
    std::snprintf(secs, sizeof secs, "%.1f s", h.connect_s);
    if (h.local) {
      r.detail = "this host: probed without ssh";
    } else if (!ssh_failed(h)) {
      r.detail = std::string("BatchMode login, no prompt (") + secs + " to the probe's answer)";
    } else {
      const std::string& e = h.stderr_text;
      std::string id = in.ssh_identity.empty() ? "" : "-i " + in.ssh_identity + ".pub ";
      r.status = Status::kFail;
      if (h.timed_out) {
        r.detail = "no answer within " + std::string(secs) + ": " + last_line(e);
        r.fix = "check that " + h.name + " is up and TCP port 22 is open to it (ssh -v " + h.name + ")";
      } else if (contains(e, "Permission denied")) {
        r.detail = "password-less login refused: " + last_line(e);
        r.fix = "ssh-copy-id " + id + h.name;
      } else if (contains(e, "Connection refused")) {
        r.detail = "connection refused: no sshd listening on " + h.name;
        r.fix = "start sshd on " + h.name + " (sudo systemctl start ssh)";
      } else if (contains(e, "Could not resolve hostname")) {
        r.detail = last_line(e);
        r.fix = "add '<address> " + h.name + "' to /etc/hosts here (or fix DNS)";
      } else if (contains(e, "Host key verification failed")) {
        r.detail = "unknown or changed host key";
        r.fix = "check the key, then: ssh-keyscan " + h.name + " >> ~/.ssh/known_hosts";
      } else if (contains(e, "timed out") || contains(e, "No route") || contains(e, "unreachable")) {
        r.detail = "unreachable: " + last_line(e);
        r.fix = "check that " + h.name + " is up and TCP port 22 is open to it (ssh -v " + h.name + ")";
      } else {
        r.detail = "ssh failed: " + last_line(e);
        r.fix = "run ssh -v " + h.name + " true and fix what it reports";
      }
    }
    rows.push_back(r);
  }
  return rows;
}

std::vector<Row> check_user(const DoctorInput& in) {
  std::vector<Row> rows;
  for (const auto& h : in.hosts) {
    if (!probed(h)) {
      rows.push_back(skipped_row(h, "user"));
      continue;
    }
    const std::string& u = h.facts->user;
    if (u == in.head.user) {
      rows.push_back({{h.name}, "user", Status::kOk, u, ""});
    } else {
      rows.push_back({{h.name}, "user", Status::kFail,
                      "logged in as '" + u + "' on " + h.name + ", '" + in.head.user + "' here",
                      "use one user everywhere: create '" + in.head.user + "' on " + h.name +
                          ", or set 'User " + in.head.user + "' for it in ~/.ssh/config"});
    }
  }
  return rows;
}

std::vector<Row> check_hpctrain(const DoctorInput& in) {
  std::vector<Row> rows;
  const HeadFacts& me = in.head;
  std::string copy_fix_tail =
      ":" + me.exe + ", and hpctrain-torch beside it the same way (or install both on a shared file system)";
  for (const auto& h : in.hosts) {
    Row r{{h.name}, "hpctrain", Status::kOk, "", ""};
    if (!probed(h)) {
      if (ssh_failed(h)) {
        rows.push_back(skipped_row(h, "hpctrain"));
        continue;
      }
      r.status = Status::kFail;
      r.detail = "the probe '" + me.exe + " doctor --probe' failed on " + h.name + " (exit " +
                 std::to_string(h.exit_code) + "): " + last_line(h.stderr_text);
      r.fix = "install this hpctrain at the same path: scp " + me.exe + " " + h.name + copy_fix_tail;
      rows.push_back(r);
      continue;
    }
    const HostFacts& f = *h.facts;
    std::string theirs = f.version + " (" + f.git + ") sha256 " + f.build_sha256.substr(0, 12);
    std::string mine = me.version + " (" + me.git + ") sha256 " + me.build_sha256.substr(0, 12);
    if (f.exe != me.exe) {
      r.status = Status::kFail;
      r.detail = "runs " + f.exe + ", not " + me.exe + " as here";
    } else if (f.version != me.version || f.git != me.git) {
      r.status = Status::kFail;
      r.detail = "version " + theirs + " on " + h.name + ", " + mine + " here";
    } else if (f.build_sha256 != me.build_sha256) {
      r.status = Status::kFail;
      r.detail = "a different build at " + f.exe + ": " + theirs + " on " + h.name + ", " + mine + " here";
    } else {
      r.detail = theirs;
    }
    if (r.status == Status::kFail) {
      r.fix = "copy this build there: scp " + me.exe + " " + h.name + copy_fix_tail;
    }
    rows.push_back(r);
  }
  return rows;
}

}  // namespace hpct::doctor
