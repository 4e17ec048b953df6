// What one playbook run did, host by host, as the hpctrain_progress callback
// (deploy/ansible/callback_plugins) writes it: which steps ran, which tasks
// changed something, where a host failed and the fix. Pure; thread-safe.
#pragma once

#include <string>
#include <vector>

namespace hpct::cluster {

struct HostRun {
  std::string name;
  int changed = 0;
  bool failed = false;
  bool unreachable = false;
  std::string failed_step;   // the role it failed in ("preflight")
  std::string failed_task;
  std::string message;       // what went wrong, one line
  std::string fix;           // what to do about it
  std::vector<std::string> steps;          // roles that ran there
  std::vector<std::string> changed_tasks;  // "hosts: Write every cluster host ..."
  bool ok() const { return !failed && !unreachable; }
};

struct RunSummary {
  double elapsed_s = 0;
  bool check_mode = false;
  std::vector<HostRun> hosts;  // sorted by name
  bool all_ok() const;
  int total_changed() const;
  const HostRun* find(const std::string& name) const;
};

// DataCorrupt naming the file when it is not the callback's JSON.
RunSummary parse_run_summary(const std::string& json_text, const std::string& filename);

// The lines printed after a run that did not succeed everywhere: per host
// that failed, the step, the message and the fix; then where it did finish.
std::string describe_failures(const RunSummary& s, const std::vector<std::string>& listed);

}  // namespace hpct::cluster
