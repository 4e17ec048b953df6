#include "bench/ddp_peer.h"

#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/clock.h"
#include "core/error.h"
#include "core/subprocess.h"
#include "core/stats.h"

namespace hpct::bench {
namespace {

namespace fs = std::filesystem;

// The tail of the error text of a run the script's watchdog ended.
constexpr const char* kHangText = "was ended (a hang; its stacks are on stderr)";

bool all_digits(const std::string& s) {
  return !s.empty() && s.size() < 9 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// "RuntimeError: ...", "torch.multiprocessing.spawn.ProcessExitedException: ...",
// "AssertionError": a Python exception's last line.
bool python_exception_line(const std::string& line) {
  const auto colon = line.find(':');
  const std::string name = line.substr(0, colon);
  if (name.empty() || name.find(' ') != std::string::npos) return false;
  for (const char* tail : {"Error", "Exception", "Interrupt", "Exit"}) {
    const std::string t = tail;
    if (name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0) return true;
  }
  return false;
}

// The crash text of one log, and whether it came from a C++ what() (the
// root cause when one rank aborts and the others only lose their peer).
std::pair<std::string, bool> crash_in(const std::string& log) {
  std::vector<std::string> lines;
  std::istringstream in(log);
  for (std::string l; std::getline(in, l);) lines.push_back(trim(l));
  std::string text;
  bool from_what = false;
  std::string last_python, last_line;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.empty()) continue;
    last_line = l;
    const auto what = l.find("what():");
    if (what != std::string::npos && !from_what) {
      text = trim(l.substr(what + 7));
      const std::string key = "throwing an instance of '";
      if (i > 0) {
        const auto k = lines[i - 1].find(key);
        if (k != std::string::npos) {
          const auto end = lines[i - 1].find('\'', k + key.size());
          text = lines[i - 1].substr(k + key.size(), end - k - key.size()) + ": " + text;
        }
      }
      from_what = true;
    }
    if (python_exception_line(l)) last_python = l;
    // faulthandler's "Timeout (0:02:00)!": the script's watchdog ended a rank
    // that made no progress (a hang); the stacks follow.
    int h = 0, m = 0, sec = 0;
    if (!from_what && l.rfind("Timeout (", 0) == 0 && std::sscanf(l.c_str(), "Timeout (%d:%d:%d)!", &h, &m, &sec) == 3) {
      text = "a rank made no progress for " + std::to_string(h * 3600 + m * 60 + sec) + " s and " +
             kHangText;
      from_what = true;
    }
  }
  if (!from_what) text = !last_python.empty() ? last_python : last_line;
  if (text.size() > 500) text = text.substr(0, 497) + "...";
  return {text, from_what};
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The peer's logs in the run's directory: stderr (local) or stderr.R, in rank order.
std::vector<fs::path> stderr_logs(const std::string& dir) {
  std::vector<std::pair<int, fs::path>> found;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name == "stderr") {
      found.emplace_back(-1, e.path());
    } else if (name.rfind("stderr.", 0) == 0 && all_digits(name.substr(7))) {
      found.emplace_back(std::stoi(name.substr(7)), e.path());
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

// A crash that only says a peer went away: the symptom on the ranks that
// survived the one that crashed first.
bool peer_loss(const std::string& text) {
  for (const char* s : {"Connection reset by peer", "Connection closed by peer", "Broken pipe"}) {
    if (text.find(s) != std::string::npos) return true;
  }
  return false;
}

// Why the run failed: the root crash over every rank's log, else how the
// process ended.
std::string failure_text(const std::string& dir, const SubprocessResult& r, double timeout_s) {
  std::vector<std::string> logs;
  std::string tail;
  for (const auto& p : stderr_logs(dir)) {
    const std::string& log = logs.emplace_back(slurp(p));
    // The last lines of each log, for the user's stderr.
    std::istringstream in(log);
    std::vector<std::string> lines;
    for (std::string l; std::getline(in, l);) lines.push_back(l);
    // The last 12 lines; for a hang, the watchdog's whole stack dump (from
    // its "Timeout (" line, at most 80 lines): where each thread waited.
    size_t from = lines.size() > 12 ? lines.size() - 12 : 0;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (lines[i].rfind("Timeout (", 0) == 0) {
        from = std::min(from, i);
        break;
      }
    }
    for (size_t i = from; i < lines.size() && i < from + 80; ++i)
      tail += "  " + p.filename().string() + ": " + lines[i] + "\n";
  }
  if (!tail.empty()) std::fprintf(stderr, "hpctrain: the DDP peer's stderr ended with:\n%s", tail.c_str());
  std::string how;
  if (r.timed_out) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "did not finish within %.0f s", timeout_s);
    how = buf;
  } else if (r.signal != 0) {
    how = "ended by signal " + std::to_string(r.signal);
  } else if (r.exit_code != 0) {
    how = "exit code " + std::to_string(r.exit_code);
  } else {
    how = "wrote no result";
  }
  const std::string text = peer_root_error_text(logs);
  return text.empty() ? how : text + " (" + how + ")";
}

}  // namespace

