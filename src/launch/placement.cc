#include "launch/placement.h"

#include <algorithm>

#include "core/error.h"

namespace hpct::launch {

std::vector<RankPlacement> place_ranks(const std::vector<HostEntry>& hosts, int np) {
  if (np < 1) throw_invalid_argument("-np " + std::to_string(np) + ": a job needs at least one rank");
  int total = 0;
  for (const auto& h : hosts) total += h.slots;
  if (np > total) {
    std::string where = hosts.empty() ? "no hosts" : hosts.front().origin;
    throw_invalid_argument("-np " + std::to_string(np) + " asks for more ranks than the " +
                           std::to_string(total) + " slots the hosts offer (" + where +
                           (hosts.size() > 1 ? ", ..." : "") +
                           "); add slots (host:N or 'host slots=N') or lower -np");
  }
  std::vector<RankPlacement> out;
  int cross = 0;
  for (const auto& h : hosts) {
    if (static_cast<int>(out.size()) == np) break;
    int here = std::min(h.slots, np - static_cast<int>(out.size()));
    for (int i = 0; i < here; ++i) {
      RankPlacement p;
      p.rank = static_cast<int>(out.size());
      p.host = h.name;
      p.local_rank = i;
      p.local_size = here;
      p.cross_rank = cross;
      out.push_back(p);
    }
    ++cross;
  }
  for (auto& p : out) p.cross_size = cross;
  return out;
}

std::vector<HostEntry> used_hosts(const std::vector<RankPlacement>& ranks) {
  std::vector<HostEntry> out;
  for (const auto& p : ranks) {
    if (out.empty() || out.back().name != p.host) {
      HostEntry e;
      e.name = p.host;
      e.slots = 0;
      out.push_back(e);
    }
    ++out.back().slots;
  }
  return out;
}

}  // namespace hpct::launch

namespace hpct::launch {

std::vector<RankPlacement> place_servers(const std::vector<RankPlacement>& workers,
                                         const std::vector<std::string>& server_hosts, int servers) {
  if (servers < 0) throw_invalid_argument("--servers " + std::to_string(servers) + ": must be 0 or more");
  std::vector<std::string> hosts = server_hosts;
  if (hosts.empty()) {
    for (const auto& h : used_hosts(workers)) hosts.push_back(h.name);
  }
  if (servers > 0 && hosts.empty()) throw_invalid_argument("--servers: no host to place them on");
  std::vector<RankPlacement> out;
  std::vector<std::string> cross_hosts;
  for (int s = 0; s < servers; ++s) {
    RankPlacement p;
    p.rank = static_cast<int>(workers.size()) + s;
    p.host = hosts[static_cast<size_t>(s) % hosts.size()];
    auto it = std::find(cross_hosts.begin(), cross_hosts.end(), p.host);
    p.cross_rank = static_cast<int>(it - cross_hosts.begin());
    if (it == cross_hosts.end()) cross_hosts.push_back(p.host);
    for (const auto& q : out) {
      if (q.host == p.host) ++p.local_rank;
    }
    out.push_back(p);
  }
  for (auto& p : out) {
    p.cross_size = static_cast<int>(cross_hosts.size());
    p.local_size = static_cast<int>(std::count_if(out.begin(), out.end(),
                                                  [&](const RankPlacement& q) { return q.host == p.host; }));
  }
  return out;
}

}  // namespace hpct::launch
