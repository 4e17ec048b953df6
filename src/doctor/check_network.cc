// Pairwise checks: TCP between every ordered pair of hosts on the job's
// ports, and (full mode) the latency and bandwidth of every pair.
#include <cstdio>
#include <map>

#include "doctor/checks.h"

namespace hpct::doctor {
namespace {

std::string first_addr(const HostOutcome& h) {
  return h.head_addrs.empty() ? h.name : h.head_addrs[0];
}

}  // namespace

std::vector<Row> check_ports(const DoctorInput& in) {
  std::vector<Row> rows;
  size_t n = in.hosts.size();
  bool ephemeral = in.ports_text == "ephemeral";
  std::string range = ephemeral ? "32768:60999" : in.ports_text;
  for (auto& c : range) c = c == '-' ? ':' : c;

  for (const auto& h : in.hosts) {
    if (probed(h) && !h.facts->port_errors.empty()) {
      std::string errs;
      for (const auto& e : h.facts->port_errors) errs += (errs.empty() ? "" : "; ") + e;
      rows.push_back({{h.name}, "ports", Status::kWarn, "cannot listen on " + h.name + ": " + errs,
                      "free these ports on " + h.name + " or choose another --ports range"});
    }
  }
  // Results by (from, to).
  std::map<std::pair<int, int>, std::vector<const ConnectResult*>> by_pair;
  for (const auto& c : in.connects) by_pair[{c.from, c.to}].push_back(&c);
  for (size_t a = 0; a < n; ++a) {
    for (size_t b = 0; b < n; ++b) {
      if (a == b) continue;
      const auto& from = in.hosts[a];
      const auto& to = in.hosts[b];
      Row r{{from.name, to.name}, "ports", Status::kOk, "", ""};
      auto it = by_pair.find({static_cast<int>(a), static_cast<int>(b)});
      if (!probed(from) || !probed(to) || !from.pairs_reported || it == by_pair.end()) {
        r.status = Status::kSkip;
        r.detail = "not tested (a probe did not run)";
        rows.push_back(r);
        continue;
      }
      int ok = 0;
      std::string failed;
      for (const auto* c : it->second) {
        if (c->ok) {
          ++ok;
        } else if (failed.size() < 200) {
          failed += (failed.empty() ? "" : ", ") + std::to_string(c->port) + " (" + c->error + ")";
        }
      }
      int total = static_cast<int>(it->second.size());
      if (ok == total) {
        r.detail = std::to_string(total) + " port(s) reachable";
      } else {
        r.status = Status::kFail;
        r.detail = std::to_string(total - ok) + " of " + std::to_string(total) + " port(s) on " +
                   to.name + " unreachable from " + from.name + ": " + failed;
        r.fix = "on " + to.name + " allow TCP " + range + " from " + from.name +
                ", e.g. iptables -I INPUT -p tcp --dport " + range + " -s " + first_addr(from) +
                " -j ACCEPT";
      }
      rows.push_back(r);
    }
  }
  return rows;
}

std::vector<Row> check_perf(const DoctorInput& in, std::vector<Matrix>* matrices) {
  std::vector<Row> rows;
  if (in.quick) return rows;
  size_t n = in.hosts.size();
  Matrix lat{"latency_us", "us", std::vector<std::vector<double>>(n, std::vector<double>(n, -1))};
  Matrix bw{"bandwidth_gbps", "Gbit/s", std::vector<std::vector<double>>(n, std::vector<double>(n, -1))};
  for (const auto& p : in.perf) {
    const auto& from = in.hosts.at(static_cast<size_t>(p.from));
    const auto& to = in.hosts.at(static_cast<size_t>(p.to));
    Row r{{from.name, to.name}, "perf", Status::kOk, "", ""};
    if (!p.error.empty()) {
      r.status = Status::kWarn;
      r.detail = "measurement failed: " + p.error;
      r.fix = "check the network between " + from.name + " and " + to.name;
    } else {
      char buf[96];
      std::snprintf(buf, sizeof buf, "round trip %.0f us, %.2f Gbit/s", p.rtt_us, p.gbps);
      r.detail = buf;
      lat.values[p.from][p.to] = p.rtt_us;
      bw.values[p.from][p.to] = p.gbps;
    }
    rows.push_back(r);
  }
  matrices->push_back(lat);
  matrices->push_back(bw);
  return rows;
}

}  // namespace hpct::doctor
