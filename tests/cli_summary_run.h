// Runs hpctrain (HPCT_BINARY, defined by each test target) from the train
// tests with one intra-op thread per rank: exit code, output, and the last
// JSON line of the output (rank 0's summary, or a benchmark's result).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "shell_run.h"

namespace hpct::test {

struct CliRun {
  int exit_code = -1;
  std::string out;         // stdout and stderr together
  nlohmann::json summary;  // the last JSON line of the output (discarded when it does not parse)
};

// `cmd` run by the shell, stderr joined to stdout.
inline CliRun run_with_summary(const std::string& cmd) {
  ShellResult s = run_shell(cmd + " 2>&1");
  CliRun r;
  r.exit_code = s.exit_code;
  r.out = std::move(s.out);
  const size_t pos = r.out.rfind("{\"");
  if (pos != std::string::npos) {
    r.summary = nlohmann::json::parse(r.out.substr(pos, r.out.find('\n', pos) - pos), nullptr, false);
  }
  return r;
}

// `hpctrain ARGS`, bounded to 300 s.
inline CliRun run_hpctrain(const std::string& args) {
  return run_with_summary(std::string("timeout 300 env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ") +
                          HPCT_BINARY + " " + args);
}

}  // namespace hpct::test