void check_peer_hook(const std::string& spec) {
  if (spec == "none" || spec == "fp16") return;
  std::vector<std::string> parts;
  std::istringstream in(spec);
  for (std::string p; std::getline(in, p, ':');) parts.push_back(p);
  const bool ok = parts.size() >= 2 && parts.size() <= 3 && parts[0] == "powersgd" && all_digits(parts[1]) &&
                  std::stoi(parts[1]) >= 1 && (parts.size() == 2 || (all_digits(parts[2]) && std::stoi(parts[2]) >= 2));
  if (!ok) {
    throw_invalid_argument("--peer-hook " + spec +
                           ": choose none, fp16 or powersgd:RANK[:START] (RANK >= 1; START, DDP's "
                           "start_powerSGD_iter, >= 2)");
  }
}

std::string peer_error_text(const std::string& log) { return crash_in(log).first; }

std::string peer_root_error_text(const std::vector<std::string>& logs) {
  std::string first, what, root;
  for (const auto& log : logs) {
    auto [text, from_what] = crash_in(log);
    if (from_what && what.empty()) what = text;
    if (from_what && root.empty() && !peer_loss(text)) root = text;
    if (!text.empty() && first.empty()) first = text;
  }
  return !root.empty() ? root : !what.empty() ? what : first;
}

