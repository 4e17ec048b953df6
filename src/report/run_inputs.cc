#include "report/run_inputs.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/regex.h"

namespace hpct::report {
namespace fs = std::filesystem;
namespace {

const char kFix[] =
    "give a `train --metrics` file, `bench train` output (JSON lines), a Chrome trace, "
    "a launch --output-dir launcher.log, or a run directory holding them";

std::string first_line_of(const std::string& text) {
  std::string line = text.substr(0, text.find('\n'));
  if (line.size() > 60) line = line.substr(0, 57) + "...";
  return line;
}

double number_or_nan(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}

// A metrics line's events: a restart or resume at a "start", a membership
// change at an "elastic" line.
void metrics_events(const nlohmann::json& j, const std::string& name, RunInputs* in) {
  const std::string type = j.value("type", "");
  RunEvent e;
  e.time = number_or_nan(j, "time");
  e.step = number_or_nan(j, "step");
  e.source = name;
  if (type == "start") {
    const int restart = j.value("restart", 0);
    const long long resumed = j.value("resumed_from_step", -1LL);
    if (restart > 0) {
      e.kind = "restart";
      e.text = "run restarted by the launcher (restart " + std::to_string(restart) + ")" +
               (resumed >= 0 ? ", resumed from step " + std::to_string(resumed) : ", from scratch");
    } else if (resumed >= 0) {
      e.kind = "resume";
      e.text = "run resumed from the checkpoint of step " + std::to_string(resumed);
    } else {
      return;
    }
  } else if (type == "elastic") {
    const int old_size = j.value("old_size", 0);
    if (old_size <= 0) return;  // the first world forming is not a change
    e.kind = "membership";
    e.text = "generation " + std::to_string(j.value("generation", 0LL)) + ": " +
             std::to_string(old_size) + " -> " + std::to_string(j.value("new_size", 0)) +
             " ranks (" + j.value("reason", std::string("?")) + "), " +
             std::to_string(j.value("rollback_steps", 0LL)) + " steps rolled back";
  } else {
    return;
  }
  in->events.push_back(e);
}

// One launcher.log line: "<unix seconds> text".
void launcher_event(const std::string& line, const std::string& name, RunInputs* in) {
  static const Regex rank_failed(
      R"(^(rank|(parameter )?server) \d+ .*(exited with code [1-9]|killed by|did not start))");
  const auto space = line.find(' ');
  if (space == std::string::npos) return;
  RunEvent e;
  try {
    e.time = std::stod(line.substr(0, space));
  } catch (const std::exception&) {
    return;
  }
  e.text = line.substr(space + 1);
  e.source = name;
  const std::string& t = e.text;
  if (t.rfind("restarting the job", 0) == 0) {
    e.kind = "restart";
  } else if (t.rfind("job failed", 0) == 0 || t.rfind("interrupted by", 0) == 0 ||
             t.find(" is lost") != std::string::npos || rank_failed.search(t).has_value()) {
    e.kind = "fault";
  } else if (t.rfind("elastic: generation ", 0) == 0 && t.find(": size ") != std::string::npos &&
             t.find(": size 0 ->") == std::string::npos) {
    e.kind = "membership";
  } else {
    return;
  }
  in->events.push_back(e);
}

// Rank 0's log line naming (or clearing) the straggler (engine/straggler.h):
// "[hpctrain rank 0 12:00:01.123 W straggler] rank 2 on host h2 is ...".
// The line tells the time of day (UTC); the day is the log's last write's.
void straggler_event(const std::string& line, const std::string& path, RunInputs* in) {
  static const Regex logged(
      R"(^\[hpctrain(?: rank \d+)? (\d\d):(\d\d):(\d\d)\.(\d\d\d) [A-Z] straggler\] (.*)$)");
  const auto m = logged.search(line);
  if (!m) return;
  RunEvent e;
  e.kind = "straggler";
  e.text = m->group(5);
  e.source = path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    const double written = static_cast<double>(st.st_mtime);
    double t = std::floor(written / 86400) * 86400 + std::stod(m->group(1)) * 3600 +
               std::stod(m->group(2)) * 60 + std::stod(m->group(3)) + std::stod(m->group(4)) / 1000;
    if (t > written + 60) t -= 86400;  // logged before midnight, written after
    e.time = t;
  }
  in->events.push_back(e);
}

enum class Kind { kUnknown, kEmpty, kMetricsOrBench, kTrace, kLauncherLog, kRankLog, kCheckpoint };

// Reads a JSON-lines text: metrics and bench lines. False when no line is of either.
bool read_json_lines(const std::string& name, const std::string& text, RunInputs* in) {
  std::istringstream lines(text);
  std::string line;
  bool any = false;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    if (j.value("bench", "") == "train" && j.contains("np") && j.contains("samples_per_s")) {
      in->bench_train.push_back(j);
      any = true;
      continue;
    }
    const std::string type = j.value("type", "");
    std::vector<nlohmann::json>* to = type == "start"     ? &in->starts
                                      : type == "step"    ? &in->steps
                                      : type == "epoch"   ? &in->epochs
                                      : type == "summary" ? &in->summaries
                                      : type == "elastic" ? &in->elastic
                                                          : nullptr;
    if (to == nullptr) continue;
    to->push_back(j);
    metrics_events(j, name, in);
    any = true;
  }
  return any;
}

