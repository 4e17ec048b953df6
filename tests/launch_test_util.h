// Helpers for the tests that run hpctrain launch as users do: run a shell
// command with a time bound, find the rank PIDs a job printed, wait for
// them to be gone.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "netns_hosts.h"
#include "shell_run.h"

namespace launch_test {

struct Outcome {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
  double seconds = 0;
};

// Runs `sh -c cmd` under timeout(1), stdout and stderr together.
inline Outcome run(const std::string& cmd, int timeout_s = 60) {
  auto s = hpct::test::run_shell("timeout -s KILL " + std::to_string(timeout_s) + " sh -c '" + cmd + "' 2>&1");
  return {s.exit_code, s.out, s.seconds};
}

inline int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// PIDs from rank-check --print-pid lines ("[r] pid R PID").
inline std::vector<int> rank_pids(const std::string& out) {
  std::vector<int> pids;
  std::regex re("pid [0-9]+ ([0-9]+)");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it) {
    pids.push_back(std::stoi((*it)[1]));
  }
  return pids;
}

inline bool alive(int pid) {
  if (::kill(pid, 0) != 0) return false;
  // read(2), not an ifstream: a process reaped between open and read makes
  // the read fail with ESRCH, which libstdc++'s filebuf throws as an error.
  int fd = ::open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n <= 0) return false;  // gone while we looked
  std::string s(buf, static_cast<size_t>(n));
  auto close = s.rfind(')');
  return close == std::string::npos || s.size() < close + 3 || s[close + 2] != 'Z';  // zombies are gone
}

// True when every pid has ended within the bound.
inline bool all_gone_within(const std::vector<int>& pids, double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (true) {
    bool any = false;
    for (int p : pids) any = any || alive(p);
    if (!any) return true;
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

inline std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Starts `cmd > out_file 2>&1` in the background, returns the launcher's pid.
inline int start_background(const std::string& cmd, const std::string& out_file) {
  Outcome r = run("(" + cmd + ") > " + out_file + " 2>&1 & echo $!", 10);
  return std::atoi(r.out.c_str());
}

// Waits (bounded) until the file shows `n` occurrences of `what`.
inline std::string wait_for(const std::string& file, const std::string& what, int n, double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::string text;
  while (std::chrono::steady_clock::now() < until) {
    text = slurp(file);
    if (count(text, what) >= n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return text;
}

// KEY=VALUE lines (values may be "quoted"), read from the file at path.
inline std::map<std::string, std::string> read_env_file(const std::string& path) {
  return hpct::test::parse_netns_env(slurp(path));
}

}  // namespace launch_test
