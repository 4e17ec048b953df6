// Runs a command line to its end from a test: its output (stdout, plus
// stderr when the command redirects it with 2>&1), the exit status as a
// shell reports it (128 + N when a signal N killed it) and the wall time.
// The caller bounds the command (timeout(1) in the command line).
#pragma once

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace hpct::test {

struct ShellResult {
  int exit_code = -1;  // -1: the shell could not be started
  std::string out;
  double seconds = 0;
};

inline ShellResult run_shell(const std::string& command) {
  ShellResult r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace hpct::test
