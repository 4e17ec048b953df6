#include "cluster/run_summary.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace hpct::cluster {

bool RunSummary::all_ok() const {
  return std::all_of(hosts.begin(), hosts.end(), [](const HostRun& h) { return h.ok(); });
}

int RunSummary::total_changed() const {
  int n = 0;
  for (const auto& h : hosts) n += h.changed;
  return n;
}

const HostRun* RunSummary::find(const std::string& name) const {
  for (const auto& h : hosts) {
    if (h.name == name) return &h;
  }
  return nullptr;
}

RunSummary parse_run_summary(const std::string& json_text, const std::string& filename) {
  RunSummary s;
  try {
    auto j = nlohmann::json::parse(json_text);
    s.elapsed_s = j.value("elapsed_s", 0.0);
    s.check_mode = j.value("check_mode", false);
    for (const auto& [name, h] : j.at("hosts").items()) {
      HostRun r;
      r.name = name;
      r.changed = h.value("changed", 0);
      r.failed = h.value("failed", false);
      r.unreachable = h.value("unreachable", false);
      r.failed_step = h.value("failed_step", "");
      r.failed_task = h.value("failed_task", "");
      r.message = h.value("message", "");
      r.fix = h.value("fix", "");
      r.steps = h.value("steps", std::vector<std::string>{});
      r.changed_tasks = h.value("changed_tasks", std::vector<std::string>{});
      s.hosts.push_back(r);
    }
  } catch (const nlohmann::json::exception& e) {
    throw_data_corrupt(filename + ": not the summary of a playbook run: " + e.what());
  }
  std::sort(s.hosts.begin(), s.hosts.end(), [](const HostRun& a, const HostRun& b) { return a.name < b.name; });
  return s;
}

std::string describe_failures(const RunSummary& s, const std::vector<std::string>& listed) {
  std::string out;
  std::vector<std::string> done, silent;
  for (const auto& name : listed) {
    const HostRun* h = s.find(name);
    if (h == nullptr) {
      silent.push_back(name);
      continue;
    }
    if (h->ok()) {
      done.push_back(name);
      continue;
    }
    out += "  " + name + ": " + (h->unreachable ? "unreachable" : "failed") + " in step " +
           (h->failed_step.empty() ? "?" : h->failed_step) + " (" + h->failed_task + "): " + h->message + "\n";
    out += "    fix: " + h->fix + "\n";
    std::string steps;
    for (const auto& st : h->steps) {
      if (st != h->failed_step) steps += (steps.empty() ? "" : " ") + st;
    }
    out += "    steps done there: " + (steps.empty() ? std::string("none") : steps) + "\n";
  }
  for (const auto& name : silent) {
    out += "  " + name + ": no step ran (the run stopped before reaching it)\n";
  }
  std::string list;
  for (const auto& n : done) list += (list.empty() ? "" : ", ") + n;
  out += "  configured: " + (list.empty() ? std::string("no host") : list) + "\n";
  return out;
}

}  // namespace hpct::cluster
