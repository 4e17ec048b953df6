// The shared directory: every host wrote a token into it; a host whose
// token the others cannot read (or who cannot read theirs) does not share it.
#include <algorithm>
#include <functional>
#include <numeric>

#include "doctor/checks.h"

namespace hpct::doctor {

std::vector<Row> check_shared_dir(const DoctorInput& in) {
  std::vector<Row> rows;
  if (in.shared_dir.empty()) return rows;
  const std::string& dir = in.shared_dir;
  size_t n = in.hosts.size();
  // Hosts that wrote a token and reported what they read.
  std::vector<bool> active(n, false);
  for (size_t i = 0; i < n; ++i) {
    const auto& h = in.hosts[i];
    active[i] = probed(h) && h.facts->token_written && h.pairs_reported;
  }
  auto saw = [&](size_t reader, size_t writer) {
    const auto& s = in.hosts[reader].tokens_seen;
    return std::find(s.begin(), s.end(), static_cast<int>(writer)) != s.end();
  };
  // Groups of hosts that read each other's tokens: each is one directory.
  std::vector<size_t> group(n);
  std::iota(group.begin(), group.end(), 0);
  std::function<size_t(size_t)> root = [&](size_t x) { return group[x] == x ? x : group[x] = root(group[x]); };
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      if (active[i] && active[j] && saw(i, j) && saw(j, i)) group[root(i)] = root(j);
    }
  }
  std::vector<size_t> size(n, 0);
  size_t largest = 0, count_active = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!active[i]) continue;
    ++count_active;
    largest = std::max(largest, ++size[root(i)]);
  }
  // The shared directory is the largest group's; with a tie, none is.
  size_t largest_groups = 0, shared_root = n;
  for (size_t i = 0; i < n; ++i) {
    if (active[i] && root(i) == i && size[i] == largest) {
      ++largest_groups;
      shared_root = i;
    }
  }
  bool has_shared = largest_groups == 1 && (largest > 1 || count_active == 1);
  std::string members;
  for (size_t i = 0; i < n; ++i) {
    if (has_shared && active[i] && root(i) == shared_root) members += (members.empty() ? "" : ", ") + in.hosts[i].name;
  }

  for (size_t i = 0; i < n; ++i) {
    const auto& h = in.hosts[i];
    Row r{{h.name}, "shared-dir", Status::kOk, "", ""};
    if (!probed(h)) {
      rows.push_back(skipped_row(h, "shared-dir"));
      continue;
    }
    if (!h.facts->token_written) {
      r.status = Status::kFail;
      r.detail = h.facts->token_error;
      r.fix = "create " + dir + " on " + h.name + " and mount the shared file system there" +
              (members.empty() ? "" : " (as on " + members + ")");
    } else if (!h.pairs_reported) {
      r.status = Status::kSkip;
      r.detail = "token written; the probe did not report what it read";
    } else if (has_shared && root(i) == shared_root) {
      r.detail = count_active == 1 ? "token written in " + dir + " (no other host to read it)"
                                   : "a token written here is read on " + std::to_string(largest - 1) +
                                         " other host(s), and theirs here";
    } else {
      std::vector<std::string> unseen;
      for (size_t j = 0; j < n; ++j) {
        if (j != i && active[j] && !(saw(i, j) && saw(j, i))) unseen.push_back(in.hosts[j].name);
      }
      std::string list;
      for (const auto& u : unseen) list += (list.empty() ? "" : ", ") + u;
      r.status = Status::kFail;
      r.detail = dir + " on " + h.name + " is not the directory " +
                 (members.empty() ? std::string("the others see") : members + " share") +
                 ": tokens are not exchanged with " + list;
      r.fix = "mount the shared file system at " + dir + " on " + h.name +
              (members.empty() ? "" : " (as on " + members + ")");
    }
    rows.push_back(r);
  }
  return rows;
}

}  // namespace hpct::doctor
