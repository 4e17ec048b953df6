#include "launch/flight_request.h"

#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/file.h"

namespace hpct::launch {
namespace {

// SigCgt of /proc/PID/status: the signals the process catches, as a mask.
bool catches(pid_t pid, int sig) {
  std::istringstream in(read_file_or_empty("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("SigCgt:", 0) != 0) continue;
    const unsigned long long mask = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (mask >> (sig - 1)) & 1ULL;
  }
  return false;
}

}  // namespace

std::vector<GroupProcess> processes_in_group(pid_t group) {
  std::vector<GroupProcess> out;
  DIR* d = ::opendir("/proc");
  if (d == nullptr) return out;
  while (dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    // "PID (COMM) STATE PPID PGRP ...": COMM may hold spaces and parentheses.
    const std::string stat = read_file_or_empty("/proc/" + std::string(e->d_name) + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(stat.substr(close + 1));
    char state = '?';
    long ppid = 0, pgrp = 0;
    if (!(rest >> state >> ppid >> pgrp) || pgrp != group) continue;
    out.push_back({static_cast<pid_t>(pid), state, catches(static_cast<pid_t>(pid), SIGUSR1)});
  }
  ::closedir(d);
  return out;
}

FlightRequest::FlightRequest(std::string job_dir, int rank, std::string host, Millis wait)
    : job_dir_(std::move(job_dir)), rank_(rank), host_(std::move(host)), wait_(wait) {}

std::string FlightRequest::record_path() const {
  return job_dir_ + "/flight/rank-" + std::to_string(rank_) + ".json";
}

// Writes JOB_DIR/flight/rank-R.wrapper.json whole (through a rename).
// Best effort: the job directory may be unreachable from this host, or gone
// (the launcher removed it); it is never made here.
static void write_note(const std::string& job_dir, int rank, const nlohmann::json& note) {
  const std::string dir = job_dir + "/flight";
  if (::access(job_dir.c_str(), F_OK) != 0) return;
  ::mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/rank-" + std::to_string(rank) + ".wrapper.json";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << note.dump(1) << "\n";
    if (!f) return;
  }
  std::rename(tmp.c_str(), path.c_str());
}

bool FlightRequest::start(pid_t group) {
  found_ = processes_in_group(group);
  signalled_ns_ = unix_ns();
  deadline_ = SteadyClock::now() + wait_;
  bool any = false;
  for (const auto& p : found_) {
    if (!p.catches_sigusr1) continue;
    any = true;
    ::kill(p.pid, SIGUSR1);
    // A stopped process takes the signal once it runs again.
    if (p.state == 'T' || p.state == 't') ::kill(p.pid, SIGCONT);
  }
  if (!any) {
    // Only zombies (or nothing) left: the program ended on its own.
    bool ended = true;
    for (const auto& p : found_) ended = ended && p.state == 'Z';
    finish(ended);
  }
  return any;
}

bool FlightRequest::record_written() const {
  struct stat st {};
  if (::stat(record_path().c_str(), &st) != 0) return false;
  const long long mtime_ns = static_cast<long long>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
  return mtime_ns >= signalled_ns_ - 10000000LL;  // file systems keep coarse times
}

bool FlightRequest::done() const { return SteadyClock::now() >= deadline_ || record_written(); }

void FlightRequest::finish(bool program_ended) {
  if (finished_) return;
  finished_ = true;
  nlohmann::json note;
  note["rank"] = rank_;
  note["host"] = host_;
  note["signalled_unix_us"] = signalled_ns_ / 1000;
  note["record_written"] = record_written();
  note["program_ended"] = program_ended;
  note["waited_ms"] = wait_.count();
  nlohmann::json procs = nlohmann::json::array();
  for (const auto& p : found_) {
    procs.push_back({{"pid", p.pid}, {"state", std::string(1, p.state)}, {"catches_sigusr1", p.catches_sigusr1}});
  }
  note["processes"] = procs;
  write_note(job_dir_, rank_, note);
}

void write_end_note(const std::string& job_dir, int rank, const std::string& host, const std::string& ended) {
  const std::string path = job_dir + "/flight/rank-" + std::to_string(rank) + ".wrapper.json";
  nlohmann::json note = nlohmann::json::parse(read_file_or_empty(path), nullptr, false);
  if (note.is_discarded() || !note.is_object()) {
    note = {{"rank", rank}, {"host", host}, {"record_written", false}};
  }
  note["program_ended"] = true;
  note["ended"] = ended;
  write_note(job_dir, rank, note);
}

}  // namespace hpct::launch
