#include "metrics/job_view.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace hpct::metrics {
namespace {

constexpr const char* kPhases[4] = {"data", "compute", "sync", "optimizer"};

bool trouble(const std::string& state) {
  return state == "STALLED" || state == "UNREACHABLE" || state == "BAD";
}

// States whose start and end are events.
bool marked(const std::string& state) { return trouble(state) || state == "STRAGGLER"; }

std::string fixed(double v, int decimals) {
  if (v < 0) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

// Bytes as whole megabytes (1e6), "-" when not known.
std::string megabytes(double bytes) { return fixed(bytes < 0 ? -1 : bytes / 1e6, 0); }

std::string who(const RankRow& r) {
  return "rank " + r.rank + " (" + (r.host != "?" ? r.host : r.target) + ")";
}

// The rank's memory gauges (-1 when not exported) and its straggler state.
void read_memory_and_straggler(const Exposition& e, RankRow& row) {
  const Sample* peak = e.find("hpctrain_process_peak_resident_memory_bytes");
  row.peak_rss_bytes = peak ? peak->value : -1;
  const Sample* state = e.find("hpctrain_optimizer_state_bytes");
  row.optimizer_state_bytes = state ? state->value : -1;
  row.slowdown = e.value("hpctrain_straggler_slowdown_ratio");
  row.straggler_cause.clear();
  for (const Sample* g : e.all("hpctrain_straggler")) {
    auto c = g->labels.find("cause");
    if (g->value > 0 && c != g->labels.end()) row.straggler_cause = c->second;
  }
}

}  // namespace

void JobView::apply(Track& tr, const ScrapeResult& r, double now) {
  RankRow& row = tr.row;
  if (!r.ok) {
    row.state = "UNREACHABLE";
    row.note = r.error;
    row.samples_per_s = -1;
    return;
  }
  Exposition e;
  try {
    e = Exposition(parse_exposition(r.body));
  } catch (const Error& err) {
    row.state = "BAD";
    row.note = err.what();
    return;
  }
  Snapshot s;
  s.t = now;
  s.samples = e.value("hpctrain_samples_total");
  s.steps = e.value("hpctrain_steps_total");
  for (int i = 0; i < 4; ++i)
    s.phase_sum[i] = e.value("hpctrain_step_phase_seconds_sum", {{"phase", kPhases[i]}});
  for (const Sample* b : e.all("hpctrain_allreduce_bytes_total")) {
    auto p = b->labels.find("path");
    if (p != b->labels.end()) s.path_bytes[p->second] = b->value;
  }
  if (const Sample* any = e.find("hpctrain_samples_total")) {
    if (auto it = any->labels.find("rank"); it != any->labels.end()) row.rank = it->second;
    if (auto it = any->labels.find("host"); it != any->labels.end()) row.host = it->second;
  }
  row.restarts = e.value("hpctrain_restarts_total");
  row.stall_warnings = e.value("hpctrain_stall_warnings_total");
  read_memory_and_straggler(e, row);

  // A counter that went down: the rank's process started again.
  if (!tr.history.empty() && s.steps < tr.history.back().steps) tr.history.clear();
  if (tr.history.empty() || s.steps > tr.history.back().steps || !tr.seen_ok)
    tr.last_step_change = now;
  tr.seen_ok = true;
  tr.history.push_back(s);
  while (tr.history.size() > 2 && tr.history[1].t <= now - options_.window_s)
    tr.history.pop_front();
  const Snapshot& base = tr.history.front();
  row.steps = s.steps;

  const double dt = now - base.t;
  const double dsteps = s.steps - base.steps;
  double* phase_ms[4] = {&row.data_ms, &row.compute_ms, &row.sync_ms, &row.optimizer_ms};
  if (tr.history.size() >= 2 && dt > 0) {
    row.samples_per_s = std::max(0.0, (s.samples - base.samples) / dt);
    if (dsteps > 0) {
      for (int i = 0; i < 4; ++i)
        *phase_ms[i] = 1e3 * (s.phase_sum[i] - base.phase_sum[i]) / dsteps;
    }
  } else {
    row.samples_per_s = -1;  // one scrape of this process: no rate yet
    if (s.steps > 0) {       // but the averages since its start
      for (int i = 0; i < 4; ++i) *phase_ms[i] = 1e3 * s.phase_sum[i] / s.steps;
    }
  }
  std::string busiest = "-";
  double most = 0, most_total = 0;
  std::string busiest_total = "-";
  for (const auto& [path, bytes] : s.path_bytes) {
    auto b = base.path_bytes.find(path);
    const double d = bytes - (b == base.path_bytes.end() ? 0 : b->second);
    if (d > most) most = d, busiest = path;
    if (bytes > most_total) most_total = bytes, busiest_total = path;
  }
  row.sync_path = busiest != "-" ? busiest : busiest_total;

  const double still = now - tr.last_step_change;
  if (s.steps == 0 && still < options_.stall_after_s) {
    row.state = "starting";
    row.note.clear();
  } else if (still >= options_.stall_after_s) {
    row.state = "STALLED";
    char b[96];
    std::snprintf(b, sizeof b, "no step for %.0f s (at step %.0f)", still, s.steps);
    row.note = b;
    row.samples_per_s = 0;
  } else if (!row.straggler_cause.empty()) {
    row.state = "STRAGGLER";
    char b[128];
    std::snprintf(b, sizeof b, "%.0f%% slower than the median rank, the time goes to %s",
                  100 * std::max(0.0, row.slowdown), row.straggler_cause.c_str());
    row.note = b;
  } else {
    row.state = "ok";
    row.note.clear();
  }
}

void JobView::mark_slowest() {
  Track* slowest = nullptr;
  double worst = -1, best = -1;
  int candidates = 0;
  for (auto& [target, tr] : tracks_) {
    RankRow& r = tr.row;
    if (r.state == "STRAGGLER") return;  // the ranks' own judgement, over a longer window
    if (r.state != "ok" || r.compute_ms < 0) continue;
    const double work = r.data_ms + r.compute_ms + r.optimizer_ms;
    ++candidates;
    if (work > worst) worst = work, slowest = &tr;
    if (best < 0 || work < best) best = work;
  }
  // Balanced ranks (within 5%) have no slowest worth naming.
  if (candidates < 2 || slowest == nullptr || worst < 1.05 * best) return;
  slowest->row.state = "slowest";
  char b[128];
  std::snprintf(b, sizeof b,
                "own work %.1f ms/step (fastest rank %.1f): the others wait for it in sync", worst,
                best);
  slowest->row.note = b;
}

std::vector<std::string> JobView::update(const std::vector<ScrapeResult>& round, double now) {
  std::vector<std::string> events;
  std::map<std::string, Track> kept;
  for (const auto& r : round) {
    auto it = tracks_.find(r.target);
    if (it != tracks_.end()) kept[r.target] = std::move(it->second);
    Track& tr = kept[r.target];
    tr.row.target = r.target;
  }
  tracks_ = std::move(kept);
  std::map<std::string, std::string> before;
  std::map<std::string, double> restarts_before;
  for (const auto& [t, tr] : tracks_) {
    before[t] = tr.seen_ok || tr.row.state != "starting" ? tr.row.state : "";
    restarts_before[t] = tr.row.restarts;
  }
  for (const auto& r : round) apply(tracks_[r.target], r, now);
  mark_slowest();
  for (const auto& [t, tr] : tracks_) {
    const std::string& was = before[t];
    const std::string& is = tr.row.state;
    const bool was_bad = marked(was), is_bad = marked(is);
    if (is_bad && was != is) {
      events.push_back(who(tr.row) + " " + is + ": " + tr.row.note);
    } else if (was_bad && !is_bad) {
      events.push_back(who(tr.row) + " " + is + " again (was " + was + ")");
    }
    if (tr.seen_ok && tr.row.restarts > restarts_before[t] && !was.empty()) {
      events.push_back(who(tr.row) + " restarted: " + fixed(tr.row.restarts, 0) +
                       " restarts of the job so far");
    }
  }
  return events;
}

std::vector<RankRow> JobView::rows() const {
  std::vector<RankRow> out;
  for (const auto& [t, tr] : tracks_) out.push_back(tr.row);
  auto key = [](const RankRow& r) {
    char* end = nullptr;
    long n = std::strtol(r.rank.c_str(), &end, 10);
    return (end != r.rank.c_str() && *end == '\0') ? n : 1L << 30;
  };
  std::stable_sort(out.begin(), out.end(), [&](const RankRow& a, const RankRow& b) {
    return key(a) != key(b) ? key(a) < key(b) : a.target < b.target;
  });
  return out;
}

std::string format_table(const std::vector<RankRow>& rows, bool ansi) {
  std::string out;
  char b[512];
  std::snprintf(b, sizeof b, "%-5s %-16s %10s %8s %10s %8s %8s %9s %-12s %9s %8s %8s  %-11s %s\n",
                "RANK", "HOST", "SAMPLES/S", "DATA ms", "COMPUTE ms", "SYNC ms", "OPT ms",
                "DATA WAIT", "SYNC PATH", "STEPS", "PEAK MB", "STATE MB", "STATE", "NOTE");
  out += b;
  for (const auto& r : rows) {
    const double total = r.data_ms + r.compute_ms + r.sync_ms + r.optimizer_ms;
    const std::string wait =
        r.data_ms >= 0 && total > 0 ? fixed(100 * r.data_ms / total, 1) + "%" : "-";
    std::snprintf(b, sizeof b, "%-5s %-16s %10s %8s %10s %8s %8s %9s %-12s %9s %8s %8s  %-11s %s",
                  r.rank.c_str(), r.host.substr(0, 16).c_str(), fixed(r.samples_per_s, 1).c_str(),
                  fixed(r.data_ms, 1).c_str(), fixed(r.compute_ms, 1).c_str(),
                  fixed(r.sync_ms, 1).c_str(), fixed(r.optimizer_ms, 1).c_str(), wait.c_str(),
                  r.sync_path.substr(0, 12).c_str(), fixed(r.steps, 0).c_str(),
                  megabytes(r.peak_rss_bytes).c_str(), megabytes(r.optimizer_state_bytes).c_str(),
                  r.state.c_str(), r.note.c_str());
    const char* colour = !ansi                    ? nullptr
                         : trouble(r.state)       ? "\x1b[1;31m"
                         : r.state == "STRAGGLER" ? "\x1b[1;33m"
                         : r.state == "slowest"   ? "\x1b[33m"
                                                  : nullptr;
    out += colour ? std::string(colour) + b + "\x1b[0m\n" : std::string(b) + "\n";
  }
  return out;
}

std::string format_lines(const std::vector<RankRow>& rows, const std::string& stamp) {
  std::string out;
  for (const auto& r : rows) {
    out += stamp + " rank=" + r.rank + " host=" + r.host + " state=" + r.state +
           " samples_per_s=" + fixed(r.samples_per_s, 1) + " data_ms=" + fixed(r.data_ms, 2) +
           " compute_ms=" + fixed(r.compute_ms, 2) + " sync_ms=" + fixed(r.sync_ms, 2) +
           " optimizer_ms=" + fixed(r.optimizer_ms, 2) + " sync_path=" + r.sync_path +
           " steps=" + fixed(r.steps, 0) + " peak_rss_mb=" + megabytes(r.peak_rss_bytes) +
           " optimizer_state_mb=" + megabytes(r.optimizer_state_bytes) + " target=" + r.target;
    if (!r.note.empty()) out += " note=\"" + r.note + "\"";
    out += "\n";
  }
  return out;
}

}  // namespace hpct::metrics