nlohmann::json run_ddp_peer_once(const DdpPeerOptions& o, int np) {
  const bool across_hosts = static_cast<bool>(o.launch_prefix);
  const fs::path base = o.tmp_dir.empty() ? fs::temp_directory_path() : fs::path(o.tmp_dir);
  std::string dir = (base / "hpctrain-ddp-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) throw_io("mkdtemp " + dir, errno);
  const std::string result = dir + "/result.json";
  char timeout[32];
  std::snprintf(timeout, sizeof timeout, "%.0f", std::max(1.0, o.collective_timeout_s));
  std::vector<std::string> argv;
  std::vector<std::string> common = {"--model",   o.model,       "--hook",        o.hook,
                                     "--steps",   std::to_string(o.steps),
                                     "--batch",   std::to_string(o.batch),
                                     "--threads", std::to_string(o.threads),
                                     "--warmup",  std::to_string(o.warmup),
                                     "--timeout-s", timeout,
                                     "--log-dir", dir,
                                     "--result-file", result};
  if (o.evaluate) common.push_back("--evaluate");
  if (o.bucket_mb > 0) {
    char mb[32];
    std::snprintf(mb, sizeof mb, "%g", o.bucket_mb);
    common.insert(common.end(), {"--bucket-mb", mb});
  }
  if (o.max_samples > 0) common.insert(common.end(), {"--max-samples", std::to_string(o.max_samples)});
  if (across_hosts) {
    argv = o.launch_prefix(np, {{"GLOO_SOCKET_IFNAME", o.interface},
                                {"MASTER_ADDR", o.master},
                                {"MASTER_PORT", std::to_string(o.port)},
                                {"OMP_NUM_THREADS", std::to_string(o.threads)},
                                {"OPENBLAS_NUM_THREADS", std::to_string(o.threads)}});
    argv.insert(argv.end(), {o.python, o.script, "ddp-rank"});
  } else {
    argv = {o.python, o.script, "ddp", "--np", std::to_string(np)};
  }
  argv.insert(argv.end(), common.begin(), common.end());
  std::fflush(stdout);
  // The script prints its line on stdout too; ours (below) is the one to read.
  auto r = run_subprocess(argv, {}, seconds_to_millis(o.timeout_s));
  nlohmann::json d;
  {
    std::ifstream in(result);
    std::string line;
    if (std::getline(in, line)) d = nlohmann::json::parse(line, nullptr, false);
  }
  const bool failed = r.timed_out || r.signal != 0 || r.exit_code != 0 || !d.is_object();
  if (failed) {
    const std::string error = failure_text(dir, r, o.timeout_s);
    std::fprintf(stderr, "hpctrain: bench train: the DDP peer (hook %s) failed: %s\n  command: %s\n",
                 o.hook.c_str(), error.c_str(), join_command(argv).c_str());
    d = nlohmann::json{{"bench", "train"}, {"impl", "pytorch-ddp"}, {"backend", "gloo"},
                       {"model", o.model}, {"np", np},         {"batch_per_rank", o.batch},
                       {"steps", o.steps}, {"warmup", o.warmup}, {"threads", o.threads},
                       {"hook", o.hook},   {"failed", true},   {"error", error}};
    if (o.bucket_mb > 0) d["bucket_mb"] = o.bucket_mb;
    if (error.find(kHangText) != std::string::npos) d["hung"] = true;
  } else {
    d["failed"] = false;
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  return d;
}

std::vector<nlohmann::json> peer_summaries(const std::vector<nlohmann::json>& ours,
                                           const std::vector<nlohmann::json>& ddp) {
  std::vector<std::pair<int, std::string>> keys;
  for (const auto& d : ddp) {
    std::pair<int, std::string> k{d["np"].get<int>(), d.value("hook", "none")};
    if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  }
  auto figures = [](const std::vector<const nlohmann::json*>& lines, const char* field) {
    std::vector<double> v;
    for (const auto* j : lines) {
      if (j->contains(field) && (*j)[field].is_number()) v.push_back((*j)[field].get<double>());
    }
    return v;
  };
  std::vector<nlohmann::json> out;
  for (const auto& [np, hook] : keys) {
    std::vector<const nlohmann::json*> mine, theirs;
    for (const auto& j : ours) {
      if (j["np"].get<int>() == np) mine.push_back(&j);
    }
    std::string error;
    for (const auto& d : ddp) {
      if (d["np"].get<int>() != np || d.value("hook", "none") != hook) continue;
      theirs.push_back(&d);
      if (d.value("failed", false) && error.empty()) error = d.value("error", "failed");
    }
    nlohmann::json s{{"bench", "train"}, {"np", np}, {"peer", "ddp"}, {"hook", hook}, {"repeats", theirs.size()}};
    s["summary"] = theirs.front()->value("model", "");
    const auto our_sps = figures(mine, "samples_per_s");
    if (!our_sps.empty()) s["hpctrain_samples_per_s"] = median(our_sps);
    s["hpctrain_samples_per_s_repeats"] = our_sps;
    if (!mine.empty()) s["hpctrain_compression"] = mine.front()->value("compression", "");
    const auto our_acc = figures(mine, "test_accuracy");
    if (!our_acc.empty()) s["hpctrain_test_accuracy"] = median(our_acc);
    if (!error.empty()) {
      s["ddp_failed"] = true;
      s["ddp_error"] = error;
    } else {
      s["ddp_failed"] = false;
      const auto theirs_all = figures(theirs, "samples_per_s");
      const double theirs_sps = median(theirs_all);
      s["ddp_samples_per_s"] = theirs_sps;
      s["ddp_samples_per_s_repeats"] = theirs_all;
      if (!our_sps.empty() && theirs_sps > 0) s["ratio"] = median(our_sps) / theirs_sps;
      const auto acc = figures(theirs, "test_accuracy");
      if (!acc.empty()) s["ddp_test_accuracy"] = median(acc);
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace hpct::bench