Kind kind_by_name(const fs::path& p) {
  const std::string file = p.filename().string();
  const std::string parent = p.parent_path().filename().string();
  if (file == "launcher.log") return Kind::kLauncherLog;
  if ((file == "stdout" || file == "stderr") && parent.rfind("rank.", 0) == 0)
    return Kind::kRankLog;
  static const Regex ckpt(R"(ckpt-\d+\.json)");
  if (ckpt.matches(file)) return Kind::kCheckpoint;
  return Kind::kUnknown;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw_invalid_argument(path + ": cannot be read; check the path and its permissions");
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The first bytes of a file, enough to tell a Chrome trace from JSON lines.
std::string head_of(const std::string& path, size_t n) {
  std::ifstream f(path, std::ios::binary);
  std::string s(n, '\0');
  f.read(s.data(), static_cast<std::streamsize>(n));
  s.resize(static_cast<size_t>(f.gcount()));
  return s;
}

bool is_trace_head(const std::string& head) {
  const auto start = head.find_first_not_of(" \t\r\n");
  return start != std::string::npos && head[start] == '{' &&
         head.find("\"traceEvents\"") != std::string::npos;
}

// Reads one file. strict: a file named by the user (unknown kinds are errors).
bool read_one_file(const fs::path& p, bool strict, RunInputs* in) {
  const std::string path = p.string();
  const Kind by_name = kind_by_name(p);
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  if (!ec && size == 0) {
    if (!strict) return false;
    throw_invalid_argument(
        path + " is empty: the run wrote nothing there yet (did it start with --metrics " + path +
        "?); " + kFix);
  }
  if (by_name == Kind::kCheckpoint) {
    const std::string name = p.filename().string();
    RunEvent e;
    e.kind = "checkpoint";
    e.step = std::stod(name.substr(5, name.size() - 10));
    e.text = "checkpoint " + name;
    e.source = path;
    in->events.push_back(e);
    return true;  // not listed among the files read: there may be hundreds
  }
  if (by_name == Kind::kLauncherLog || by_name == Kind::kRankLog) {
    const std::string text = read_file(path);
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      if (by_name == Kind::kLauncherLog) {
        launcher_event(line, path, in);
      } else if (line.find(" straggler] ") != std::string::npos) {
        straggler_event(line, path, in);
      } else if (line.rfind("fault: ", 0) == 0) {
        static const Regex at_step(R"(at step (\d+))");
        RunEvent e;
        e.kind = "fault";
        e.text = line.substr(7);
        e.source = path;
        if (const auto m = at_step.search(line)) e.step = std::stod(m->group(1));
        in->events.push_back(e);
      }
    }
    in->files.push_back(path);
    return true;
  }
  const std::string head = head_of(path, 256);
  if (is_trace_head(head)) {
    in->traces.push_back(path);
    in->files.push_back(path);
    return true;
  }
  if (!strict && p.extension() != ".jsonl" && p.extension() != ".json" && p.extension() != ".txt" &&
      p.extension() != ".out" && p.extension() != "") {
    return false;
  }
  if (!strict && size > (256u << 20)) return false;  // not a metrics file of any length we write
  const std::string text = read_file(path);
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    if (!strict) return false;
    throw_invalid_argument(path + " is empty: the run wrote nothing there yet; " +
                           std::string(kFix));
  }
  if (read_json_lines(path, text, in)) {
    in->files.push_back(path);
    return true;
  }
  if (!strict) return false;
  throw_invalid_argument(path + ": unknown format (first line: '" + first_line_of(text) + "'); " +
                         kFix);
}

}  // namespace

void read_run_text(const std::string& name, const std::string& text, RunInputs* in) {
  if (is_trace_head(text.substr(0, 256))) {
    in->traces.push_back(name);
  } else if (fs::path(name).filename() == "launcher.log") {
    std::istringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) launcher_event(line, name, in);
  } else if (!read_json_lines(name, text, in)) {
    throw_invalid_argument(name + ": unknown format (first line: '" + first_line_of(text) + "'); " +
                           kFix);
  }
  in->files.push_back(name);
}

void read_run_input(const std::string& path, RunInputs* in) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  if (ec || !fs::exists(status)) {
    throw_invalid_argument(path +
                           ": no such file or directory; give the file of `train --metrics`, "
                           "`bench train` output or a run directory");
  }
  if (!fs::is_directory(status)) {
    read_one_file(path, true, in);
    return;
  }
  std::vector<fs::path> files;
  for (auto it = fs::recursive_directory_iterator(
           path, fs::directory_options::skip_permission_denied, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (it.depth() >= 3) it.disable_recursion_pending();
    if (it->is_regular_file(ec)) files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  size_t used = 0;
  for (const auto& f : files) used += read_one_file(f, false, in) ? 1 : 0;
  if (used == 0) {
    throw_invalid_argument(
        path +
        ": no metrics file, bench train output, Chrome trace or launcher.log in it; run "
        "`hpctrain train --metrics " +
        path + "/metrics.jsonl` (and `launch --output-dir " + path + "`) to fill it");
  }
}

void place_events(RunInputs* in) {
  // (time, step) of every metrics line that has both, in time order.
  std::vector<std::pair<double, double>> at;
  for (const auto* lines : {&in->starts, &in->steps, &in->epochs, &in->elastic, &in->summaries}) {
    for (const auto& j : *lines) {
      const double t = number_or_nan(j, "time"), s = number_or_nan(j, "step");
      if (std::isfinite(t) && std::isfinite(s)) at.emplace_back(t, s);
    }
  }
  std::sort(at.begin(), at.end());
  for (auto& e : in->events) {
    if (std::isfinite(e.step) || !std::isfinite(e.time) || at.empty()) continue;
    auto it = std::upper_bound(at.begin(), at.end(),
                               std::make_pair(e.time, static_cast<double>(INFINITY)));
    e.step = it == at.begin() ? at.front().second : std::prev(it)->second;
  }
}

}  // namespace hpct::report
