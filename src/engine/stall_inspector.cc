#include "engine/stall_inspector.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <unordered_set>

namespace hpct::engine {
namespace {

// "[0, 2]", ascending whatever order the ranks reported in.
std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  os << "]";
  return os.str();
}

double seconds(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

std::string StallInspector::describe(const StallCandidate& c, SteadyClock::time_point now) const {
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    bool has = false;
    for (int h : c.have) has = has || h == r;
    if (!has) missing.push_back(r);
  }
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%.1f", seconds(now - c.since));
  return "tensor '" + c.name + "' (" + c.what + ") submitted by ranks " + rank_list(c.have) +
         " but not by ranks " + rank_list(missing) + " for " + secs + " s";
}

void StallInspector::warn(const std::string& line) {
  warnings_.fetch_add(1, std::memory_order_relaxed);
  logger_.warn("engine", line);
}

std::vector<std::pair<std::string, std::string>> StallInspector::check(
    const std::vector<StallCandidate>& waiting, SteadyClock::time_point now) {
  std::vector<std::pair<std::string, std::string>> abort;
  std::unordered_set<std::string> still;
  for (const auto& c : waiting) {
    still.insert(c.name);
    double age = seconds(now - c.since);
    if (abort_s_ > 0 && age >= abort_s_) {
      // A coordinator that looks late (a busy machine) may find a tensor
      // already past the abort age: the log still gets the named warning.
      if (last_warned_.count(c.name) == 0 && age >= warn_s_) {
        warn("stall: " + describe(c, now) +
             "; are the ranks taking different code paths? (HPCT_STALL_WARN_S)");
      }
      abort.emplace_back(c.name, "stalled: " + describe(c, now) +
                                     " (HPCT_STALL_ABORT_S); every rank must submit the same "
                                     "tensors");
      continue;
    }
    if (age < warn_s_) continue;
    auto it = last_warned_.find(c.name);
    if (it != last_warned_.end() && seconds(now - it->second) < warn_s_) continue;
    last_warned_[c.name] = now;
    std::string until;
    if (abort_s_ > 0) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%.0f", abort_s_);
      until = "; it fails with a timeout after " + std::string(secs) + " s (HPCT_STALL_ABORT_S)";
    }
    warn("stall: " + describe(c, now) +
         "; are the ranks taking different code paths? (HPCT_STALL_WARN_S)" + until);
  }
  for (auto it = last_warned_.begin(); it != last_warned_.end();) {
    it = still.count(it->first) ? std::next(it) : last_warned_.erase(it);
  }
  return abort;
}

}  // namespace hpct::engine
