#include "launch/ssh_spawner.h"

#include <cmath>

namespace hpct::launch {

std::vector<std::string> SshSpawner::ssh_options() const {
  int timeout = std::max(1, static_cast<int>(std::ceil(options_.connect_timeout_s)));
  std::vector<std::string> argv = {"-T",
                                   "-o", "BatchMode=yes",
                                   "-o", "ConnectTimeout=" + std::to_string(timeout),
                                   "-o", "ServerAliveInterval=5",
                                   "-o", "ServerAliveCountMax=3",
                                   "-o", "LogLevel=ERROR"};
  if (options_.port > 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(options_.port));
  }
  if (!options_.identity.empty()) {
    argv.push_back("-i");
    argv.push_back(options_.identity);
  }
  for (const auto& o : options_.options) {
    argv.push_back("-o");
    argv.push_back(o);
  }
  return argv;
}

std::vector<ProcessPlan> SshSpawner::plan(const JobLayout& job) const {
  std::vector<ProcessPlan> out;
  for (const auto& r : job.ranks) {
    ProcessPlan p;
    p.host = r.host;
    p.ranks = {r.rank};
    if (job.rank_is_local.at(static_cast<size_t>(r.rank))) {
      p.argv = wrapper_command(job);
      p.via = "local";
    } else {
      p.via = "ssh";
      // The remote shell runs this line; the wrapper takes the working
      // directory, PATH and the rest from the spec on its stdin.
      std::string remote = "exec";
      for (const auto& w : wrapper_command(job)) remote += " " + shell_quote(w);
      p.argv = {options_.ssh};
      for (const auto& o : ssh_options()) p.argv.push_back(o);
      p.argv.push_back(r.host);
      p.argv.push_back(remote);
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace hpct::launch
